// Package headless runs Debian's chromium without a display for the tests of
// dlock's web views: it loads a page, lets its scripts run for a virtual time
// budget, and returns the DOM or a screenshot.
package headless

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// timeout bounds one chromium run.
const timeout = 90 * time.Second

// Chromium returns the chromium executable ($DLOCK_CHROMIUM overrides), or
// skips the test, saying how to install it, when there is none.
func Chromium(t testing.TB) string {
	t.Helper()
	names := []string{"chromium", "chromium-browser", "google-chrome"}
	if v := os.Getenv("DLOCK_CHROMIUM"); v != "" {
		names = []string{v}
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	t.Skip("headless: chromium not found in PATH: install it (apt-get install -y chromium, as ./test.sh does when run as root)")
	return ""
}

// args are the flags of every run: headless, no sandbox (tests run as root),
// no network beyond the page, a fresh profile.
func args(t testing.TB, extra ...string) []string {
	return append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--disable-default-apps", "--hide-scrollbars", "--mute-audio",
		"--user-data-dir=" + t.TempDir(),
	}, extra...)
}

func run(t testing.TB, argv []string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, Chromium(t), argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", argv, err, tail(stderr.Bytes()))
	}
	return stdout.Bytes()
}

func tail(b []byte) []byte {
	if len(b) > 4000 {
		return b[len(b)-4000:]
	}
	return b
}

// DumpDOM loads url, lets its scripts run for budget of virtual time (the
// page's fetches complete within it), and returns the serialized DOM.
func DumpDOM(t testing.TB, url string, budget time.Duration) string {
	t.Helper()
	return string(run(t, args(t, "--virtual-time-budget="+strconv.FormatInt(budget.Milliseconds(), 10), "--dump-dom", url)))
}

// Screenshot loads url in a window of width x height pixels, lets its scripts
// run for budget, and writes a PNG of it to path.
func Screenshot(t testing.TB, url, path string, width, height int, budget time.Duration) {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	run(t, args(t, "--virtual-time-budget="+strconv.FormatInt(budget.Milliseconds(), 10),
		fmt.Sprintf("--window-size=%d,%d", width, height), "--screenshot="+abs, url))
	if fi, err := os.Stat(abs); err != nil || fi.Size() == 0 {
		t.Fatalf("chromium wrote no screenshot to %s: %v", abs, err)
	}
}
