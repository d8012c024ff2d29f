package tools_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/gateway/tools"
	"github.com/rodon-compute/rodon/gateway/tools/toolstest"
	"github.com/rodon-compute/rodon/internal/manifest"
)

// testFiles is the workspace the confinement tests resolve in.
var testFiles = map[string]string{
	"data/sales.csv":      "region,total\nnorth,10\nsouth,20\n",
	"data/2024/sales.csv": "region,total\n",
	"src/main.py":         "print('hi')\n",
	"agents/analyst.md":   "---\nname: analyst\ntools: [Read]\n---\n",
	"README.md":           "# readme\n",
	"données/é.csv":       "a\n",
	"notes/":              "",
	"link-in":             "-> data",
	"link-file":           "-> data/sales.csv",
	"link-agents":         "-> agents",
	"link-out":            "-> ../../etc",
	"link-abs":            "-> /etc",
	"deep/link-up":        "-> ../../x",
	"loop1":               "-> loop2",
	"loop2":               "-> loop1",
}

var libFiles = map[string]string{"ref.csv": "a,b\n"}

func heads(t *testing.T) (tools.Tree, tools.Tree) {
	t.Helper()
	h, err := toolstest.New(testFiles).Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	l, err := toolstest.New(libFiles).Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return h, l
}

// names reports whether msg names path p (as it is, Go-quoted, or its
// first 100 bytes for a long one).
func names(msg, p string) bool {
	if len(p) > 150 {
		p = p[:100]
	}
	return strings.Contains(msg, p) || strings.Contains(msg, strings.TrimSuffix(strconv.Quote(p), `"`))
}

// TestResolveAttacks is the confinement attack table (issue 13, Done
// means 2): every path is refused with its reason, a message naming it,
// and the path it probably meant where there is one.
func TestResolveAttacks(t *testing.T) {
	head, lib := heads(t)
	const sales = "/workspace/data/sales.csv"
	for _, tc := range []struct {
		name   string
		path   string
		write  bool
		reason string
		meant  string
	}{
		{"absolute outside", "/data/sales.csv", false, api.RefusedPath, sales},
		{"absolute system file", "/etc/passwd", false, api.RefusedPath, ""},
		{"proc", "/proc/self/root/etc/passwd", false, api.RefusedPath, ""},
		{"other case of the prefix", "/Workspace/data/sales.csv", false, api.RefusedPath, sales},
		{"relative traversal", "../data/sales.csv", false, api.RefusedPath, sales},
		{"relative traversal far", "../../../../etc/passwd", false, api.RefusedPath, ""},
		{"traversal inside", "data/../../etc/passwd", false, api.RefusedPath, ""},
		{"traversal back in", "data/../data/sales.csv", false, api.RefusedPath, sales},
		{"absolute traversal", "/workspace/../etc/passwd", false, api.RefusedPath, ""},
		{"library traversal", "/library/../etc/passwd", false, api.RefusedPath, ""},
		{"traversal write", "../x.txt", true, api.RefusedPath, ""},
		{"percent-encoded dots", "%2e%2e/etc/passwd", false, api.RefusedPath, ""},
		{"percent-encoded upper", "%2E%2E/%2E%2E/etc/passwd", false, api.RefusedPath, ""},
		{"percent-encoded slash", "..%2fetc%2fpasswd", false, api.RefusedPath, ""},
		{"percent-encoded absolute", "%2Fdata%2Fsales.csv", false, api.RefusedPath, sales},
		{"double-encoded", "%252e%252e/etc/passwd", false, api.RefusedPath, ""},
		{"double-encoded in the workspace", "/workspace/%252e%252e/%252e%252e/etc/passwd", false, api.RefusedPath, ""},
		{"NUL", "data/sales.csv\x00.txt", false, api.RefusedPath, sales},
		{"NUL traversal", "\x00../etc/passwd", false, api.RefusedPath, ""},
		{"control character", "data/\x1bsales.csv", false, api.RefusedPath, sales},
		{"newline", "data/sales.csv\n", false, api.RefusedPath, sales},
		{"backslash", `data\sales.csv`, false, api.RefusedPath, sales},
		{"backslash traversal", `..\..\etc\passwd`, false, api.RefusedPath, ""},
		{"two-dot leader", "‥/etc/passwd", false, api.RefusedLookalike, ""},
		{"two-dot leader to a file", "‥/data/sales.csv", false, api.RefusedLookalike, sales},
		{"full-width dots", "．．/etc/passwd", false, api.RefusedLookalike, ""},
		{"full-width solidus", "data／sales.csv", false, api.RefusedLookalike, sales},
		{"full-width solidus traversal", "..／..／etc／passwd", false, api.RefusedLookalike, ""},
		{"full-width letters", "ｄａｔａ/sales.csv", false, api.RefusedLookalike, sales},
		{"full-width prefix", "／workspace／data／sales.csv", false, api.RefusedLookalike, sales},
		{"look-alike write", "ａｇｅｎｔｓ/analyst.md", true, api.RefusedLookalike, "/workspace/agents/analyst.md"},
		{"very long path", strings.Repeat("a/", 600) + "sales.csv", false, api.RefusedPath, ""},
		{"very long path of dots", strings.Repeat("../", 2000) + "etc/passwd", false, api.RefusedPath, ""},
		{"very long component", strings.Repeat("a", 300) + "/data/sales.csv", false, api.RefusedPath, sales},
		{"too deep", strings.Repeat("d/", 70) + "data/sales.csv", false, api.RefusedPath, sales},
		{"symlink out", "link-out/passwd", false, api.RefusedPath, ""},
		{"symlink absolute", "link-abs/passwd", false, api.RefusedPath, ""},
		{"symlink up from below", "deep/link-up", false, api.RefusedPath, ""},
		{"symlink loop", "loop1/x", false, api.RefusedPath, ""},
		{"symlink out write", "link-out/x", true, api.RefusedPath, ""},
		{"case trick", "DATA/Sales.csv", false, api.RefusedPath, sales},
		{"case trick absolute", "/workspace/Data/sales.csv", false, api.RefusedPath, sales},
		{"case trick write", "data/SALES.csv", true, api.RefusedPath, sales},
		{"library write", "/library/ref.csv", true, api.RefusedReadOnly, ""},
		{"library new file", "/library/new.csv", true, api.RefusedReadOnly, ""},
		{"library itself", "/library", true, api.RefusedReadOnly, ""},
		{"agents write", "agents/analyst.md", true, api.RefusedReadOnly, ""},
		{"agents new file", "/workspace/agents/evil.md", true, api.RefusedReadOnly, ""},
		{"agents dot", "./agents/analyst.md", true, api.RefusedReadOnly, ""},
		{"agents itself", "agents", true, api.RefusedReadOnly, ""},
		{"agents through a symlink", "link-agents/analyst.md", true, api.RefusedReadOnly, ""},
		{"empty component", "data//sales.csv", false, api.RefusedPath, sales},
		{"url", "file:///etc/passwd", false, api.RefusedPath, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tools.Resolve(head, lib, tc.path, tc.write)
			var r *tools.Refusal
			if !errors.As(err, &r) {
				t.Fatalf("Resolve(%q, write %v) = %+v, %v; want a refusal", tc.path, tc.write, got, err)
			}
			if r.Reason != tc.reason {
				t.Errorf("Resolve(%q) reason = %s (%s), want %s", tc.path, r.Reason, r.Message, tc.reason)
			}
			if !names(r.Message, tc.path) {
				t.Errorf("Resolve(%q) message %q does not name the path", tc.path, r.Message)
			}
			if r.Path != tc.path {
				t.Errorf("Resolve(%q) refusal path = %q, want the path as given", tc.path, r.Path)
			}
			if r.DidYouMean != tc.meant {
				t.Errorf("Resolve(%q) did_you_mean = %q (%s), want %q", tc.path, r.DidYouMean, r.Message, tc.meant)
			}
			if tc.meant != "" && !strings.HasSuffix(r.Message, "; did you mean "+tc.meant+"?") {
				t.Errorf("Resolve(%q) message %q does not end with the suggestion", tc.path, r.Message)
			}
		})
	}
}

// TestResolveMessage: the example of SPEC.md, word for word.
func TestResolveMessage(t *testing.T) {
	head, lib := heads(t)
	_, err := tools.Resolve(head, lib, "/data/sales.csv", false)
	want := "path /data/sales.csv is outside the workspace; did you mean /workspace/data/sales.csv?"
	if err == nil || err.Error() != want {
		t.Errorf("Resolve(/data/sales.csv) = %v, want %q", err, want)
	}
}

func TestResolveAccepts(t *testing.T) {
	head, lib := heads(t)
	for _, tc := range []struct {
		path    string
		write   bool
		library bool
		want    string // the tree path
		exists  bool
	}{
		{"data/sales.csv", false, false, "data/sales.csv", true},
		{"/workspace/data/sales.csv", true, false, "data/sales.csv", true},
		{"./data/sales.csv", false, false, "data/sales.csv", true},
		{"data", false, false, "data", true},
		{"notes", false, false, "notes", true},
		{"", false, false, "", true},
		{"/workspace", false, false, "", true},
		{"/workspace/", false, false, "", true},
		{"link-in/sales.csv", false, false, "data/sales.csv", true},
		{"link-file", true, false, "data/sales.csv", true},
		{"données/é.csv", false, false, "données/é.csv", true},
		{"new/file.txt", true, false, "new/file.txt", false},
		{"agentsx/file.md", true, false, "agentsx/file.md", false},
		{"agents/analyst.md", false, false, "agents/analyst.md", true},
		{"100%.csv", true, false, "100%.csv", false},
		{"a%2Fb.csv", true, false, "a%2Fb.csv", false},
		{"/library/ref.csv", false, true, "ref.csv", true},
		{"/library", false, true, "", true},
	} {
		got, err := tools.Resolve(head, lib, tc.path, tc.write)
		if err != nil {
			t.Errorf("Resolve(%q, write %v) = %v, want %q", tc.path, tc.write, err, tc.want)
			continue
		}
		if got.Path != tc.want || got.Library != tc.library || (got.Entry != nil || got.Path == "") != tc.exists {
			t.Errorf("Resolve(%q) = path %q library %v entry %v, want %q, %v, exists %v", tc.path, got.Path, got.Library, got.Entry, tc.want, tc.library, tc.exists)
		}
	}
}

// FuzzResolve: whatever a caller sends, Resolve never panics and never
// answers a target outside its tree: a clean tree path (or the root), not
// in the library for a write, never under agents/ for a write.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{"data/sales.csv", "/workspace/x", "../x", "%2e%2e/x", "a\x00b", "‥/x", "link-in/sales.csv",
		"link-out/x", "/library/ref.csv", "link-agents/x", "DATA/Sales.csv", "loop1", "/etc/passwd", "a//b", `a\b`,
		"ｄａｔａ/sales.csv", "%252e%252e/x", "link-file", "deep/link-up/x", "/workspace/link-in/2024/sales.csv"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	head, lib := func() (tools.Tree, tools.Tree) {
		h, _ := toolstest.New(testFiles).Head(context.Background())
		l, _ := toolstest.New(libFiles).Head(context.Background())
		return h, l
	}()
	f.Fuzz(func(t *testing.T, p string, write bool) {
		got, err := tools.Resolve(head, lib, p, write)
		if err != nil {
			var r *tools.Refusal
			if !errors.As(err, &r) {
				t.Fatalf("Resolve(%q) = %v: an error that is not a refusal", p, err)
			}
			return
		}
		if got.Path != "" {
			if err := manifest.CheckPath(got.Path, manifest.DefaultLimits); err != nil {
				t.Fatalf("Resolve(%q) = %q: not a tree path: %v", p, got.Path, err)
			}
		}
		if write && (got.Library || got.Path == "agents" || strings.HasPrefix(got.Path, "agents/")) {
			t.Fatalf("Resolve(%q, write) = %+v: a write to the library or agents/", p, got)
		}
		if got.Entry != nil && (got.Entry.Path != got.Path || got.Entry.Type == "symlink") {
			t.Fatalf("Resolve(%q) = path %q, entry %+v: not the entry at the path, links resolved", p, got.Path, got.Entry)
		}
		if got.Library && got.Tree != lib || !got.Library && got.Tree != head {
			t.Fatalf("Resolve(%q) = %+v: the wrong tree", p, got)
		}
	})
}
