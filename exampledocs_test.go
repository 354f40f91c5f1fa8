package dlock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestExamplesUseNoTestHelpers checks every Example function of the repository
// (all modules): it must use nothing declared only in test files (a test
// server's address, a helper), so that what the documentation shows is code a
// reader can run as it stands.
func TestExamplesUseNoTestHelpers(t *testing.T) {
	type pkgFiles struct {
		testNames map[string]bool
		examples  []*ast.FuncDecl
		fileOf    map[*ast.FuncDecl]string
	}
	dirs := map[string]*pkgFiles{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		p := dirs[filepath.Dir(path)]
		if p == nil {
			p = &pkgFiles{testNames: map[string]bool{}, fileOf: map[*ast.FuncDecl]string{}}
			dirs[filepath.Dir(path)] = p
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if strings.HasPrefix(decl.Name.Name, "Example") {
					p.examples = append(p.examples, decl)
					p.fileOf[decl] = path
				} else if decl.Recv == nil && decl.Name.Name != "TestMain" {
					p.testNames[decl.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							p.testNames[n.Name] = true
						}
					case *ast.TypeSpec:
						p.testNames[spec.Name.Name] = true
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	examples := 0
	for _, p := range dirs {
		for _, ex := range p.examples {
			examples++
			local := map[string]bool{}
			ast.Inspect(ex, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.AssignStmt:
					for _, l := range n.Lhs {
						if id, ok := l.(*ast.Ident); ok && n.Tok == token.DEFINE {
							local[id.Name] = true
						}
					}
				case *ast.ValueSpec:
					for _, id := range n.Names {
						local[id.Name] = true
					}
				case *ast.Ident:
					if p.testNames[n.Name] && !local[n.Name] {
						t.Errorf("%s: %s uses %s, declared only in the tests", p.fileOf[ex], ex.Name.Name, n.Name)
					}
				}
				return true
			})
		}
	}
	if examples < 10 {
		t.Errorf("found %d examples: the walk missed files", examples)
	}
}
