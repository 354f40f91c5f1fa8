package main

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testserver"
)

var srv *testserver.Redis

func TestMain(m *testing.M) { os.Exit(testserver.Main(m, func(r *testserver.Redis) { srv = r })) }

// TestQuickStartRuns runs the quick start against a real server: every step
// succeeds, and the second lock's token is above the first's.
func TestQuickStartRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	start := time.Now()
	if err := run(ctx, srv.Addr, &out); err != nil {
		t.Fatalf("quick start: %v\n%s", err, out.String())
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("quick start took %v: it waited for a lock it held itself", d)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || lines[0] != "processed order 42" {
		t.Fatalf("output:\n%s", out.String())
	}
	first := token(t, lines[1], "pulled the feed with fencing token ")
	second := token(t, lines[2], "pulled the feed again with fencing token ")
	if second <= first {
		t.Errorf("tokens %d then %d: not increasing", first, second)
	}
}

func token(t *testing.T, line, prefix string) uint64 {
	t.Helper()
	s, ok := strings.CutPrefix(line, prefix)
	n, err := strconv.ParseUint(s, 10, 64)
	if !ok || err != nil || n == 0 {
		t.Fatalf("line %q, want %q and a token", line, prefix)
	}
	return n
}

// TestReadmeShowsThisProgram checks that the README's quick start is this
// program's code, line by line in order, so that what the README shows
// compiles and runs.
func TestReadmeShowsThisProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Quick start\n")
	if !ok {
		t.Fatal("README has no Quick start section")
	}
	_, block, ok := strings.Cut(section, "```go\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("README's Quick start has no Go block")
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	rest := string(src)
	for _, line := range strings.Split(block, "\n") {
		// The README names the address that run gets from its caller.
		line = strings.ReplaceAll(strings.TrimSpace(line), `Addr: "127.0.0.1:6379"`, "Addr: addr")
		if line == "" {
			continue
		}
		i := strings.Index(rest, line)
		if i < 0 {
			t.Fatalf("README's quick start line %q is not in main.go (or not in the same order)", line)
		}
		rest = rest[i+len(line):]
	}
}
