package dlock_test

import (
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageDocNamesEveryBackend checks that the package documentation (what
// go doc shows) names every backend in its list of backends and in "What each
// backend guarantees".
func TestPackageDocNamesEveryBackend(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	intro, guarantees, ok := strings.Cut(string(src), "# What each backend guarantees")
	if !ok {
		t.Fatal(`doc.go has no section "What each backend guarantees"`)
	}
	guarantees, _, _ = strings.Cut(guarantees, "\n//\n// docs/safety.md")
	_, intro, ok = strings.Cut(intro, "\n// The backends: ")
	if !ok {
		t.Fatal(`doc.go has no paragraph "The backends: ..." after its example`)
	}
	intro, _, _ = strings.Cut(intro, "\n//\n") // that paragraph
	for _, b := range []struct{ name, pkg string }{
		{"Redis", "redislock"}, {"Redlock", "redlock"}, {"etcd", "etcdlock"},
		{"ZooKeeper", "zklock"}, {"PostgreSQL", "pglock"}, {"NATS", "natslock"}, {"MySQL", "mysqllock"},
	} {
		if !strings.Contains(intro, b.name) || !strings.Contains(intro, b.pkg) {
			t.Errorf("the package documentation's list of backends does not name %s (%s)", b.name, b.pkg)
		}
		if !strings.Contains(guarantees, "\n// "+b.name+" (package "+b.pkg) {
			t.Errorf(`"What each backend guarantees" has no paragraph "%s (package %s"`, b.name, b.pkg)
		}
	}
}

// TestConstructorGrammar checks that every backend builds its locks with the
// constructors docs/backends.md shows: New over the connection (not on
// ZooKeeper, whose Driver is the session), NewDriver and NewClient(d *Driver,
// ...) (not on memlock, whose Store is the driver), one driver option type
// named Option over an unexported struct, taken last by NewDriver and by every
// New*Driver of another kind.
func TestConstructorGrammar(t *testing.T) {
	for _, b := range []struct {
		dir                      string
		noNew, noDriver, options bool
	}{
		{dir: "redislock", options: true},
		{dir: "redlock", options: true},
		{dir: "etcdlock", options: true},
		{dir: "zklock", noNew: true, options: true},
		{dir: "pglock", options: true},
		{dir: "natslock", options: true},
		{dir: "mysqllock", options: true},
		{dir: "memlock", noDriver: true},
		{dir: "legacy"},
	} {
		funcs, types := exportedDecls(t, b.dir)
		has := func(name string) bool { _, ok := funcs[name]; return ok }
		if has("New") == b.noNew {
			t.Errorf("%s: New present %v, want %v", b.dir, has("New"), !b.noNew)
		}
		if !b.noDriver {
			if !has("NewDriver") {
				t.Errorf("%s: no NewDriver", b.dir)
			}
			if f, ok := funcs["NewClient"]; !ok || len(f.Type.Params.List) != 2 || exprString(f.Type.Params.List[0].Type) != "*Driver" {
				t.Errorf("%s: no NewClient(d *Driver, opts ...dlock.Option)", b.dir)
			}
		}
		for name, ts := range types {
			if strings.HasSuffix(name, "Option") && name != "Option" || name == "Config" {
				t.Errorf("%s: type %s: a backend's driver options are its type Option", b.dir, name)
			}
			if name == "Option" && exprString(ts.Type) != "func(*options)" {
				t.Errorf("%s: type Option is %s, want func(*options)", b.dir, exprString(ts.Type))
			}
		}
		if _, ok := types["Option"]; ok != b.options {
			t.Errorf("%s: type Option present %v, want %v", b.dir, ok, b.options)
		}
		for name, f := range funcs {
			if !b.options || name != "NewDriver" && !(strings.HasPrefix(name, "New") && strings.HasSuffix(name, "Driver") && name != "NewSyncDriver" && name != "NewBridgeDriver") {
				continue
			}
			ps := f.Type.Params.List
			if len(ps) == 0 || exprString(ps[len(ps)-1].Type) != "...Option" {
				t.Errorf("%s: %s does not take ...Option last", b.dir, name)
			}
		}
	}
}

// exportedDecls returns the exported functions (not methods) and types of the
// non-test files of the package in dir.
func exportedDecls(t *testing.T, dir string) (map[string]*ast.FuncDecl, map[string]*ast.TypeSpec) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: %v, %d files", dir, err, len(files))
	}
	funcs, types := map[string]*ast.FuncDecl{}, map[string]*ast.TypeSpec{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					funcs[d.Name.Name] = d
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.IsExported() {
						types[ts.Name.Name] = ts
					}
				}
			}
		}
	}
	return funcs, types
}

// exprString writes a type expression as Go source.
func exprString(e ast.Expr) string {
	var b strings.Builder
	if err := format.Node(&b, token.NewFileSet(), e); err != nil {
		return err.Error()
	}
	return b.String()
}
