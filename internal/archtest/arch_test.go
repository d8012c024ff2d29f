package archtest

import (
	"encoding/json"
	"io"
	"os/exec"
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

// rules maps a package (prefix) to import-path prefixes it must never
// depend on, directly or indirectly.
var rules = []struct {
	pkg       string
	forbidden []string
	why       string
}{
	{module + "/api", []string{"github.com/", "golang.org/", "google.golang.org/", module}, "api is the public contract: standard library only"},
	{module + "/gateway", []string{module + "/agentd", module + "/netpolicy", "github.com/containerd/", "github.com/cilium/"}, "the gateway never touches nodes' runtimes"},
	{module + "/cluster", []string{"github.com/containerd/", module + "/agentd", module + "/scheduler"}, "cluster holds plain replicated types"},
	{module + "/scheduler", []string{"github.com/containerd/", module + "/agentd", module + "/netpolicy"}, "the scheduler talks to agents over their protocol only"},
	{module + "/agentd", []string{module + "/internal/envseal"}, "only scheduler members hold the env key"},
	{module + "/cmd/agentd", []string{module + "/internal/envseal"}, "only scheduler members hold the env key"},
	{module + "/gateway", []string{module + "/internal/envseal"}, "only scheduler members hold the env key: the gateway asks them to seal"},
	{module + "/cmd/gateway", []string{module + "/internal/envseal"}, "only scheduler members hold the env key: the gateway asks them to seal"},
	{module + "/cmd/schedctl", []string{module + "/internal/envseal"}, "only scheduler members hold the env key"},
}

func TestDependencies(t *testing.T) {
	for _, p := range listPackages(t) {
		for _, r := range rules {
			if p.ImportPath != r.pkg && !strings.HasPrefix(p.ImportPath, r.pkg+"/") {
				continue
			}
			for _, d := range p.Deps {
				for _, f := range r.forbidden {
					if strings.HasPrefix(d, f) && d != p.ImportPath && !(f == module && strings.HasPrefix(d, r.pkg)) {
						t.Errorf("%s depends on %s: %s", p.ImportPath, d, r.why)
					}
				}
			}
		}
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
