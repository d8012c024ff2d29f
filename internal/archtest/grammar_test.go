package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestOneGrammar keeps the size grammar in internal/size and the id
// grammars in cluster/ids.go: no other non-test file declares a size
// parser (a function named parseSize, ParseBytes, parseMemory...) or an id
// pattern (a string literal with the id alphabet "a-z0-9][a-z0-9").
// internal/grammartest checks that every entry point reads them alike.
func TestOneGrammar(t *testing.T) {
	sizeFunc := regexp.MustCompile(`(?i)^parse(size|bytes|memory|quantity)$`)
	root := filepath.Join("..", "..")
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if path != root && strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		files++
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if sizeFunc.MatchString(n.Name.Name) && !strings.HasPrefix(rel, "internal/size/") {
					t.Errorf("%s declares %s: sizes are parsed by internal/size only", rel, n.Name.Name)
				}
			case *ast.BasicLit:
				if n.Kind == token.STRING && strings.Contains(n.Value, "a-z0-9][a-z0-9") && rel != "cluster/ids.go" {
					t.Errorf("%s has an id pattern %s: ids are checked by cluster/ids.go only", rel, n.Value)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("walked %d Go files, want the whole tree", files)
	}
}
