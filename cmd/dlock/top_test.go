package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/headless"
)

// tmux is a tmux server of the test's own (its own socket) running one
// session.
type tmux struct {
	t    *testing.T
	sock string
}

// tmuxBinary returns tmux, or skips the test saying how to install it.
func tmuxBinary(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux not found in PATH: install it (apt-get install -y tmux, as ./test.sh does when run as root)")
	}
	return p
}

// startTmux runs command (a shell command line) in a new tmux session of
// width x height, on a server of its own that the test's cleanup ends.
func startTmux(t *testing.T, width, height int, command string) *tmux {
	t.Helper()
	tm := &tmux{t: t, sock: filepath.Join(t.TempDir(), "tmux.sock")}
	tm.run("-f", "/dev/null", "new-session", "-d", "-s", "top", "-x", fmt.Sprint(width), "-y", fmt.Sprint(height), command)
	// Keep the pane after the command exits, so that its exit can be seen.
	tm.run("set-option", "-t", "top", "remain-on-exit", "on")
	t.Cleanup(func() { _ = exec.Command(tmuxBinary(t), "-S", tm.sock, "kill-server").Run() })
	return tm
}

func (tm *tmux) run(args ...string) string {
	tm.t.Helper()
	out, err := exec.Command(tmuxBinary(tm.t), append([]string{"-S", tm.sock}, args...)...).CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// capture returns the text of the pane; with escapes, its attributes too.
func (tm *tmux) capture(escapes bool) string {
	tm.t.Helper()
	if escapes {
		return tm.run("capture-pane", "-p", "-e", "-t", "top")
	}
	return tm.run("capture-pane", "-p", "-t", "top")
}

// send types keys (tmux key names, or literal text with "-l").
func (tm *tmux) send(keys ...string) {
	tm.t.Helper()
	tm.run(append([]string{"send-keys", "-t", "top"}, keys...)...)
}

// waitScreen polls the pane until cond holds for its text (failing after
// 15s), and returns that text.
func (tm *tmux) waitScreen(what string, cond func(screen string) bool) string {
	tm.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		s := tm.capture(false)
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("timed out waiting for %s; the screen:\n%s", what, s)
		}
		time.Sleep(50 * time.Millisecond) // the pane is another process's output
	}
}

// shortPrefix is a key prefix unique to this run, short enough for 80 columns.
func shortPrefix() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

// topCommandLine is the shell command line running dlock top on the test
// server with args, stderr to errFile.
func topCommandLine(errFile string, args ...string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + a + "'"
	}
	return fmt.Sprintf("env -u DLOCK_ETCD -u DLOCK_ZK DLOCK_REDIS=%s TERM=xterm-256color %s top %s 2>>%s", redisURL(), dlockBin, strings.Join(q, " "), errFile)
}

// startChurn runs, in a process group of its own, a shell loop that takes and
// releases key with dlock run, one process after the other, until the test
// ends.
func startChurn(t *testing.T, key string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 100000 ]; do "$0" run --wait 5s "$1" -- true; i=$((i+1)); done`, dlockBin, key)
	cmd.Env = append(os.Environ(), "DLOCK_REDIS="+redisURL())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
}

// tableRows returns the rows of the table on a screen of dlock top: the lines
// between the column titles and the message line that start with a key of
// prefix (after the marks column).
func tableRows(screen, prefix string) []string {
	var rows []string
	for _, l := range strings.Split(screen, "\n") {
		if len(l) > 3 && strings.HasPrefix(l[3:], prefix) {
			rows = append(rows, l)
		}
	}
	return rows
}

// column returns the text of row under the column titled title on a screen
// of dlock top: for a right-aligned column (WAIT, HOLDERS, ACQ/S, HELD) the last
// word ending under the title's end, for the others the text up to the next
// title.
func column(screen, row, title string) string {
	head := strings.Split(screen, "\n")[2]
	i := strings.Index(head, " "+title+" ")
	if i < 0 && strings.HasSuffix(head, " "+title) {
		i = len(head) - len(title) - 1
	}
	if i < 0 {
		return ""
	}
	r := []rune(row)
	start := len([]rune(head[:i])) + 1
	end := start + len(title)
	switch title {
	case "KEY", "KIND", "HOLDER", "TTL":
		h := []rune(head)
		for end < len(h) && h[end] == ' ' {
			end++
		}
		if end = min(end, len(r)); start >= end {
			return ""
		}
		return strings.TrimSpace(string(r[start:end]))
	}
	if title == "HOLDERS" && len(r) >= end { // "2 of 3": several words
		return strings.TrimSpace(string(r[end-len(title) : end]))
	}
	if end = min(end, len(r)); end-6 < 0 {
		return ""
	}
	f := strings.Fields(string(r[end-6 : end]))
	if len(f) == 0 {
		return ""
	}
	return f[len(f)-1]
}

// keyMatches reports whether field shows key, whole or cut short with "…".
func keyMatches(field, key string) bool {
	if cut, ok := strings.CutSuffix(field, "…"); ok {
		return strings.HasPrefix(key, cut)
	}
	return field == key
}

func rowFor(t *testing.T, screen, key string) string {
	t.Helper()
	for _, l := range strings.Split(screen, "\n") {
		if len(l) > 3 && keyMatches(strings.Fields(l[3:])[0], key) {
			return l
		}
	}
	t.Fatalf("no row for %s:\n%s", key, screen)
	return ""
}

// TestTopInTmux runs dlock top in tmux against locks other dlock processes
// take and release: a mutex, a hostile description, a fair lock with two
// waiters, a semaphore with two of three permits, a lock changing hands all
// the time. At 80 and 200 columns (and 50), it checks the rows, TTL bars,
// waiter counts, acquisitions, that the hostile text forges no row, and the
// force-unlock confirmation naming the holder, its refusal and its audit
// line.
func TestTopInTmux(t *testing.T) {
	tmuxBinary(t)
	p := shortPrefix()
	hostile := "deploy\x1b[2J\x1b[H\n" + p + ":forged  mutex  nobody\u202e"
	holdWith(t, p+":report", "--description", "nightly report")
	holdWith(t, p+":evil", "--description", hostile)
	holdWith(t, p+":deploy", "--fair", "--description", "deploy v42")
	holdWith(t, p+":pool", "-n", "3")
	holdWith(t, p+":pool", "-n", "3")
	for i := 0; i < 2; i++ {
		if err := dlockCmd(t, "run", "--fair", "--wait", "60s", p+":deploy", "--", "true").Start(); err != nil {
			t.Fatal(err)
		}
	}
	startChurn(t, p+":churn")
	auditFile := filepath.Join(t.TempDir(), "audit.log")
	keys := []string{p + ":churn", p + ":deploy", p + ":evil", p + ":pool", p + ":report"}

	check := func(width int) (*tmux, string) {
		tm := startTmux(t, width, 16, topCommandLine(auditFile, "--interval", "300ms", "--sort", "key", p+":*"))
		screen := tm.waitScreen("five rows, two waiters and acquisitions", func(s string) bool {
			// The churn lock may be free at a read: its row stays, free.
			if len(tableRows(s, p+":")) != 5 || column(s, rowFor(t, s, p+":deploy"), "WAIT") != "2" {
				return false
			}
			return !strings.Contains(strings.Split(s, "\n")[2], "ACQ/S") || column(s, rowFor(t, s, p+":churn"), "ACQ/S") != "0"
		})
		var got []string
		for _, r := range tableRows(screen, p+":") {
			got = append(got, strings.Fields(r[3:])[0])
		}
		ok := len(got) == len(keys)
		for i := 0; ok && i < len(got); i++ {
			ok = keyMatches(got[i], keys[i])
		}
		if !ok {
			t.Errorf("%d columns: rows %q, want %q", width, got, keys)
		}
		for _, l := range strings.Split(strings.TrimRight(screen, "\n"), "\n") {
			if n := len([]rune(l)); n > width {
				t.Errorf("%d columns: a line of %d: %q", width, n, l)
			}
			if strings.Contains(l, "forged") && !strings.Contains(l, p+":evil") {
				t.Errorf("%d columns: hostile text reached a line of its own: %q", width, l)
			}
		}
		return tm, screen
	}

	// 80 columns: every field, kinds abridged, TTL bars of 6.
	tm, screen := check(80)
	head := strings.Split(screen, "\n")[2]
	for _, f := range []string{"KEY", "KIND", "HOLDER", "HELD", "TTL", "WAIT", "HOLDERS", "ACQ/S"} {
		if !strings.Contains(head, f) {
			t.Errorf("80 columns: no %s column: %q", f, head)
		}
	}
	ttlBar := regexp.MustCompile(`[█░]{6} +\d+(\.\d)?s `)
	for _, k := range keys[1:] {
		if r := rowFor(t, screen, k); !ttlBar.MatchString(r) {
			t.Errorf("80 columns: row %s has no TTL bar: %q", k, r)
		}
	}
	if !strings.Contains(screen, "2 waiting") {
		t.Errorf("80 columns: the header does not count the 2 waiters:\n%s", screen)
	}
	if r := rowFor(t, screen, p+":pool"); column(screen, r, "HOLDERS") != "2 of 3" || column(screen, r, "KIND") != "sem3" {
		t.Errorf("80 columns: pool row %q: want sem3 and 2 of 3", r)
	}

	// The confirmation names the holder; anything but y cancels.
	tm.send("/")
	tm.send("-l", "report")
	tm.send("Enter")
	tm.waitScreen("the filter", func(s string) bool { return len(tableRows(s, p+":")) == 1 && strings.Contains(s, `filter "report"`) })
	tm.send("u")
	screen = tm.waitScreen("the confirmation", func(s string) bool { return strings.Contains(s, "Force-unlock") })
	if !strings.Contains(screen, `Force-unlock "`+p+`:report"? y removes it`) || !regexp.MustCompile(`held by \S+@\S+ pid \d+ "nightly report" \(owner [0-9a-f]+`).MatchString(screen) {
		t.Errorf("the confirmation does not name the lock and its holder:\n%s", screen)
	}
	tm.send("n")
	tm.waitScreen("the refusal", func(s string) bool { return strings.Contains(s, "not removed: "+p+":report") })
	if r := dlockRun(t, "status", p+":report"); r.code != 0 {
		t.Fatalf("a cancelled confirmation removed the lock")
	}
	tm.send("u")
	tm.waitScreen("the confirmation", func(s string) bool { return strings.Contains(s, "Force-unlock") })
	tm.send("y")
	tm.waitScreen("the removal", func(s string) bool { return strings.Contains(s, `removed "`+p+`:report" held by`) })
	waitFor(t, "the audit line", fileHas(auditFile, `force-unlocked "`+p+`:report" held by`))
	if b, _ := os.ReadFile(auditFile); !regexp.MustCompile(`^dlock top: \S+ force-unlocked "` + p + `:report" held by \S+ pid \d+ "nightly report" \(owner [0-9a-f]+, token \d+\)\n$`).Match(b) {
		t.Errorf("audit line %q", b)
	}
	tm.send("q")
	tm.waitScreen("top to quit", func(s string) bool {
		return strings.Contains(tm.run("list-panes", "-t", "top", "-F", "#{pane_dead}"), "1")
	})

	// 200 columns: whole kinds and holders, TTL bars of 10.
	keys = []string{p + ":churn", p + ":deploy", p + ":evil", p + ":pool"}
	holdWith(t, p+":report", "--description", "nightly report")
	keys = append(keys, p+":report")
	tm, screen = check(200)
	if r := rowFor(t, screen, p+":pool"); !strings.Contains(r, "semaphore 3") {
		t.Errorf("200 columns: pool row %q: want semaphore 3", r)
	}
	if r := rowFor(t, screen, p+":deploy"); !regexp.MustCompile(`\S+@\S+ pid \d+ "deploy v42" +\S+ [█░]{10} +\d+(\.\d)?s +2 `).MatchString(r) {
		t.Errorf("200 columns: deploy row %q: want the holder, a TTL bar of 10 and 2 waiters", r)
	}
	if r := rowFor(t, screen, p+":evil"); !strings.Contains(r, `"deploy\x1b[2J\x1b[H\n`+p+`:forged  mutex  nobody\u202e"`) {
		t.Errorf("200 columns: evil row %q: want the whole description escaped", r)
	}
	keepScreenshot(t, tm, "top.png")
	tm.send("q")

	// 50 columns: fewer fields.
	tm, screen = check(50)
	head = strings.Split(screen, "\n")[2]
	if strings.Contains(head, "KIND") || strings.Contains(head, "ACQ/S") || !strings.Contains(head, "WAIT") || !strings.Contains(head, "TTL") {
		t.Errorf("50 columns: header %q: want KEY, HOLDER, TTL, WAIT and no KIND, ACQ/S", head)
	}
	tm.send("q")
}

// TestTopNeedsTerminal: in a pipe, top says to use list --watch.
func TestTopNeedsTerminal(t *testing.T) {
	r := dlockRun(t, "top")
	if r.code != exitUsage || !strings.Contains(r.stderr, "list --watch") {
		t.Errorf("top in a pipe: exit %d %q", r.code, r.stderr)
	}
	if r := dlockRun(t, "top", "--sort", "size"); r.code != exitUsage {
		t.Errorf("top --sort size: exit %d %q", r.code, r.stderr)
	}
}

// TestListWatch: list --watch prints the table every interval, with the
// waiters and escaped holder text, until interrupted.
func TestListWatch(t *testing.T) {
	p := shortPrefix()
	holdWith(t, p+":a", "--fair", "--description", "line\nbreak\x1b[31m")
	if err := dlockCmd(t, "run", "--fair", "--wait", "60s", p+":a", "--", "true").Start(); err != nil {
		t.Fatal(err)
	}
	cmd := dlockCmd(t, "list", "--watch", "--interval", "200ms", p+":*")
	var out string
	cmd.Stdout = outFile(t, &out)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three blocks with the waiter", func() bool { return strings.Count(readFile(out), "1 held, 1 waiting") >= 3 })
	_ = cmd.Process.Signal(syscall.SIGINT)
	res := wait(t, cmd, time.Now(), new(bytes.Buffer), new(bytes.Buffer))
	if res.code != 0 {
		t.Errorf("list --watch after SIGINT: exit %d", res.code)
	}
	var block string
	for _, b := range strings.Split(readFile(out), "\n\n") {
		if strings.Contains(b, "1 held, 1 waiting") {
			block = b
			break
		}
	}
	lines := strings.Split(block, "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "KEY") || !regexp.MustCompile(`^`+p+`:a +(exclusive|fair) +1 +\S+ +\d+ +.+ +1 +[\d.]+ +- +line\\nbreak\\x1b\[31m$`).MatchString(lines[2]) {
		t.Errorf("list --watch block:\n%s", block)
	}
}

// keepScreenshot renders the pane (with its attributes) as HTML in Chromium
// and keeps it as name in the artifacts directory ($DLOCK_TEST_ARTIFACTS).
func keepScreenshot(t *testing.T, tm *tmux, name string) {
	dir := os.Getenv("DLOCK_TEST_ARTIFACTS")
	if dir == "" {
		return
	}
	headless.Chromium(t)
	page := filepath.Join(t.TempDir(), "top.html")
	if err := os.WriteFile(page, []byte(paneHTML(tm.capture(true))), 0o644); err != nil {
		t.Fatal(err)
	}
	headless.Screenshot(t, "file://"+page, filepath.Join(dir, name), 1720, 330, time.Second)
}

// paneHTML renders captured pane text with the SGR attributes dlock top uses
// (bold, dim, reverse, yellow) as an HTML page of a dark terminal.
func paneHTML(pane string) string {
	var b strings.Builder
	b.WriteString(`<!doctype html><meta charset="utf-8"><body style="margin:0;background:#1e1e1e"><pre style="margin:0;padding:10px;font:14px/1.25 'DejaVu Sans Mono',monospace;color:#d4d4d4">`)
	sgr := regexp.MustCompile(`\x1b\[([0-9;]*)m`)
	// tmux writes an attribute where it changes, also across line ends.
	style := map[string]string{}
	span := func() {
		var css []string
		for _, k := range []string{"weight", "opacity", "reverse", "color"} {
			if v := style[k]; v != "" {
				css = append(css, v)
			}
		}
		if len(css) > 0 {
			b.WriteString(`<span style="` + strings.Join(css, ";") + `">`)
		}
	}
	for _, line := range strings.Split(strings.TrimRight(pane, "\n"), "\n") {
		span()
		last := 0
		for _, m := range sgr.FindAllStringSubmatchIndex(line, -1) {
			b.WriteString(html.EscapeString(line[last:m[0]]))
			last = m[1]
			if len(style) > 0 {
				b.WriteString("</span>")
			}
			for _, code := range strings.Split(line[m[2]:m[3]], ";") {
				switch code {
				case "", "0":
					clear(style)
				case "1":
					style["weight"] = "font-weight:bold"
				case "2":
					style["opacity"] = "opacity:.6"
				case "7":
					style["reverse"] = "background:#d4d4d4;color:#1e1e1e"
				case "32":
					style["color"] = "color:#98c379"
				case "33":
					style["color"] = "color:#e5c07b"
				case "39":
					delete(style, "color")
				case "22":
					delete(style, "weight")
					delete(style, "opacity")
				case "27":
					delete(style, "reverse")
				}
			}
			span()
		}
		b.WriteString(html.EscapeString(line[last:]))
		if len(style) > 0 {
			b.WriteString("</span>")
		}
		b.WriteString("\n")
	}
	b.WriteString("</pre>")
	return b.String()
}

// TestTopShowsRowWhole runs dlock top at 80 columns on a plain lock with a
// 50-character key, a long description and a dlock run waiting for it: the
// waiter is counted, the table cuts the key and the holder, and Enter shows
// the selected row whole (Enter again hides it).
func TestTopShowsRowWhole(t *testing.T) {
	tmuxBinary(t)
	p := shortPrefix()
	key := p + ":" + strings.Repeat("nightly-report-", 2)
	key += strings.Repeat("x", 50-len(key))
	desc := "rebuilding the search index of every region, then the caches, then the sitemaps"
	holdWith(t, key, "--description", desc)
	if err := dlockCmd(t, "run", "--wait", "60s", key, "--", "true").Start(); err != nil {
		t.Fatal(err)
	}
	tm := startTmux(t, 80, 24, topCommandLine(filepath.Join(t.TempDir(), "audit.log"), "--interval", "300ms", p+":*"))
	screen := tm.waitScreen("the row with its waiter", func(s string) bool {
		rows := tableRows(s, p+":")
		return len(rows) == 1 && column(s, rows[0], "WAIT") == "1"
	})
	if strings.Contains(screen, key) || strings.Contains(screen, desc) {
		t.Fatalf("80 columns: the key and the holder fit already; the test needs them cut:\n%s", screen)
	}
	if !strings.Contains(screen, "1 held, 1 waiting") {
		t.Errorf("the header does not count the waiter:\n%s", screen)
	}
	tm.send("Enter")
	screen = tm.waitScreen("the row whole", func(s string) bool { return strings.Contains(s, key) })
	joined := strings.Join(strings.Fields(strings.ReplaceAll(screen, "\n          ", "")), " ")
	for _, want := range []string{"key " + key, desc, "waiters 1", "holders 1", "owner "} {
		if !strings.Contains(joined, want) {
			t.Errorf("the row whole lacks %q:\n%s", want, screen)
		}
	}
	for _, l := range strings.Split(strings.TrimRight(screen, "\n"), "\n") {
		if n := len([]rune(l)); n > 80 {
			t.Errorf("a line of %d columns: %q", n, l)
		}
	}
	tm.send("Enter")
	tm.waitScreen("the row hidden again", func(s string) bool { return !strings.Contains(s, key) })
	tm.send("q")
}
