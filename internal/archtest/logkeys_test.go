package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// oldLogKeys are the log keys that have one spelling elsewhere: a log
// record names a step "step", never "step_id" (docs/CODEBASE.md).
var oldLogKeys = map[string]string{
	"err": "error", "step_id": "step", "node_id": "node", "run_id": "run", "member_id": "member or peer",
}

// logKeyErrors returns, for the Go source src, each call of a logger
// method (Debug, Info, Warn, Error, With, Log) that passes one of
// oldLogKeys as a key.
func logKeyErrors(name, src string) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		switch sel.Sel.Name {
		case "Debug", "Info", "Warn", "Error", "With", "Log", "DebugContext", "InfoContext", "WarnContext", "ErrorContext":
		default:
			return true
		}
		for _, a := range call.Args {
			lit, ok := a.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				continue
			}
			key, err := strconv.Unquote(lit.Value)
			if err != nil {
				continue
			}
			if want, old := oldLogKeys[key]; old {
				out = append(out, fset.Position(lit.Pos()).String()+": log key "+strconv.Quote(key)+", want "+want)
			}
		}
		return true
	})
	return out, nil
}

// TestLogKeys keeps one set of log keys over the tree's non-test code.
func TestLogKeys(t *testing.T) {
	root := filepath.Join("..", "..")
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		files++
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		errs, err := logKeyErrors(path, string(src))
		for _, e := range errs {
			t.Error(e)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d Go files, want the whole tree", files)
	}
}

func TestLogKeysCatch(t *testing.T) {
	src := `package p
func f() {
	logger.Warn("place step", "step_id", id, "err", err)
	logger.With("component", "x").Info("ok", "step", id, "error", err)
	fmt.Println("err", err)
}`
	errs, err := logKeyErrors("p.go", src)
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) != 2 || !strings.Contains(errs[0], `"step_id", want step`) || !strings.Contains(errs[1], `"err", want error`) {
		t.Errorf("logKeyErrors = %q, want the two old keys of the Warn call", errs)
	}
}
