package archtest

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Mains hold flags, not business logic (STYLE.md, "Thin mains"): a
// cmd/<binary> parses its flags into a Config, builds the component, runs
// it and owns signals and the exit status. The rule has three parts a
// main can fail:
//
//   - imports: no runtime, consensus, storage, kernel, metrics or
//     websocket library (cmdForbidden): whoever needs one is a library
//     package with tests of its own;
//   - constructs: no goroutine (a go statement or a Go method call of a
//     WaitGroup or errgroup), no listener and no server (cmdForbiddenCalls,
//     an http.Server literal): a daemon's loops live in its package's Run;
//   - size: at most cmdMaxLines lines of non-test Go per main.
//
// cmdAllowances lists the mains allowed more, each with its reason.

// cmdForbidden are the import-path prefixes no main imports.
var cmdForbidden = []string{
	"github.com/containerd/",
	"github.com/hashicorp/raft",
	"github.com/boltdb/",
	"go.etcd.io/bbolt",
	"github.com/vishvananda/",
	"github.com/cilium/",
	"github.com/prometheus/",
	"github.com/gorilla/websocket",
	"golang.org/x/sync/errgroup",
}

// cmdForbiddenCalls are the functions (import path, name) no main calls:
// they open listeners or serve.
var cmdForbiddenCalls = map[string][]string{
	"net":           {"Listen", "ListenTCP", "ListenUDP", "ListenUnix", "ListenPacket"},
	"crypto/tls":    {"Listen", "NewListener"},
	"net/http":      {"ListenAndServe", "ListenAndServeTLS", "Serve", "ServeTLS"},
	"net/http/fcgi": {"Serve"},
}

// cmdMaxLines bounds a main's non-test Go, in lines.
const cmdMaxLines = 800

// mainRule is what one main may do beyond the rule's defaults.
type mainRule struct {
	maxLines int
	// goroutines allows goroutines (not listeners or servers).
	goroutines bool
}

// cmdAllowances are the mains allowed more than the defaults.
var cmdAllowances = map[string]mainRule{
	// serve, run, probe, cleanup: the node's and the sandbox network's flags.
	"agentd": {maxLines: 1200},
	// The operator CLI, one more client of the public API with a file per
	// command (STYLE.md, "CLI"): a dozen commands' flags, tables and
	// messages. Following a step (its watch, its stream, the user's
	// Ctrl-C) is internal/stepfollow's.
	"schedctl": {maxLines: 1900},
}

// TestCmdHoldsOnlyFlags applies the rule to every main of the module (the
// shim in cmd/containerd-shim-rodon-v1 is a module of its own, gVisor's
// shim wrapped, and not one of Rodon's mains).
func TestCmdHoldsOnlyFlags(t *testing.T) {
	dirs, err := filepath.Glob("../../cmd/*")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			continue
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		name := filepath.Base(dir)
		rule, ok := cmdAllowances[name]
		if !ok {
			rule = mainRule{maxLines: cmdMaxLines}
		}
		for _, v := range checkMain(t, dir, rule) {
			t.Errorf("cmd/%s: %s", name, v)
		}
		checked++
	}
	if checked < 4 {
		t.Fatalf("checked %d mains, want cmd/agentd, cmd/scheduler, cmd/gateway, cmd/schedctl at least", checked)
	}
}

// TestCmdRuleCatchesViolations feeds the rule a main that breaks each
// part of it (testdata/fatmain) and checks each is reported.
func TestCmdRuleCatchesViolations(t *testing.T) {
	got := strings.Join(checkMain(t, "testdata/fatmain", mainRule{maxLines: 20}), "\n")
	for _, want := range []string{
		`imports github.com/containerd/containerd/v2/client`,
		`imports github.com/hashicorp/raft`,
		`imports github.com/prometheus/client_golang/prometheus`,
		`imports golang.org/x/sync/errgroup`,
		`main.go:24: starts a goroutine (go statement)`,
		`main.go:26: starts a goroutine (wg.Go)`,
		`main.go:28: starts a goroutine (g.Go)`,
		`main.go:29: calls net.Listen`,
		`main.go:33: calls crypto/tls.NewListener`,
		`main.go:34: builds an http.Server`,
		`main.go:35: calls net/http.ListenAndServe`,
		`lines of non-test Go, more than 20`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("checkMain(testdata/fatmain) = \n%s\nwant a violation %q", got, want)
		}
	}
	// A main allowed goroutines is still refused its listeners.
	got = strings.Join(checkMain(t, "testdata/fatmain", mainRule{maxLines: 100, goroutines: true}), "\n")
	if strings.Contains(got, "goroutine") || !strings.Contains(got, "calls net.Listen") || strings.Contains(got, "lines of non-test Go") {
		t.Errorf("checkMain(testdata/fatmain, goroutines allowed, 100 lines) = \n%s\nwant its listeners and imports only", got)
	}
	// A thin main passes.
	if v := checkMain(t, "testdata/thinmain", mainRule{maxLines: 20}); len(v) != 0 {
		t.Errorf("checkMain(testdata/thinmain) = %q, want none", v)
	}
}

// checkMain returns the rule's violations by the non-test Go files of dir,
// a main with the allowances of rule.
func checkMain(t *testing.T, dir string, rule mainRule) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	lines := 0
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		lines += bytes.Count(src, []byte("\n"))
		f, err := parser.ParseFile(fset, file, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", file, err)
		}
		if f.Name.Name != "main" {
			continue
		}
		out = append(out, checkFile(fset, f, rule)...)
	}
	if lines > rule.maxLines {
		out = append(out, fmt.Sprintf("%d lines of non-test Go, more than %d: move what is not flags into the component's package", lines, rule.maxLines))
	}
	return out
}

// checkFile returns the import and construct violations of one file.
func checkFile(fset *token.FileSet, f *ast.File, rule mainRule) []string {
	var out []string
	at := func(n ast.Node) string {
		p := fset.Position(n.Pos())
		return fmt.Sprintf("%s:%d", filepath.Base(p.Filename), p.Line)
	}
	// names maps the file's names of imported packages to their paths.
	names := map[string]string{}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		for _, bad := range cmdForbidden {
			if strings.HasPrefix(path, bad) {
				out = append(out, fmt.Sprintf("%s: imports %s: a main holds flags; that belongs in a library package", at(imp), path))
			}
		}
		name := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		names[name] = path
	}
	// pkgFunc is the import path and name of a package-level selector.
	pkgFunc := func(e ast.Expr) (string, string, bool) {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			return "", "", false
		}
		x, ok := sel.X.(*ast.Ident)
		if !ok {
			return "", "", false
		}
		path, ok := names[x.Name]
		return path, sel.Sel.Name, ok
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			if rule.goroutines {
				break
			}
			out = append(out, at(n)+": starts a goroutine (go statement): a daemon's loops belong in its package's Run")
		case *ast.CallExpr:
			if path, name, ok := pkgFunc(n.Fun); ok {
				if slices.Contains(cmdForbiddenCalls[path], name) {
					out = append(out, fmt.Sprintf("%s: calls %s.%s: listening and serving belong in the component's Run", at(n), path, name))
				}
			} else if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Go" && !rule.goroutines {
				out = append(out, fmt.Sprintf("%s: starts a goroutine (%s.Go): a daemon's loops belong in its package's Run", at(n), exprString(sel.X)))
			}
		case *ast.CompositeLit:
			if path, name, ok := pkgFunc(n.Type); ok && path == "net/http" && name == "Server" {
				out = append(out, at(n)+": builds an http.Server: serving belongs in the component's Run")
			}
		}
		return true
	})
	return out
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	}
	return "?"
}
