package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeShowsDemoOutput runs the demo and checks that the README shows its
// output as it is now: the same lines in the same order, figures aside; and that
// the README says how long ./test.sh takes and that it fetches staticcheck,
// which test.sh then shows progress for package by package.
func TestReadmeShowsDemoOutput(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```\ndlock demo on ")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal(`README has no block of demo output starting "dlock demo on "`)
	}
	r := dlockRun(t, "demo", "--workers", "2", "--rounds", "3", "--stock", "3")
	if r.code != 0 {
		t.Fatalf("demo: exit %d %s", r.code, r.stderr)
	}
	want, got := shapeOf(r.stdout), shapeOf("dlock demo on "+block)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("README's demo output is not the demo's:\nREADME:\n%s\n\ndemo:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	_, two, _ := strings.Cut(string(readme), "## Two commands")
	two, _, _ = strings.Cut(two, "\n## ")
	for _, want := range []string{"./test.sh", "minutes", "staticcheck"} {
		if !strings.Contains(two, want) {
			t.Errorf("README's Two commands does not say %q", want)
		}
	}
	script, err := os.ReadFile("../../test.sh")
	if err != nil {
		t.Fatal(err)
	}
	// Progress: a timed line before every step, and go test's own line as each
	// package finishes (so no -json, no output swallowed).
	if !regexp.MustCompile(`(?m)^say\(\) \{.*SECONDS`).Match(script) || strings.Count(string(script), "\nsay ") < 3 ||
		regexp.MustCompile(`go test [^\n]*(-json|>\s*/dev/null)`).Match(script) {
		t.Errorf("test.sh does not show its progress step by step and package by package")
	}
}

// shapeOf returns the non-blank lines of a demo's output with the figures (and
// the runs of spaces that align them) reduced to "#" and " ".
func shapeOf(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		l = figures.ReplaceAllString(l, "#")
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

var figures = regexp.MustCompile(`[0-9][0-9.:]*(µs|ms|s|m)?`)

// TestReadmeNamesEveryBackend checks that the README's CLI section and its
// Layout row of the CLI name the flag of every backend.
func TestReadmeNamesEveryBackend(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, cli, _ := strings.Cut(string(readme), "\n## CLI")
	cli, _, _ = strings.Cut(cli, "\n## ")
	_, row, _ := strings.Cut(string(readme), "\n| `cmd/dlock/` |")
	row, _, _ = strings.Cut(row, "\n")
	for _, b := range backends() {
		if !strings.Contains(cli, "--"+b.flag) {
			t.Errorf("README's CLI section does not name --%s", b.flag)
		}
		if !strings.Contains(row, "--"+b.flag) {
			t.Errorf("README's Layout row of cmd/dlock does not name --%s: %s", b.flag, row)
		}
	}
}

// TestReadmeTestSuiteAndModules checks what the README says of the test suite
// and of dlockprom: a range of minutes for ./test.sh, test.sh showing
// redislock's tests one by one as they end, and dlockprom named as a package of
// the dlockotel module, imported by its path.
func TestReadmeTestSuiteAndModules(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, two, _ := strings.Cut(string(readme), "## Two commands")
	two, _, _ = strings.Cut(two, "\n## ")
	if !regexp.MustCompile(`\d+ to \d+ minutes`).MatchString(two) || !strings.Contains(two, "Most of it") {
		t.Errorf("README's Two commands gives no range of minutes for ./test.sh, or not what takes most of it")
	}
	script, err := os.ReadFile("../../test.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`go test [^\n]*-v [^\n]*\./redislock/[^\n]*\|`).Match(script) ||
		!regexp.MustCompile(`grep --line-buffered -E '\^\(--- \(PASS\|FAIL`).Match(script) {
		t.Errorf("test.sh does not show redislock's tests as they end (go test -v, filtered to their results)")
	}
	_, row, _ := strings.Cut(string(readme), "\n| `dlockotel/` |")
	row, _, _ = strings.Cut(row, "\n")
	if !strings.Contains(row, "`dlockotel/dlockprom`") || strings.HasSuffix(strings.TrimSpace(row), "(its own module) |") {
		t.Errorf("README's Layout row of dlockotel does not say that dlockprom is a package of the dlockotel module: %s", row)
	}
	if !strings.Contains(string(readme), `"github.com/dlock-go/dlock/dlockotel/dlockprom"`) {
		t.Errorf("README's dlockprom snippet has no import path")
	}
}
