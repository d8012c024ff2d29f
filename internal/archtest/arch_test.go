package archtest

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/rodon-compute/rodon"

type pkg struct {
	ImportPath string
	Name       string
	Doc        string
	Imports    []string
	Deps       []string
	Standard   bool
	Dir        string
	GoFiles    []string
}

// listPackages runs go list over the module.
func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []pkg
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 5 {
		t.Fatalf("go list found %d packages, want the whole module", len(pkgs))
	}
	return pkgs
}

func TestPackageDocs(t *testing.T) {
	for _, p := range listPackages(t) {
		if strings.TrimSpace(p.Doc) == "" {
			t.Errorf("package %s has no package doc comment", p.ImportPath)
		}
	}
}

// A rule says what a package (and every package under it) must never
// depend on, directly or indirectly (its tests may: the relay's tests read the
// real agent stream): any import path starting with one of
// forbidden, or, with stdOnly, anything outside the standard library and
// the rule's own packages.
type rule struct {
	pkg       string
	forbidden []string
	stdOnly   bool
	why       string
}

var rules = []rule{
	{pkg: module + "/api", stdOnly: true, why: "api is the public contract: standard library only"},
	{pkg: module + "/gateway", forbidden: []string{module + "/agentd", module + "/netpolicy", module + "/oci", "github.com/containerd/", "github.com/cilium/"}, why: "the gateway never touches nodes' runtimes"},
	{pkg: module + "/cluster", forbidden: []string{"github.com/containerd/", module + "/agentd", module + "/scheduler"}, why: "cluster holds plain replicated types"},
	{pkg: module + "/scheduler", forbidden: []string{"github.com/containerd/", module + "/agentd", module + "/netpolicy"}, why: "the scheduler talks to agents over their protocol only"},
	{pkg: module + "/agentd", forbidden: []string{module + "/internal/envseal"}, why: "only scheduler members hold the env key"},
	{pkg: module + "/cmd/agentd", forbidden: []string{module + "/internal/envseal"}, why: "only scheduler members hold the env key"},
	{pkg: module + "/agentd", forbidden: []string{module + "/internal/blob", "github.com/minio/"}, why: "nodes hold no store credential: they move blobs by presigned URLs only"},
	{pkg: module + "/cmd/agentd", forbidden: []string{module + "/internal/blob", "github.com/minio/"}, why: "nodes hold no store credential: they move blobs by presigned URLs only"},
	{pkg: module + "/gateway", forbidden: []string{module + "/internal/envseal"}, why: "only scheduler members hold the env key: the gateway asks them to seal"},
	{pkg: module + "/cmd/gateway", forbidden: []string{module + "/internal/envseal"}, why: "only scheduler members hold the env key: the gateway asks them to seal"},
	{pkg: module + "/cmd/schedctl", forbidden: []string{module + "/internal/envseal"}, why: "only scheduler members hold the env key"},
}

// standard reports whether path is a standard library package: its first
// element has no dot (the go command's own rule for module paths).
func standard(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// violations returns one line for each dependency of pkgs that a rule
// forbids.
func violations(pkgs []pkg, rules []rule) []string {
	var out []string
	for _, p := range pkgs {
		for _, r := range rules {
			if p.ImportPath != r.pkg && !strings.HasPrefix(p.ImportPath, r.pkg+"/") {
				continue
			}
			for _, d := range p.Deps {
				within := d == r.pkg || strings.HasPrefix(d, r.pkg+"/")
				bad := r.stdOnly && !standard(d) && !within
				for _, f := range r.forbidden {
					bad = bad || strings.HasPrefix(d, f)
				}
				if bad {
					out = append(out, fmt.Sprintf("%s depends on %s: %s", p.ImportPath, d, r.why))
				}
			}
		}
	}
	return out
}

func TestDependencies(t *testing.T) {
	for _, v := range violations(listPackages(t), rules) {
		t.Error(v)
	}
}

// TestRulesCatch feeds the rules packages that break them (and some that
// do not), so a rule that stopped matching would fail here rather than
// pass silently over the real tree.
func TestRulesCatch(t *testing.T) {
	tests := []struct {
		name string
		pkg  pkg
		want int // violations
	}{
		{"api with the standard library", pkg{ImportPath: module + "/api", Deps: []string{"encoding/json", "time", "internal/abi"}}, 0},
		{"api importing a third-party module", pkg{ImportPath: module + "/api", Deps: []string{"encoding/json", "github.com/gorilla/websocket"}}, 1},
		{"api importing x/", pkg{ImportPath: module + "/api", Deps: []string{"golang.org/x/sys/unix"}}, 1},
		{"api importing another host", pkg{ImportPath: module + "/api", Deps: []string{"gopkg.in/yaml.v3"}}, 1},
		{"api importing the module", pkg{ImportPath: module + "/api", Deps: []string{module + "/cluster"}}, 1},
		{"a package under api", pkg{ImportPath: module + "/api/sub", Deps: []string{module + "/internal/size"}}, 1},
		{"a package under api importing api", pkg{ImportPath: module + "/api/sub", Deps: []string{module + "/api", "time"}}, 0},
		{"gateway with api and cluster", pkg{ImportPath: module + "/gateway", Deps: []string{module + "/api", module + "/cluster", "github.com/gorilla/websocket"}}, 0},
		{"gateway importing agentd", pkg{ImportPath: module + "/gateway", Deps: []string{module + "/agentd"}}, 1},
		{"gateway importing an agentd subpackage", pkg{ImportPath: module + "/gateway", Deps: []string{module + "/agentd/stream"}}, 1},
		{"gateway importing netpolicy", pkg{ImportPath: module + "/gateway", Deps: []string{module + "/netpolicy"}}, 1},
		{"gateway/relay importing containerd", pkg{ImportPath: module + "/gateway/relay", Deps: []string{"github.com/containerd/containerd/v2/client"}}, 1},
		{"gateway/gatewaytest importing cilium", pkg{ImportPath: module + "/gateway/gatewaytest", Deps: []string{"github.com/cilium/ebpf"}}, 1},
		{"gateway importing all four", pkg{ImportPath: module + "/gateway", Deps: []string{module + "/agentd", module + "/netpolicy", "github.com/containerd/log", "github.com/cilium/ebpf/link"}}, 4},
		{"a gateway-named sibling is not the gateway", pkg{ImportPath: module + "/gatewayx", Deps: []string{module + "/agentd"}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := violations([]pkg{tt.pkg}, rules)
			if len(got) != tt.want {
				t.Errorf("violations = %q, want %d", got, tt.want)
			}
		})
	}
}

// TestOnlyOCIImportsContainerdOCI keeps our oci package the one place that
// knows containerd's spec options (the two names collide).
func TestOnlyOCIImportsContainerdOCI(t *testing.T) {
	for _, p := range listPackages(t) {
		for _, imp := range p.Imports {
			if imp == "github.com/containerd/containerd/v2/pkg/oci" && p.ImportPath != module+"/oci" {
				t.Errorf("%s imports containerd's pkg/oci; build specs through %s/oci", p.ImportPath, module)
			}
		}
	}
}

// TestCommandTypesInOneFile: every log entry type number is declared in
// cluster/command.go, so a reader sees them all (and a reused number) in
// one list.
func TestCommandTypesInOneFile(t *testing.T) {
	const home = module + "/cluster"
	for _, p := range listPackages(t) {
		for _, name := range p.GoFiles {
			if p.ImportPath == home && name == "command.go" {
				continue
			}
			file := filepath.Join(p.Dir, name)
			for _, c := range commandTypeConsts(t, file) {
				t.Errorf("%s declares log entry type %s: declare it in cluster/command.go", file, c)
			}
		}
	}
	if got := commandTypeConsts(t, filepath.Join("testdata", "commandtype.go.txt")); len(got) != 3 {
		t.Errorf("testdata/commandtype.go.txt: found %q, want the 3 constants declared there", got)
	}
}

// commandTypeConsts returns the constants of type CommandType (or
// cluster.CommandType) that file declares.
func commandTypeConsts(t *testing.T, file string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	isType := func(e ast.Expr) bool {
		switch e := e.(type) {
		case *ast.Ident:
			return e.Name == "CommandType"
		case *ast.SelectorExpr:
			return e.Sel.Name == "CommandType"
		}
		return false
	}
	var out []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			typed := vs.Type != nil && isType(vs.Type)
			for i, n := range vs.Names {
				conv := false
				if i < len(vs.Values) {
					if call, ok := vs.Values[i].(*ast.CallExpr); ok && isType(call.Fun) {
						conv = true
					}
				}
				if typed || conv {
					out = append(out, n.Name)
				}
			}
		}
	}
	return out
}
