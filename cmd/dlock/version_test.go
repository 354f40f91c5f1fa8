package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// buildIn builds dlock from the module in dir with the go build flags flags
// and returns what its "dlock version" prints.
func buildIn(t *testing.T, dir string, flags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "dlock")
	cmd := exec.Command("go", append(append([]string{"build", "-o", bin}, flags...), ".")...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", flags, err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("dlock version: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// gitIn runs git with args in dir and returns its output.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

// copyModule copies the module in dir (its go.mod, go.sum and non-test Go
// files) to dst, its replace lines pointing where they pointed.
func copyModule(t *testing.T, dir, dst string) {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		name := en.Name()
		if en.IsDir() || name != "go.mod" && name != "go.sum" && (!strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go")) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "go.mod" {
			b = regexp.MustCompile(`=> (\.\./\S*)`).ReplaceAllFunc(b, func(m []byte) []byte {
				return []byte("=> " + filepath.Join(abs, string(m[3:])))
			})
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestVersionOfBothBuilds builds dlock as go build does in a git clone (the
// commit stamped, and a modified tree) and with -buildvcs=false (with and without the commit given
// at link time): each prints the release the tree leads to, the commit, and
// the Go version; none prints a pseudo-version or "(devel)".
func TestVersionOfBothBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds dlock four times")
	}
	// go build stamps the commit of a repository whose .git is a directory
	// (not a linked worktree's file): a copy of this module, committed, built
	// against the same modules as this one.
	repo := t.TempDir()
	dir := filepath.Join(repo, "cmd", "dlock")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	copyModule(t, ".", dir)
	gitIn(t, repo, "init", "-q")
	gitIn(t, repo, "add", "-A")
	gitIn(t, repo, "commit", "-q", "-m", "tree")
	head := gitIn(t, repo, "rev-parse", "HEAD")

	prefix := "dlock " + devVersion() + " ("
	stamped := buildIn(t, dir, "-buildvcs=true")
	if want := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix+"commit "+head[:12]+", ") + `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\) ` + regexp.QuoteMeta(runtime.Version()) + `$`); !want.MatchString(stamped) {
		t.Errorf("stamped build: %q, want %s", stamped, want)
	}
	if got, want := buildIn(t, dir, "-buildvcs=false", "-ldflags=-X main.commit="+head), prefix+"commit "+head[:12]+") "+runtime.Version(); got != want {
		t.Errorf("-buildvcs=false with the commit given: %q, want %q", got, want)
	}
	if got, want := buildIn(t, dir, "-buildvcs=false"), prefix+"commit unknown: built without VCS stamping) "+runtime.Version(); got != want {
		t.Errorf("-buildvcs=false: %q, want %q", got, want)
	}
	if err := os.WriteFile(filepath.Join(dir, "x.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := buildIn(t, dir, "-buildvcs=true"); !strings.HasSuffix(got, ", modified) "+runtime.Version()) {
		t.Errorf("stamped build of a modified tree: %q", got)
	}
}

// TestNextReleaseFollowsTheChangelog checks that the version a checkout calls
// itself moves past the last release once anything changed after it: with
// entries under CHANGELOG.md's Unreleased, nextRelease names a later release
// and builds say -dev; with none, they say the release.
func TestNextReleaseFollowsTheChangelog(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := bytes.Cut(b, []byte("\n## [Unreleased]\n"))
	if !ok {
		t.Fatal("CHANGELOG.md has no Unreleased section")
	}
	unreleased, _, _ := bytes.Cut(rest, []byte("\n## ["))
	pending := regexp.MustCompile(`(?m)^- `).Match(unreleased)
	switch {
	case pending && (nextRelease == "" || semverLess(nextRelease, moduleVersion) || nextRelease == moduleVersion):
		t.Errorf("CHANGELOG.md has unreleased entries, and nextRelease is %q (the last release %s)", nextRelease, moduleVersion)
	case pending && devVersion() != nextRelease+"-dev":
		t.Errorf("devVersion %q, want %s-dev", devVersion(), nextRelease)
	case !pending && nextRelease != "":
		t.Errorf("nothing is unreleased, and nextRelease is %q: want \"\" (builds are %s)", nextRelease, moduleVersion)
	}
}

// semverLess compares two vX.Y.Z versions.
func semverLess(a, b string) bool {
	var x, y [3]int
	parse := func(v string, out *[3]int) {
		for i, f := range strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3) {
			n := 0
			for _, c := range f {
				if c < '0' || c > '9' {
					break
				}
				n = n*10 + int(c-'0')
			}
			out[i] = n
		}
	}
	parse(a, &x)
	parse(b, &y)
	for i := range x {
		if x[i] != y[i] {
			return x[i] < y[i]
		}
	}
	return false
}
