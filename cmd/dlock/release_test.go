package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestModulesRequireThisRelease checks that every module of the repository
// requires the other dlock modules at moduleVersion, the version their tags
// get, so that a module tagged with it resolves without its replace lines,
// and that the CHANGELOG has a section for it.
func TestModulesRequireThisRelease(t *testing.T) {
	root := filepath.Join("..", "..")
	require := regexp.MustCompile(`(?m)^(?:require)?\s*(github\.com/dlock-go/dlock(?:/[\w/]+)?) (v\S+)`)
	var mods int
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.Name() != "go.mod" {
			return nil
		}
		mods++
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range require.FindAllStringSubmatch(string(b), -1) {
			if m[2] != moduleVersion {
				t.Errorf("%s requires %s %s, want %s", path, m[1], m[2], moduleVersion)
			}
		}
		return nil
	})
	if err != nil || mods < 10 {
		t.Fatalf("read %d go.mod files: %v", mods, err)
	}
	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	if v := strings.TrimPrefix(moduleVersion, "v"); !strings.Contains(string(changelog), "## ["+v+"]") && !strings.Contains(string(changelog), moduleVersion) {
		t.Errorf("CHANGELOG.md has no section for %s", moduleVersion)
	}
}
