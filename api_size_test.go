package dlock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxRootNames bounds the root package's exported top-level names (functions,
// types, constants and variables; methods are not counted): what a user of
// the locks reads. The backend contract lives in package driver. 70 when the
// API was first committed to (v0.1.0); 71 with Once.
const maxRootNames = 71

// TestRootPackageStaysSmall fails when the root package exports more
// top-level names than maxRootNames.
func TestRootPackageStaysSmall(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var names []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					names = append(names, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names = append(names, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, id := range s.Names {
							if id.IsExported() {
								names = append(names, id.Name)
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d exported top-level names", len(names))
	if len(names) > maxRootNames {
		t.Errorf("the root package exports %d top-level names, more than %d: %v", len(names), maxRootNames, names)
	}
}
