package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dlock-go/dlock/internal/holder"
)

// TestRedactHidesOnlyThePassword: a message keeps everything but the
// password of the connection string, which is hidden where the message shows
// it as one (in a URL's user information, in a password field), and only
// there: a user name equal to the password, and words that contain it, stay.
func TestRedactHidesOnlyThePassword(t *testing.T) {
	for _, tc := range []struct{ raw, msg, want string }{
		{"postgres://u:p@h/db",
			`dial postgres://u:p@h/db: open pipe`,
			`dial postgres://u:xxxxx@h/db: open pipe`},
		{"redis://:p@h:1/0",
			`dial redis://:p@h:1/0 failed: pipe open`,
			`dial redis://:xxxxx@h:1/0 failed: pipe open`},
		{"redis://bob:e@h:1/0", // a password that is a piece of other words
			`cannot connect to redis://bob:e@h:1/0: user bob rejected`,
			`cannot connect to redis://bob:xxxxx@h:1/0: user bob rejected`},
		{"postgres://postgres:postgres@h:5432/postgres", // a password equal to the user name
			`role "postgres" refused by postgres://postgres:postgres@h:5432/postgres`,
			`role "postgres" refused by postgres://postgres:xxxxx@h:5432/postgres`},
		{"redis://bob:p%40ss@h:1/0", // as given and percent-decoded
			`parse "redis://bob:p%40ss@h:1/0" (redis://bob:p@ss@h:1/0)`,
			`parse "redis://bob:xxxxx@h:1/0" (redis://bob:xxxxx@h:1/0)`},
		{"redis://u:pa ss@[bad", // malformed: up to the last @
			`parse "redis://u:pa ss@[bad": missing ']'`,
			`parse "redis://u:xxxxx@[bad": missing ']'`},
		{"redis://u:p@ss@h:1/0",
			`parse "redis://u:p@ss@h:1/0": bad`,
			`parse "redis://u:xxxxx@h:1/0": bad`},
		{"rediss://onlyuser@h:1", // a user name only: nothing to hide
			`user onlyuser rejected by rediss://onlyuser@h:1`,
			`user onlyuser rejected by rediss://onlyuser@h:1`},
		{"redis://h:1/0",
			`redirected to redis://x:y@other:2/0`,
			`redirected to redis://x:xxxxx@other:2/0`},
		{"host=h user=u password=s3cret dbname=d",
			"cannot parse `host=h user=u password=s3cret dbname=d`: bad",
			"cannot parse `host=h user=u password=xxxxx dbname=d`: bad"},
		{"user=postgres password=postgres host=h", // a password equal to the user name
			`role "postgres": user=postgres password=postgres host=h`,
			`role "postgres": user=postgres password=xxxxx host=h`},
		{`host=h password = 'a b\' c' user=u`, // quoted, with an escape
			`bad: host=h password = 'a b\' c' user=u`,
			`bad: host=h password = xxxxx user=u`},
		{"host=h password=e dbname=d", // a password that is a piece of other words
			`cannot connect: the server closed the connection: host=h password=e dbname=d`,
			`cannot connect: the server closed the connection: host=h password=xxxxx dbname=d`},
		{"postgres://u@h/db?password=pw&sslmode=disable",
			`dial postgres://u@h/db?password=pw&sslmode=disable`,
			`dial postgres://u@h/db?password=xxxxx&sslmode=disable`},
		{"postgres://u:p@h/db?passwordless=1&db_password=x",
			`keys passwordless=1 db_password=x`,
			`keys passwordless=1 db_password=x`},
		{"redis://h:1/0", "no secrets here", "no secrets here"},
	} {
		if got := redact(tc.msg, tc.raw); got != tc.want {
			t.Errorf("redact(%q, %q)\n = %q\nwant %q", tc.msg, tc.raw, got, tc.want)
		}
	}
}

// TestMaskURL: a URL, or what was given as one, as messages show it: its
// password hidden, its user name kept.
func TestMaskURL(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://u:s3cret@h:1/0":            "redis://u:xxxxx@h:1/0",
		"redis://:s3cret@h:2/0":             "redis://:xxxxx@h:2/0",
		"postgres://postgres:postgres@h/db": "postgres://postgres:xxxxx@h/db",
		"redis://u:p@ss/x@h:1/0":            "redis://u:xxxxx@h:1/0",
		"rediss://onlyuser@h:1":             "rediss://onlyuser@h:1",
		"u:s3cret@127.0.0.1:1":              "u:xxxxx@127.0.0.1:1",
		"--redis=redis://u:s3cret@h:1/0":    "--redis=redis://u:xxxxx@h:1/0",
		"host=h password=p@x:y user=u":      "host=h password=xxxxx user=u",
		"postgres://h/db?password=pw&x=1":   "postgres://h/db?password=xxxxx&x=1",
		"redis://h:1/0":                     "redis://h:1/0",
		"frobnicate":                        "frobnicate",
	} {
		if got := maskURL(raw); got != want {
			t.Errorf("maskURL(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestDurationFlag(t *testing.T) {
	ttl := func() *durationFlag { return &durationFlag{min: minRunTTL, max: 720 * time.Hour, wholeMS: true} }
	wait := func() *durationFlag { return &durationFlag{zero: "try once"} }
	for _, tc := range []struct {
		f    *durationFlag
		in   string
		want time.Duration
		err  string
	}{
		{ttl(), "2s", 2 * time.Second, ""},
		{ttl(), "1m30s", 90 * time.Second, ""},
		{ttl(), "10", 0, "missing unit"},
		{ttl(), "-1s", 0, "negative"},
		{ttl(), "0", 0, "minimum"},
		{ttl(), "1e9h", 0, "not a duration"},
		{ttl(), "abc", 0, "not a duration"},
		{ttl(), "1.5ms", 0, "minimum"},
		{ttl(), "100.5ms", 0, "whole number of milliseconds"},
		{ttl(), "99999999h", 0, "not a duration"},
		{ttl(), "800h", 0, "maximum"},
		{wait(), "0", 0, ""},
		{wait(), "1.5ms", 1500 * time.Microsecond, ""},
		{wait(), "-1s", 0, "negative"},
	} {
		err := tc.f.Set(tc.in)
		switch {
		case tc.err == "" && (err != nil || tc.f.d != tc.want || !tc.f.set):
			t.Errorf("Set(%q) = %v, %v; want %v", tc.in, tc.f.d, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("Set(%q) error %v, want %q", tc.in, err, tc.err)
		}
	}
}

func TestExitCodeOfErrors(t *testing.T) {
	if exitCode(usageErrorf("x")) != exitUsage || exitCode(unavailableErrorf("x")) != exitUnavailable ||
		exitCode(errors.New("x")) != exitFailure || exitCode(nil) != exitOK {
		t.Error("exit codes of errors")
	}
}

func TestParseMetaTakesSinceFromToken(t *testing.T) {
	since := time.Now().Add(-10 * time.Second).UTC().Truncate(time.Millisecond)
	acquired := since.Add(3 * time.Second)
	raw := `{"host":"h","pid":7,"since":"` + since.Format(time.RFC3339Nano) + `"}`
	m, rest := parseMeta(raw, uint64(acquired.UnixMicro()))
	if m == nil || rest != "" || m.Host != "h" || m.PID != 7 || !m.Since.Equal(acquired) {
		t.Errorf("parseMeta = %+v, %q; want since %v", m, rest, acquired)
	}
	// A token that is no plausible time leaves the stored time alone.
	if m, _ := parseMeta(raw, 42); m == nil || !m.Since.Equal(since) {
		t.Errorf("parseMeta with a small token = %+v", m)
	}
	// Foreign metadata is shown raw.
	if m, rest := parseMeta("job 7", 42); m != nil || rest != "job 7" {
		t.Errorf("parseMeta(foreign) = %+v, %q", m, rest)
	}
}

func TestPrintableAndJSONEscapes(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, ünïcode":   "plain text, ünïcode",
		"a\x1b[31mb\nc\td":      `a\x1b[31mb\nc\td`,
		"csi\u009b rlo\u202e":   `csi\u009b rlo\u202e`,
		"bad \xff utf8":         `bad \xff utf8`,
		"tag \U000e0041 astral": `tag \U000e0041 astral`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
		js, _ := json.Marshal(in)
		esc := escapeJSONControls(js)
		var back string
		if err := json.Unmarshal(esc, &back); err != nil || (back != in && utf8.ValidString(in)) {
			t.Errorf("escapeJSONControls(%s) = %s, decodes to %q (%v)", js, esc, back, err)
		}
		if bytes.ContainsFunc(esc, func(r rune) bool { return r >= 0x7f && !holder.IsPrintable(r) && r != utf8.RuneError }) {
			t.Errorf("escapeJSONControls(%s) = %s leaves a control character", js, esc)
		}
	}
}

func TestDescribeBuild(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"},
		{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	dev := "dlock " + devVersion()
	for _, tc := range []struct {
		bi   *debug.BuildInfo
		rev  string
		want string
	}{
		{bi, "", "dlock v1.2.0 (commit 0123456789ab, 2026-01-02T03:04:05Z, modified) go1.26.0"},
		{&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}, "", dev + " (commit unknown: built without VCS stamping) go1.26.0"},
		{&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}, "fedcba9876543210", dev + " (commit fedcba987654) go1.26.0"},
		{&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: bi.Settings[:1]}, "", dev + " (commit 0123456789ab) go1.26.0"},
		// go build in a clone stamps a pseudo-version; go install ...@main too.
		{&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.0.0-20261202020304-a47439e2f0e4+dirty"}, Settings: bi.Settings}, "", dev + " (commit 0123456789ab, 2026-01-02T03:04:05Z, modified) go1.26.0"},
		{&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.1.1-0.20261202020304-a47439e2f0e4"}}, "", dev + " (commit a47439e2f0e4, 2026-12-02T02:03:04Z) go1.26.0"},
		{&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.0.0-20261202020304-a47439e2f0e4+dirty"}}, "", dev + " (commit a47439e2f0e4, 2026-12-02T02:03:04Z, modified) go1.26.0"},
		// go install ...@v0.2.0: the tag names the commit.
		{&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.2.0"}}, "", "dlock v0.2.0 (tag cmd/dlock/v0.2.0) go1.26.0"},
		{nil, "", dev + " (commit unknown: built without VCS stamping) " + runtime.Version()},
	} {
		if got := describeBuild(tc.bi, tc.rev); got != tc.want {
			t.Errorf("describeBuild = %q, want %q", got, tc.want)
		}
	}
}

func TestOneLine(t *testing.T) {
	a, b := errors.New("dlock: not obtained"), errors.New("dial tcp: connection refused")
	if got, want := oneLine(errors.Join(a, errors.Join(b, b))), "dlock: not obtained; dial tcp: connection refused"; got != want {
		t.Errorf("oneLine = %q, want %q", got, want)
	}
}

func TestFit(t *testing.T) {
	for _, tc := range []struct {
		line  string
		width int
		want  string
	}{
		{"short", 80, "short"},
		{"exactly10!", 10, "exactly1…"},
		{"anything", 0, "anything"},
		{"ünïcödé line", 6, "ünïc…"},
	} {
		if got := fit(tc.line, tc.width); got != tc.want {
			t.Errorf("fit(%q, %d) = %q, want %q", tc.line, tc.width, got, tc.want)
		}
	}
}

// TestHelpNamesEveryBackend checks that "dlock --help" and the error of a run
// without a server name every backend's flag with what it takes.
func TestHelpNamesEveryBackend(t *testing.T) {
	var help bytes.Buffer
	usage(&help)
	choices := serverChoices()
	for _, b := range backends() {
		flag := "--" + b.flag + " " + b.metavar
		if b.metavar == "" || !strings.Contains(help.String(), flag) || !strings.Contains(help.String(), "$"+b.env[0]) {
			t.Errorf("dlock --help does not show %q with $%s:\n%s", flag, b.env[0], help.String())
		}
		if b.metavar == "" || !strings.Contains(choices, flag+",") && !strings.HasSuffix(strings.Split(choices, ", or set")[0], flag) {
			t.Errorf("the no-server error does not name %q: %s", flag, choices)
		}
	}
}
