package tools_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/gateway/tools"
	"github.com/rodon-compute/rodon/gateway/tools/toolstest"
)

func env(files map[string]string) (tools.Env, *toolstest.Workspace) {
	ws := toolstest.New(files)
	return tools.Env{Workspace: ws, Library: toolstest.New(libFiles)}, ws
}

func refusal(t *testing.T, err error) *tools.Refusal {
	t.Helper()
	var r *tools.Refusal
	if !errors.As(err, &r) {
		t.Fatalf("error = %v, want a refusal", err)
	}
	return r
}

func TestRead(t *testing.T) {
	long := strings.Repeat("x", 3000)
	var many strings.Builder
	for i := 1; i <= 2500; i++ {
		fmt.Fprintf(&many, "line %d\n", i)
	}
	e, _ := env(map[string]string{
		"a.txt":          "one\ntwo\nthree\n",
		"noeol":          "one\ntwo",
		"long.txt":       long + "\n",
		"many.txt":       many.String(),
		"bin":            "PK\x00\x01",
		"empty":          "",
		"dir/x":          "x\n",
		"data/sales.csv": "a\n",
	})
	for _, tc := range []struct {
		name string
		in   api.ReadInput
		want api.ReadResult
	}{
		{"whole", api.ReadInput{Path: "a.txt"}, api.ReadResult{Path: "a.txt", Content: "     1\tone\n     2\ttwo\n     3\tthree\n", Lines: 3}},
		{"absolute", api.ReadInput{Path: "/workspace/a.txt"}, api.ReadResult{Path: "a.txt", Content: "     1\tone\n     2\ttwo\n     3\tthree\n", Lines: 3}},
		{"offset and limit", api.ReadInput{Path: "a.txt", Offset: 2, Limit: 1}, api.ReadResult{Path: "a.txt", Content: "     2\ttwo\n", Lines: 3, Truncated: true}},
		{"offset past the end", api.ReadInput{Path: "a.txt", Offset: 9}, api.ReadResult{Path: "a.txt", Lines: 3}},
		{"no newline at the end", api.ReadInput{Path: "noeol"}, api.ReadResult{Path: "noeol", Content: "     1\tone\n     2\ttwo\n", Lines: 2}},
		{"long line cut", api.ReadInput{Path: "long.txt"}, api.ReadResult{Path: "long.txt", Content: "     1\t" + long[:2000] + "\n", Lines: 1}},
		{"empty", api.ReadInput{Path: "empty"}, api.ReadResult{Path: "empty"}},
		{"library", api.ReadInput{Path: "/library/ref.csv"}, api.ReadResult{Path: "/library/ref.csv", Content: "     1\ta,b\n", Lines: 1}},
		{"binary", api.ReadInput{Path: "bin"}, api.ReadResult{Path: "bin", Error: "bin is a binary file (4B): Read shows text only"}},
		{"directory", api.ReadInput{Path: "dir"}, api.ReadResult{Path: "dir", Error: "dir is a directory, not a file: list it with Glob"}},
		{"the workspace", api.ReadInput{Path: "/workspace"}, api.ReadResult{Path: "/workspace", Error: "/workspace is a directory, not a file: list it with Glob"}},
		{"missing", api.ReadInput{Path: "b.txt"}, api.ReadResult{Path: "b.txt", Error: "no such file: b.txt"}},
		{"missing with a guess", api.ReadInput{Path: "sales.csv"}, api.ReadResult{Path: "sales.csv", Error: "no such file: sales.csv; did you mean /workspace/data/sales.csv?"}},
		{"encoded", api.ReadInput{Path: "data%2Fsales.csv"}, api.ReadResult{Path: "data%2Fsales.csv", Error: "no such file: data%2Fsales.csv; did you mean /workspace/data/sales.csv?"}},
	} {
		got, err := tools.Read(t.Context(), e, tc.in)
		if err != nil {
			t.Errorf("%s: Read(%+v) error %v", tc.name, tc.in, err)
			continue
		}
		got.Revision = ""
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: Read(%+v) (-want +got):\n%s", tc.name, tc.in, diff)
		}
	}
	got, err := tools.Read(t.Context(), e, api.ReadInput{Path: "many.txt"})
	if err != nil || got.Lines != 2500 || !got.Truncated || strings.Count(got.Content, "\n") != tools.ReadLines || !strings.HasSuffix(got.Content, "  2000\tline 2000\n") {
		t.Errorf("Read(many.txt) = %d lines, truncated %v, %d lines shown, %v; want 2500, true, 2000", got.Lines, got.Truncated, strings.Count(got.Content, "\n"), err)
	}
	if got.Revision != "rev-1" {
		t.Errorf("Read revision = %q, want rev-1", got.Revision)
	}
	if _, err := tools.Read(t.Context(), e, api.ReadInput{Path: "../a.txt"}); refusal(t, err).Reason != api.RefusedPath {
		t.Errorf("Read(../a.txt) = %v, want refused", err)
	}
}

func TestReadBound(t *testing.T) {
	line := strings.Repeat("y", 1999) + "\n"
	e, _ := env(map[string]string{"big": strings.Repeat(line, 1000)})
	got, err := tools.Read(t.Context(), e, api.ReadInput{Path: "big"})
	if err != nil || len(got.Content) > tools.MaxReadBytes || !got.Truncated || got.Lines != 1000 {
		t.Errorf("Read(big) = %d bytes, truncated %v, %d lines, %v; want at most %d bytes, truncated, 1000", len(got.Content), got.Truncated, got.Lines, err, tools.MaxReadBytes)
	}
}

func TestGlob(t *testing.T) {
	files := map[string]string{"a.csv": "", "data/b.csv": "", "data/x/c.csv": "", "data/d.txt": "", "link": "-> data", "empty/": ""}
	for i := range 1100 {
		files[fmt.Sprintf("many/%04d.txt", i)] = ""
	}
	e, _ := env(files)
	for _, tc := range []struct {
		in        api.GlobInput
		want      []string
		truncated bool
		errText   string
	}{
		{in: api.GlobInput{Pattern: "*.csv"}, want: []string{"a.csv"}},
		{in: api.GlobInput{Pattern: "**/*.csv"}, want: []string{"a.csv", "data/b.csv", "data/x/c.csv"}},
		{in: api.GlobInput{Pattern: "*.csv", Path: "data"}, want: []string{"data/b.csv"}},
		{in: api.GlobInput{Pattern: "**/*.csv", Path: "/workspace/data"}, want: []string{"data/b.csv", "data/x/c.csv"}},
		{in: api.GlobInput{Pattern: "/workspace/data/**/*.csv"}, want: []string{"data/b.csv", "data/x/c.csv"}},
		{in: api.GlobInput{Pattern: "/library/*.csv"}, want: []string{"/library/ref.csv"}},
		{in: api.GlobInput{Pattern: "*", Path: "/library"}, want: []string{"/library/ref.csv"}},
		{in: api.GlobInput{Pattern: "l*"}, want: []string{"link"}},
		{in: api.GlobInput{Pattern: "*.none"}, want: []string{}},
		{in: api.GlobInput{Pattern: "many/*.txt"}, truncated: true},
		{in: api.GlobInput{Pattern: "[", Path: ""}, errText: "not a valid glob pattern"},
		{in: api.GlobInput{Pattern: "*", Path: "a.csv"}, errText: "not a directory"},
		{in: api.GlobInput{Pattern: "*", Path: "nodir"}, errText: "no such directory"},
		{in: api.GlobInput{Pattern: ""}, errText: "empty pattern"},
	} {
		got, err := tools.Glob(t.Context(), e, tc.in)
		switch {
		case err != nil:
			t.Errorf("Glob(%+v) error %v", tc.in, err)
		case tc.errText != "":
			if !strings.Contains(got.Error, tc.errText) {
				t.Errorf("Glob(%+v) error %q, want %q", tc.in, got.Error, tc.errText)
			}
		case tc.truncated:
			if !got.Truncated || len(got.Paths) != tools.MaxGlobPaths || got.Paths[0] != "many/0000.txt" {
				t.Errorf("Glob(%+v) = %d paths, truncated %v; want %d, truncated", tc.in, len(got.Paths), got.Truncated, tools.MaxGlobPaths)
			}
		default:
			if diff := cmp.Diff(tc.want, got.Paths); diff != "" || got.Error != "" {
				t.Errorf("Glob(%+v) %q (-want +got):\n%s", tc.in, got.Error, diff)
			}
		}
	}
	for _, p := range []api.GlobInput{{Pattern: "../*"}, {Pattern: "/etc/*"}, {Pattern: "*", Path: "/etc"}, {Pattern: "/workspace/../*"}, {Pattern: "‥/*"}, {Pattern: "x\x00"}} {
		if _, err := tools.Glob(t.Context(), e, p); err == nil {
			t.Errorf("Glob(%+v) = nil error, want a refusal", p)
		} else {
			refusal(t, err)
		}
	}
}

func TestGrep(t *testing.T) {
	files := map[string]string{
		"a.py":      "import os\nprint(os.getcwd())\n",
		"src/b.py":  "def main():\n    OS = 1\r\n",
		"src/c.txt": "os here\n",
		"bin":       "os\x00",
		"big.txt":   strings.Repeat("os\n", tools.MaxGrepFileBytes/3+1),
		"many.txt":  strings.Repeat("match\n", 600),
		"link":      "-> a.py",
	}
	e, ws := env(files)
	for _, tc := range []struct {
		in      api.GrepInput
		want    []api.GrepMatch
		count   int
		files   int
		errText string
	}{
		{in: api.GrepInput{Pattern: "os"}, want: []api.GrepMatch{{Path: "a.py", Line: 1, Text: "import os"}, {Path: "a.py", Line: 2, Text: "print(os.getcwd())"}, {Path: "src/c.txt", Line: 1, Text: "os here"}}, count: 3, files: 2},
		{in: api.GrepInput{Pattern: "os", IgnoreCase: true, Glob: "*.py"}, want: []api.GrepMatch{{Path: "a.py", Line: 1, Text: "import os"}, {Path: "a.py", Line: 2, Text: "print(os.getcwd())"}, {Path: "src/b.py", Line: 2, Text: "    OS = 1"}}, count: 3, files: 2},
		{in: api.GrepInput{Pattern: "os", Path: "src"}, want: []api.GrepMatch{{Path: "src/c.txt", Line: 1, Text: "os here"}}, count: 1, files: 1},
		{in: api.GrepInput{Pattern: "os", Path: "/workspace/a.py"}, want: []api.GrepMatch{{Path: "a.py", Line: 1, Text: "import os"}, {Path: "a.py", Line: 2, Text: "print(os.getcwd())"}}, count: 2, files: 1},
		{in: api.GrepInput{Pattern: "^def", Glob: "src/*.py"}, want: []api.GrepMatch{{Path: "src/b.py", Line: 1, Text: "def main():"}}, count: 1, files: 1},
		{in: api.GrepInput{Pattern: "a,b", Path: "/library"}, want: []api.GrepMatch{{Path: "/library/ref.csv", Line: 1, Text: "a,b"}}, count: 1, files: 1},
		{in: api.GrepInput{Pattern: "nothing"}, want: []api.GrepMatch{}},
		{in: api.GrepInput{Pattern: "("}, errText: "missing closing )"},
		{in: api.GrepInput{Pattern: ""}, errText: "empty pattern"},
		{in: api.GrepInput{Pattern: "x", Path: "nope"}, errText: "no such file or directory"},
		{in: api.GrepInput{Pattern: "x", Path: "big.txt"}, errText: "is larger than the 1MiB Grep reads"},
	} {
		got, err := tools.Grep(t.Context(), e, tc.in)
		switch {
		case err != nil:
			t.Errorf("Grep(%+v) error %v", tc.in, err)
		case tc.errText != "":
			if !strings.Contains(got.Error, tc.errText) {
				t.Errorf("Grep(%+v) error %q, want %q", tc.in, got.Error, tc.errText)
			}
		default:
			if diff := cmp.Diff(tc.want, got.Matches); diff != "" || got.Count != tc.count || got.Files != tc.files || got.Truncated || got.Error != "" {
				t.Errorf("Grep(%+v) = count %d files %d truncated %v %q, want %d %d (-want +got):\n%s", tc.in, got.Count, got.Files, got.Truncated, got.Error, tc.count, tc.files, diff)
			}
		}
	}
	got, err := tools.Grep(t.Context(), e, api.GrepInput{Pattern: "match"})
	if err != nil || got.Count != 600 || len(got.Matches) != tools.MaxGrepMatches || !got.Truncated || got.Files != 1 {
		t.Errorf("Grep(match) = %d matches of %d in %d files, truncated %v, %v; want %d of 600 in 1, truncated", len(got.Matches), got.Count, got.Files, got.Truncated, err, tools.MaxGrepMatches)
	}
	if ws.Opens["big.txt"] != 0 || ws.Opens["link"] != 0 {
		t.Errorf("Grep opened big.txt %d times, link %d; want neither", ws.Opens["big.txt"], ws.Opens["link"])
	}
	for _, in := range []api.GrepInput{{Pattern: "x", Path: "../"}, {Pattern: "x", Path: "/etc"}, {Pattern: "x", Glob: "../*"}, {Pattern: "x", Path: "/library/../x"}} {
		if _, err := tools.Grep(t.Context(), e, in); err == nil {
			t.Errorf("Grep(%+v) = nil error, want a refusal", in)
		} else {
			refusal(t, err)
		}
	}
}

func TestWrite(t *testing.T) {
	e, ws := env(map[string]string{"a.txt": "old\n", "agents/x.md": "---\n", "dir/f": "", "file": "x", "run.sh": "#!/bin/sh\n"})
	got, err := tools.Write(t.Context(), e, api.WriteInput{Path: "/workspace/new/b.txt", Content: "hello\n"})
	if err != nil || got.Error != "" || got.Revision != "rev-2" || got.Bytes != 6 || got.Path != "new/b.txt" {
		t.Fatalf("Write(new/b.txt) = %+v, %v; want revision rev-2 of 6 bytes", got, err)
	}
	if c, ok := ws.File("new/b.txt"); !ok || c != "hello\n" {
		t.Errorf("new/b.txt = %q, %v after Write", c, ok)
	}
	if c := ws.Commits[0]; c.Parent != "rev-1" || c.Message != "Write new/b.txt" || len(c.Changes) != 1 || c.Changes[0].Mode != 0o644 {
		t.Errorf("commit = %+v, want parent rev-1, message Write new/b.txt, mode 644", c)
	}
	for _, tc := range []struct {
		path, errText string
	}{
		{"dir", "dir is a directory"},
		{"/workspace", "the workspace itself is not a file"},
		{"file/x", "file is a file, not a directory"},
	} {
		got, err := tools.Write(t.Context(), e, api.WriteInput{Path: tc.path, Content: "x"})
		if err != nil || !strings.Contains(got.Error, tc.errText) {
			t.Errorf("Write(%s) = %+v, %v; want error %q", tc.path, got, err, tc.errText)
		}
	}
	for _, p := range []string{"agents/x.md", "agents/y.md", "/library/ref.csv", "../x", "/tmp/x"} {
		_, err := tools.Write(t.Context(), e, api.WriteInput{Path: p, Content: "tools: [Bash]"})
		if r := refusal(t, err); p[0] == 'a' && r.Reason != api.RefusedReadOnly {
			t.Errorf("Write(%s) reason %s, want %s", p, r.Reason, api.RefusedReadOnly)
		}
	}
	if c, _ := ws.File("agents/x.md"); c != "---\n" || ws.Revisions() != 2 {
		t.Errorf("agents/x.md = %q, %d revisions after refused writes; want unchanged", c, ws.Revisions())
	}
}

// conflicting is a workspace whose head moves between a tool's read and
// its commit.
type conflicting struct {
	*toolstest.Workspace
	once bool
}

func (c *conflicting) Head(ctx context.Context) (tools.Tree, error) {
	h, err := c.Workspace.Head(ctx)
	if !c.once {
		c.once = true
		c.Workspace.Commit(ctx, h.Revision(), []tools.Change{{Path: "a.txt", Content: []byte("theirs\n"), Mode: 0o644}}, "someone else")
	}
	return h, err
}

func TestWriteConflict(t *testing.T) {
	ws := &conflicting{Workspace: toolstest.New(map[string]string{"a.txt": "old\n"})}
	got, err := tools.Edit(t.Context(), tools.Env{Workspace: ws}, api.EditInput{Path: "a.txt", OldString: "old", NewString: "mine"})
	want := "conflict: a.txt changed since rev-1 (the change is kept as detached revision rev-detached); read it again and retry"
	if err != nil || got.Error != want || got.Revision != "" {
		t.Errorf("Edit over a moved head = %+v, %v; want error %q", got, err, want)
	}
}

func TestEdit(t *testing.T) {
	e, ws := env(map[string]string{"a.txt": "one two two\nthree\n", "bin": "\x00x", "agents/x.md": "tools: [Read]\n"})
	for _, tc := range []struct {
		in      api.EditInput
		n       int
		content string
		errText string
	}{
		{in: api.EditInput{Path: "a.txt", OldString: "one", NewString: "1"}, n: 1, content: "1 two two\nthree\n"},
		{in: api.EditInput{Path: "a.txt", OldString: "two", NewString: "2"}, errText: "old_string occurs 2 times in a.txt"},
		{in: api.EditInput{Path: "a.txt", OldString: "two", NewString: "2", ReplaceAll: true}, n: 2, content: "1 2 2\nthree\n"},
		{in: api.EditInput{Path: "a.txt", OldString: "four", NewString: "4"}, errText: "old_string not found in a.txt"},
		{in: api.EditInput{Path: "a.txt", OldString: "", NewString: "4"}, errText: "old_string is empty"},
		{in: api.EditInput{Path: "a.txt", OldString: "2", NewString: "2"}, errText: "the same"},
		{in: api.EditInput{Path: "b.txt", OldString: "x", NewString: "y"}, errText: "no such file: b.txt"},
		{in: api.EditInput{Path: "bin", OldString: "x", NewString: "y"}, errText: "binary file"},
	} {
		got, err := tools.Edit(t.Context(), e, tc.in)
		switch {
		case err != nil:
			t.Errorf("Edit(%+v) error %v", tc.in, err)
		case tc.errText != "":
			if !strings.Contains(got.Error, tc.errText) || got.Revision != "" {
				t.Errorf("Edit(%+v) = %+v, want error %q", tc.in, got, tc.errText)
			}
		default:
			c, _ := ws.File("a.txt")
			if got.Error != "" || got.Replacements != tc.n || c != tc.content || got.Revision == "" {
				t.Errorf("Edit(%+v) = %+v, file %q; want %d replacements, %q", tc.in, got, c, tc.n, tc.content)
			}
		}
	}
	_, err := tools.Edit(t.Context(), e, api.EditInput{Path: "agents/x.md", OldString: "[Read]", NewString: "[Read, Bash]"})
	if r := refusal(t, err); r.Reason != api.RefusedReadOnly || !strings.Contains(r.Message, "no tool writes under agents/") {
		t.Errorf("Edit(agents/x.md) = %+v, want read_only, no tool writes under agents/", r)
	}
}

func TestProposalDiff(t *testing.T) {
	head, err := toolstest.New(map[string]string{"a.txt": "1\n2\n3\n", "gone.txt": "x\n", "bin": "\x00", "agents/a.md": ""}).Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got, err := tools.ProposalDiff(t.Context(), head, []api.ProposedFile{
		{Path: "new.txt", Content: "n\n"},
		{Path: "/workspace/a.txt", Content: "1\nTWO\n3\n"},
		{Path: "gone.txt", Delete: true},
		{Path: "bin", Content: "\x00\x01"},
	})
	want := "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n 1\n-2\n+TWO\n 3\n" +
		"Binary files a/bin and b/bin differ\n" +
		"--- a/gone.txt\n+++ b/gone.txt\n@@ -1,1 +0,0 @@\n-x\n" +
		"--- a/new.txt\n+++ b/new.txt\n@@ -0,0 +1,1 @@\n+n\n"
	if err != nil || got != want {
		t.Errorf("ProposalDiff = %q, %v\nwant %q", got, err, want)
	}
	for _, tc := range []struct {
		files  []api.ProposedFile
		reason string
	}{
		{[]api.ProposedFile{{Path: "agents/a.md", Content: "tools: [Bash]"}}, api.RefusedReadOnly},
		{[]api.ProposedFile{{Path: "../x", Content: ""}}, api.RefusedPath},
		{[]api.ProposedFile{{Path: "/library/x", Content: ""}}, api.RefusedReadOnly},
		{[]api.ProposedFile{{Path: "a.txt"}, {Path: "./a.txt"}}, api.RefusedInput},
	} {
		_, err := tools.ProposalDiff(t.Context(), head, tc.files)
		if r := refusal(t, err); r.Reason != tc.reason {
			t.Errorf("ProposalDiff(%+v) reason %s, want %s", tc.files, r.Reason, tc.reason)
		}
	}
	_, err = tools.ProposalDiff(t.Context(), head, []api.ProposedFile{{Path: "nope", Delete: true}})
	var f tools.Failure
	if !errors.As(err, &f) {
		t.Errorf("ProposalDiff(delete nope) = %v, want a Failure", err)
	}
}

func TestPatchFiles(t *testing.T) {
	head, err := toolstest.New(map[string]string{"a.txt": "1\n2\n3\n", "gone.txt": "x\n", "bin": "\x00", "agents/a.md": "tools: [Read]\n"}).Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	patch := "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n 1\n-2\n+TWO\n 3\n" +
		"--- /dev/null\n+++ b/new/n.txt\n@@ -0,0 +1 @@\n+n\n" +
		"--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
	got, err := tools.PatchFiles(t.Context(), head, patch)
	want := []api.ProposedFile{{Path: "a.txt", Content: "1\nTWO\n3\n"}, {Path: "new/n.txt", Content: "n\n"}, {Path: "gone.txt", Delete: true}}
	if diff := cmp.Diff(want, got); err != nil || diff != "" {
		t.Errorf("PatchFiles = %v (-want +got):\n%s", err, diff)
	}
	// The diff of what it makes is the patch's, file by file.
	d, err := tools.ProposalDiff(t.Context(), head, got)
	if err != nil || !strings.Contains(d, "-2\n+TWO\n") || !strings.Contains(d, "+++ b/new/n.txt\n@@ -0,0 +1,1 @@\n+n\n") {
		t.Errorf("ProposalDiff of the patch's files = %q, %v", d, err)
	}
	for _, tc := range []struct {
		patch, failure, reason string
	}{
		{patch: "not a patch", failure: "no file in the patch"},
		{patch: "--- a/a.txt\n+++ b/a.txt\n@@ -2 +2 @@\n-9\n+10\n", failure: "does not apply"},
		{patch: "--- a/none.txt\n+++ b/none.txt\n@@ -1 +1 @@\n-a\n+b\n", failure: "no such file"},
		{patch: "--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+a\n", failure: "exists already"},
		{patch: "--- a/a.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-1\n+1\n", failure: "renames are not taken"},
		{patch: "--- a/bin\n+++ b/bin\n@@ -1 +1 @@\n-x\n+y\n", failure: "not a text file"},
		{patch: "--- a/gone.txt\n+++ /dev/null\n@@ -0,0 +0,0 @@\n", failure: "has lines the patch does not remove"},
		{patch: "--- a/agents/a.md\n+++ b/agents/a.md\n@@ -1 +1 @@\n-tools: [Read]\n+tools: [Read, Bash]\n", reason: api.RefusedReadOnly},
		{patch: "--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n", reason: api.RefusedPath},
		{patch: "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-1\n+one\n--- a/a.txt\n+++ b/a.txt\n@@ -3 +3 @@\n-3\n+three\n", reason: api.RefusedInput},
	} {
		_, err := tools.PatchFiles(t.Context(), head, tc.patch)
		var f tools.Failure
		switch {
		case tc.reason != "":
			if r := refusal(t, err); r.Reason != tc.reason {
				t.Errorf("PatchFiles(%q) reason %s, want %s", tc.patch, r.Reason, tc.reason)
			}
		case !errors.As(err, &f) || !strings.Contains(f.Error(), tc.failure):
			t.Errorf("PatchFiles(%q) = %v, want a failure %q", tc.patch, err, tc.failure)
		}
	}
}
