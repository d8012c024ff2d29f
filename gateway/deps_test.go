package gateway

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImports: the gateway never imports the node side (agentd,
// netpolicy, containerd, cilium), and has one package doc.
func TestImports(t *testing.T) {
	files, _ := filepath.Glob("*.go")
	docs := 0
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc != nil && strings.HasPrefix(f.Doc.Text(), "Package gateway ") && !strings.HasSuffix(name, "_test.go") {
			docs++
		}
		for _, imp := range f.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			for _, banned := range []string{"/agentd", "/netpolicy", "containerd", "cilium", "/oci"} {
				if strings.Contains(p, banned) {
					t.Errorf("%s imports %s", name, p)
				}
			}
		}
	}
	if docs != 1 {
		t.Errorf("package gateway has %d package docs, want 1", docs)
	}
}
