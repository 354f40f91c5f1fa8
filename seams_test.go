package dlock_test

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// rootInternal is the import path prefix of the root module's internal
// packages.
const rootInternal = "github.com/dlock-go/dlock/internal/"

// seamsAllowed lists, by module path, the root module's internal packages that
// a module of its own may import in its non-test code. Every other module
// reaches the root through exported API only (package driver for backend
// machinery): minimal version selection may pair it with a newer root module
// than the one it was tagged with, whose internal packages may have changed.
var seamsAllowed = map[string][]string{
	// The dlock command is a main package: nothing imports it, and a build of
	// a tagged version selects the root module that its go.mod requires, the
	// one tagged with it (CONTRIBUTING.md, Releasing).
	"github.com/dlock-go/dlock/cmd/dlock": {"internal/holder"},
	// The benchmarks are not released.
	"github.com/dlock-go/dlock/bench": {"internal/testserver"},
}

// TestModulesImportNoRootInternals fails when a module of its own (any go.mod
// below the root but the root's) imports, in its non-test Go files, an internal
// package of the root module that seamsAllowed does not list for it.
func TestModulesImportNoRootInternals(t *testing.T) {
	mods := map[string]string{} // directory -> module path
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" && p != "go.mod" {
			mp, err := modulePath(p)
			if err != nil {
				return err
			}
			mods[filepath.Dir(p)] = mp
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) == 0 {
		t.Fatal("no go.mod below the root")
	}
	fset := token.NewFileSet()
	for dir, mp := range mods {
		imports := map[string][]string{} // root internal package -> files importing it
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if p != dir && (mods[p] != "" || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
					return filepath.SkipDir // another module, or no package
				}
				return nil
			}
			if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, is := range f.Imports {
				ip, err := strconv.Unquote(is.Path.Value)
				if err != nil {
					return err
				}
				if strings.HasPrefix(ip, rootInternal) {
					pkg := "internal/" + strings.TrimPrefix(ip, rootInternal)
					imports[pkg] = append(imports[pkg], p)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, pkg := range seamsAllowed[mp] {
			if imports[pkg] == nil {
				t.Errorf("module %s no longer imports the root module's %s: remove it from seamsAllowed", mp, pkg)
			}
		}
		for pkg, files := range imports {
			if !slices.Contains(seamsAllowed[mp], pkg) {
				t.Errorf("module %s imports the root module's %s in non-test code (%s): export it (package driver for backend machinery), keep a copy inside the module, or list it in seamsAllowed with the reason",
					mp, pkg, strings.Join(files, ", "))
			}
		}
	}
}

// modulePath returns the module path a go.mod declares.
func modulePath(gomod string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s: no module line", gomod)
}

// contractNames are the names package driver defines and the root package
// re-exports for users. A backend spells them driver.X: the contract between
// a backend and the core lives in driver.
var contractNames = []string{
	"ErrNotObtained", "ErrNotHeld", "ErrLockLost", "ErrReleased", "ErrInvalid",
	"ErrConflict", "ErrUnavailable", "ErrRefused", "ErrStaleToken",
	"BusyError", "LockInfo", "MinTTL", "MaxTTL",
}

// TestBackendsSpellTheContractFromDriver fails when a backend's non-test code
// names one of contractNames through the root package (dlock.ErrInvalid)
// instead of package driver (driver.ErrInvalid). Comments may use either.
func TestBackendsSpellTheContractFromDriver(t *testing.T) {
	for _, dir := range []string{"redislock", "redlock", "etcdlock", "zklock", "pglock", "memlock", "legacy"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(af, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "dlock" && slices.Contains(contractNames, sel.Sel.Name) {
					t.Errorf("%s: dlock.%s: spell it driver.%s", fset.Position(sel.Pos()), sel.Sel.Name, sel.Sel.Name)
				}
				return true
			})
		}
	}
}
