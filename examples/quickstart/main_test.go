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
// whole program (after its package comment), line by line, so that what the
// README shows compiles and runs when pasted, and that it says which modules to
// get.
func TestReadmeShowsThisProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Quick start\n")
	if !ok {
		t.Fatal("README has no Quick start section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "```go\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("README's Quick start has no Go block")
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, program, ok := strings.Cut(string(src), "\npackage main\n")
	if !ok {
		t.Fatal("main.go has no package clause after its comment")
	}
	want, got := codeLines("package main\n"+program), codeLines(block)
	for i := 0; i < len(want) || i < len(got); i++ {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			t.Fatalf("README's quick start differs from main.go at line %d: README %q, main.go %q", i+1, g, w)
		}
	}
	for _, mod := range []string{"github.com/dlock-go/dlock ", "github.com/redis/go-redis/v9", "dlock/etcdlock", "dlock/zklock"} {
		if !strings.Contains(section, "go get ") || !strings.Contains(section, mod) {
			t.Errorf("README's quick start has no go get line for %s", mod)
		}
	}
}

// codeLines returns the lines of src without indentation, and without blank
// lines.
func codeLines(src string) []string {
	var out []string
	for _, l := range strings.Split(src, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
