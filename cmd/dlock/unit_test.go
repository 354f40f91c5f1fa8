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

func TestRedactHidesEveryFormOfThePassword(t *testing.T) {
	for _, tc := range []struct{ url, msg string }{
		{"redis://:hunter2@h:1/0", `dial redis://:hunter2@h:1/0 failed`},
		{"redis://bob:p%40ss@h:1/0", `bad password p@ss or p%40ss for bob:p%40ss`},
		{"rediss://onlyuser@h:1", `user onlyuser rejected`},
		{"redis://u:pa ss@[bad", `parse "redis://u:pa ss@[bad": missing ']'`},
	} {
		got := redact(tc.msg, tc.url)
		for _, secret := range []string{"hunter2", "p@ss", "p%40ss", "onlyuser", "pa ss"} {
			if strings.Contains(tc.url, strings.ReplaceAll(secret, "@", "%40")) && strings.Contains(got, secret) {
				t.Errorf("redact(%q) = %q still shows %q", tc.msg, got, secret)
			}
		}
	}
	if got := redact("no secrets here", "redis://h:1/0"); got != "no secrets here" {
		t.Errorf("redact changed a message without secrets: %q", got)
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
