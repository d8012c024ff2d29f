package archtest

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// forPeople are the fields that hold sentences for people only, by type:
// an event's message, and the reason of a step and of its exit (a
// failure's typed cause is beside it).
var forPeople = map[string]string{
	module + "/api.Event":          "Message",
	module + "/cluster.Event":      "Message",
	module + "/api.Step":           "Reason",
	module + "/cluster.Step":       "Reason",
	module + "/api.Exit":           "Reason",
	module + "/cluster.ExitRecord": "Reason",
}

// messageTools are the packages whose functions read text: an event's
// message passed to one of them is being parsed.
var messageTools = []string{"strings", "bytes", "regexp", "strconv", "unicode", "unicode/utf8", "text/scanner", "bufio"}

// TestNoEventMessageParser: no non-test Go file reads an event's Message
// (or a step's or an exit's Reason, forPeople) as anything but text to
// show. A read may only be passed as an argument to a function that is
// not one of the text tools (strings, regexp, strconv, ..., fmt.Sscan*),
// be stored in another struct's field, joined into a longer text, or
// compared with "" (is there one); anything else (a comparison, a switch
// on it, indexing or slicing it, a variable holding it, a text tool or a
// regular expression given it) is a parser, and programs read the kind
// and the typed payload (or the cause) instead. The rule checks itself on
// testdata/eventparser, a package of such parsers.
func TestNoEventMessageParser(t *testing.T) {
	l := newLoader(t)
	for _, p := range l.pkgs {
		if !strings.HasPrefix(p.ImportPath, module) || len(p.GoFiles) == 0 {
			continue
		}
		files := make([]string, 0, len(p.GoFiles))
		for _, f := range p.GoFiles {
			files = append(files, filepath.Join(p.Dir, f))
		}
		for _, f := range l.messageReads(t, p.ImportPath, files) {
			t.Errorf("%s: %s, a text for people, is parsed (%s); read the kind and payload (or the cause) instead", f.pos, f.field, f.what)
		}
	}

	// The rule's own test: it reports each parser of the testdata package
	// (the lines marked "want") and nothing else.
	dir := filepath.Join("testdata", "eventparser")
	src := filepath.Join(dir, "parser.go")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for i, line := range strings.Split(string(b), "\n") {
		if strings.HasSuffix(strings.TrimSpace(line), "// want") {
			want = append(want, i+1)
		}
	}
	var got []int
	for _, f := range l.messageReads(t, "eventparser", []string{src}) {
		got = append(got, f.pos.Line)
	}
	if !slices.Equal(got, want) || len(want) < 7 {
		t.Errorf("the rule reports testdata lines %v, want %v", got, want)
	}
}

type listedPkg struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Export     string
	Standard   bool
}

// loader type-checks packages from source against the export data of
// their imports (go list -export).
type loader struct {
	pkgs   []listedPkg
	export map[string]string
	fset   *token.FileSet
	imp    types.Importer
}

func newLoader(t *testing.T) *loader {
	t.Helper()
	out, err := exec.Command("go", "list", "-export", "-deps", "-json", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	l := &loader{export: map[string]string{}, fset: token.NewFileSet()}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listedPkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		l.pkgs = append(l.pkgs, p)
		if p.Export != "" {
			l.export[p.ImportPath] = p.Export
		}
	}
	l.imp = importer.ForCompiler(l.fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := l.export[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	return l
}

// finding is one parse of an event's message.
type finding struct {
	pos   token.Position
	field string
	what  string
}

// messageReads type-checks the files of package path and returns the
// reads of an event's Message that are not allowed.
func (l *loader) messageReads(t *testing.T, path string, files []string) []finding {
	t.Helper()
	var asts []*ast.File
	for _, f := range files {
		a, err := parser.ParseFile(l.fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		asts = append(asts, a)
	}
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: l.imp, Error: func(error) {}}
	if _, err := conf.Check(path, l.fset, asts, info); err != nil {
		t.Fatalf("type-check %s: %v", path, err)
	}
	var out []finding
	for _, f := range asts {
		var stack []ast.Node
		ast.Inspect(f, func(n ast.Node) bool {
			if n == nil {
				stack = stack[:len(stack)-1]
				return true
			}
			if sel, ok := n.(*ast.SelectorExpr); ok && isForPeople(info, sel) {
				if what := misuse(info, sel, stack); what != "" {
					out = append(out, finding{l.fset.Position(sel.Pos()), types.ExprString(sel), what})
				}
			}
			stack = append(stack, n)
			return true
		})
	}
	return out
}

// isForPeople reports whether sel is one of the forPeople fields.
func isForPeople(info *types.Info, sel *ast.SelectorExpr) bool {
	s, ok := info.Selections[sel]
	if !ok || s.Kind() != types.FieldVal {
		return false
	}
	recv := s.Recv()
	if p, ok := recv.(*types.Pointer); ok {
		recv = p.Elem()
	}
	named, ok := recv.(*types.Named)
	if !ok || named.Obj().Pkg() == nil {
		return false
	}
	field, ok := forPeople[named.Obj().Pkg().Path()+"."+named.Obj().Name()]
	return ok && field == sel.Sel.Name
}

// misuse says how sel, an event's Message, is read as more than text to
// show ("" when it is not): stack holds its ancestors, the nearest last.
func misuse(info *types.Info, sel *ast.SelectorExpr, stack []ast.Node) string {
	parent := stack[len(stack)-1]
	switch p := parent.(type) {
	case *ast.CallExpr:
		if slices.Contains(p.Args, ast.Expr(sel)) {
			if tool := textTool(info, p.Fun); tool != "" {
				return "given to " + tool
			}
			return ""
		}
	case *ast.AssignStmt:
		for i, r := range p.Rhs {
			if r == ast.Expr(sel) && i < len(p.Lhs) {
				if _, field := p.Lhs[i].(*ast.SelectorExpr); field {
					return "" // copied into a field
				}
				return "held in a variable"
			}
		}
		return "" // written
	case *ast.KeyValueExpr:
		if p.Value == ast.Expr(sel) {
			return "" // a field of a composite literal
		}
	case *ast.BinaryExpr:
		if p.Op == token.ADD {
			return "" // joined into a longer text
		}
		if (p.Op == token.EQL || p.Op == token.NEQ) && (isEmptyString(p.X) || isEmptyString(p.Y)) {
			return "" // is there one
		}
		return "compared with " + p.Op.String()
	case *ast.SwitchStmt:
		return "switched on"
	case *ast.IndexExpr, *ast.SliceExpr:
		return "indexed"
	case *ast.RangeStmt:
		return "ranged over"
	case *ast.ValueSpec:
		return "held in a variable"
	}
	return fmt.Sprintf("used in a %T", parent)
}

// textTool returns the name of fun when it is a function or method of a
// text tool (messageTools, fmt.Sscan*, a *regexp.Regexp's methods).
func textTool(info *types.Info, fun ast.Expr) string {
	var id *ast.Ident
	switch f := fun.(type) {
	case *ast.SelectorExpr:
		id = f.Sel
	case *ast.Ident:
		id = f
	default:
		return ""
	}
	obj, ok := info.Uses[id].(*types.Func)
	if !ok || obj.Pkg() == nil {
		return ""
	}
	pkg := obj.Pkg().Path()
	if slices.Contains(messageTools, pkg) || pkg == "fmt" && strings.HasPrefix(obj.Name(), "Sscan") {
		return pkg + "." + obj.Name()
	}
	return ""
}

// isEmptyString reports whether e is the literal "".
func isEmptyString(e ast.Expr) bool {
	lit, ok := e.(*ast.BasicLit)
	return ok && lit.Kind == token.STRING && (lit.Value == `""` || lit.Value == "``")
}
