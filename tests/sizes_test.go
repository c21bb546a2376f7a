package tests

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// Size bounds of the module's Go code (generated code aside): past them a
// function or a file says why at its top, in a sentence holding "long
// because" (its doc comment; the comment above a file's package clause).
const (
	maxFuncLines = 80
	maxFileLines = 500
)

// Every function and file of the module is within the bounds or says
// why it is not.
func TestSizes(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && path != ".." || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".gen.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		rel, _ := filepath.Rel("..", path)
		if n := fset.Position(f.End()).Line; n > maxFileLines && !saysWhy(fileDoc(f)) {
			t.Errorf("%s: %d lines (at most %d, or a sentence above its package clause saying why it is long because …)", rel, n, maxFileLines)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			if n > maxFuncLines && !saysWhy(fn.Doc) {
				t.Errorf("%s: %s: %d lines (at most %d, or a sentence in its doc saying why it is long because …)", rel, fn.Name.Name, n, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// fileDoc is the comment above a file's package clause, its package doc
// or not.
func fileDoc(f *ast.File) *ast.CommentGroup {
	var last *ast.CommentGroup
	for _, c := range f.Comments {
		if c.End() < f.Package {
			last = c
		}
	}
	return last
}

func saysWhy(c *ast.CommentGroup) bool {
	return c != nil && strings.Contains(strings.Join(strings.Fields(c.Text()), " "), "long because")
}
