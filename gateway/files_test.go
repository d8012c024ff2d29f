package gateway

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/manifest"
)

// TestFilesConfinement is the attack table of the files API (issue 12,
// Done 5): every path that could name something outside the workspace,
// however encoded, is refused with 400 naming the problem, or stays
// inside (a file of that literal name, not found); a symlink in the tree
// is answered as the link itself, never followed. No answer carries a
// host file.
func TestFilesConfinement(t *testing.T) {
	f := newFixture(t)
	// A step may leave a symlink only inside the tree: the scheduler
	// refuses a result with one pointing out (no revision, the step exits
	// with a warning), and commits the others as links.
	for i, target := range []string{"/etc/passwd", "../../../../etc/passwd", "data/../../x"} {
		id := fmt.Sprintf("s-plant-%d", i)
		f.sched.Submit(t, id, wsMain)
		st := f.sched.ExitWithTree(id, 0, nil, map[string]string{"evil": target})
		warned := false
		for _, e := range st.Events {
			warned = warned || e.Kind == api.EventWarning && e.Warning != nil && e.Warning.Cause == api.WarningWorkspaceNotSaved
		}
		if st.Revision != "" || st.State != "exited" || !warned {
			t.Errorf("a symlink to %q: step %s, revision %q, warned %v; want it refused: exited without a revision, with a %s warning",
				target, st.State, st.Revision, warned, api.WarningWorkspaceNotSaved)
		}
	}
	var evil []api.TreeEntry
	f.do("viewer", "GET", "/v1/workspaces/ws-main/tree?path=evil", "", 200, &evil)
	if len(evil) != 0 {
		t.Errorf("tree?path=evil = %+v, want no entry", evil)
	}
	f.sched.Submit(t, "s-plant-links", wsMain)
	if st := f.sched.ExitWithTree("s-plant-links", 0, nil, map[string]string{"link": "data/a.txt", "data/up": ".."}); st.Revision == "" {
		t.Fatalf("symlinks inside the tree: step %s made no revision", st.State)
	}
	hostFile, _ := os.ReadFile("/etc/passwd")
	long := strings.Repeat("a/", 600) + "a"
	cases := []struct {
		name, path string
		status     int
		// want is in the body: the problem named, or the link's target.
		want string
	}{
		{"dotdot", "../../../../etc/passwd", 400, `\"..\" components are refused`},
		{"encoded dotdot", "%2e%2e/%2e%2e/etc/passwd", 400, `\"..\" components are refused`},
		{"encoded dotdot and slash", "..%2f..%2fetc%2fpasswd", 400, `\"..\" components are refused`},
		{"dotdot inside", "data/../data/a.txt", 400, `\"..\" components are refused`},
		{"dot", "./data/./a.txt", 400, "components"},
		{"double encoded dotdot", "%252e%252e/%252e%252e/etc/passwd", 404, "no file %2e%2e/%2e%2e/etc/passwd"},
		{"absolute", "/etc/passwd", 400, "absolute"},
		{"encoded absolute", "%2fetc%2fpasswd", 400, "absolute"},
		{"workspace prefix and dotdot", "%2fworkspace%2f..%2fetc%2fpasswd", 400, `\"..\"`},
		{"NUL", "data/a.txt%00.png", 400, "U+0000"},
		{"newline", "data/a%0a.txt", 400, "U+000A"},
		{"escape", "data/a%1b.txt", 400, "U+001B"},
		{"backslash", "..%5c..%5cetc%5cpasswd", 400, "U+005C"},
		{"overlong path", long, 400, "more than 1024"},
		{"overlong component", strings.Repeat("x", 256), 400, "more than 255"},
		{"empty component", "data//a.txt", 400, "empty component"},
		{"directory", "data", 400, "is a directory"},
		{"symlink", "link", 200, "data/a.txt"},
		{"symlink to the parent", "data/up", 200, ".."},
		{"below a symlink", "data/up/data/a.txt", 404, "no file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, method := range []string{"GET", "PUT", "DELETE"} {
				body := ""
				if method == "PUT" {
					body = "x"
				}
				want := tc.status
				if method != "GET" && (want != 400 || tc.name == "directory") {
					continue // a write of a name inside is a write
				}
				w := f.serve(f.request(f.creds["editor"], method, "/v1/workspaces/ws-main/files/"+tc.path, body))
				if w.Code != want || !strings.Contains(w.Body.String(), tc.want) {
					t.Errorf("%s %s = %d %s, want %d with %q", method, tc.path, w.Code, w.Body, want, tc.want)
				}
				if len(hostFile) > 0 && strings.Contains(w.Body.String(), string(hostFile[:min(len(hostFile), 16)])) {
					t.Fatalf("%s %s answered the host's /etc/passwd", method, tc.path)
				}
				if tc.status == 200 {
					if w.Header().Get(TypeHeader) != "symlink" || w.Body.String() != tc.want || strings.Contains(w.Body.String(), aText) {
						t.Errorf("GET %s = %v %q, want the link itself (%s: symlink, body %q)", tc.path, w.Header(), w.Body, TypeHeader, tc.want)
					}
				}
			}
		})
	}
	// The tree shows the link as a link.
	var tree []api.TreeEntry
	f.do("viewer", "GET", "/v1/workspaces/ws-main/tree?path=link", "", 200, &tree)
	if len(tree) != 1 || tree[0].Type != "symlink" || tree[0].Target != "data/a.txt" {
		t.Errorf("tree?path=link = %+v, want the symlink to data/a.txt", tree)
	}
	f.do("viewer", "GET", "/v1/workspaces/ws-main/tree?path=../etc", "", 400, nil)
	for _, q := range []string{"tree?rev=..%2fx", "files/data/a.txt?rev=rev-..", "diff?from=REV-1", "archive?rev=rev-%00"} {
		f.do("viewer", "GET", "/v1/workspaces/ws-main/"+q, "", 400, nil)
	}
}

// TestFileRoundTrip: a file written by a person and by a key is a
// revision authored by each, read back byte for byte with its type,
// ETag and ranges; every write is audited with the workspace, path and
// revision, never the contents.
func TestFileRoundTrip(t *testing.T) {
	f := newFixture(t)
	png := "\x89PNG\r\n\x1a\nchart bytes"
	r := f.request(f.creds["editor"], "PUT", "/v1/workspaces/ws-main/files/out/chart.png", png)
	r.Header.Set("If-Match", f.rev)
	r.Header.Set("X-Rodon-Message", "the chart")
	w := f.serve(r)
	var rev api.Revision
	if w.Code != 201 || json.Unmarshal(w.Body.Bytes(), &rev) != nil {
		t.Fatalf("PUT = %d %s, want 201 and a revision", w.Code, w.Body)
	}
	editor := accountID("editor@example.com")
	if rev.Number != 2 || rev.Parent != f.rev || rev.Author != (api.Author{Kind: "account", ID: editor}) || rev.Message != "the chart" ||
		len(rev.Changes.Added) != 1 || rev.Changes.Added[0] != "out/chart.png" {
		t.Errorf("revision = %+v, want number 2 from %s by account %s adding out/chart.png", rev, f.rev, editor)
	}
	entries := f.store.AuditAll()
	var doc api.AuditDocument
	json.Unmarshal(entries[len(entries)-1].Entry, &doc)
	if doc.Action != "file.put" || doc.Who != editor || doc.Workspace != wsMain || doc.Path != "out/chart.png" || doc.Revision != rev.ID {
		t.Errorf("audit = %+v, want file.put by %s of ws-main out/chart.png making %s", doc, editor, rev.ID)
	}
	if strings.Contains(string(entries[len(entries)-1].Entry), "chart bytes") {
		t.Errorf("audit entry holds the file's contents: %s", entries[len(entries)-1].Entry)
	}

	w = f.do("viewer", "GET", "/v1/workspaces/ws-main/files/out/chart.png", "", 200, nil)
	h := w.Header()
	if w.Body.String() != png || h.Get("Content-Type") != "image/png" || h.Get("X-Content-Type-Options") != "nosniff" ||
		!strings.HasPrefix(h.Get("Content-Disposition"), "inline") || h.Get("ETag") != `"`+manifest.Digest([]byte(png))+`"` ||
		!strings.Contains(h.Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("GET chart.png = %v %q, want the bytes as image/png inline, nosniff, sandboxed, ETag the digest", h, w.Body)
	}
	rr := f.request(f.creds["viewer"], "GET", "/v1/workspaces/ws-main/files/out/chart.png", "")
	rr.Header.Set("Range", "bytes=1-3")
	if w := f.serve(rr); w.Code != 206 || w.Body.String() != "PNG" || w.Header().Get("Content-Range") != "bytes 1-3/"+itoa(len(png)) {
		t.Errorf("GET Range 1-3 = %d %v %q, want 206 PNG", w.Code, w.Header(), w.Body)
	}
	rr = f.request(f.creds["viewer"], "GET", "/v1/workspaces/ws-main/files/out/chart.png", "")
	rr.Header.Set("If-None-Match", h.Get("ETag"))
	if w := f.serve(rr); w.Code != 304 {
		t.Errorf("GET If-None-Match = %d, want 304", w.Code)
	}
	if w := f.serve(f.request(f.creds["viewer"], "HEAD", "/v1/workspaces/ws-main/files/out/chart.png", "")); w.Code != 200 ||
		w.Header().Get("Content-Length") != itoa(len(png)) || w.Body.Len() != 0 {
		t.Errorf("HEAD chart.png = %d %v, want 200 with the length and no body", w.Code, w.Header())
	}
	// Bad headers are refused before anything is written.
	for name, value := range map[string]string{"X-Rodon-Message": strings.Repeat("m", 1025), "X-Rodon-Mode": "777", "If-Match": "../rev"} {
		r := f.request(f.creds["editor"], "PUT", "/v1/workspaces/ws-main/files/out/x.txt", "x")
		r.Header.Set(name, value)
		if w := f.serve(r); w.Code != 400 {
			t.Errorf("PUT with %s %.20q = %d %s, want 400", name, value, w.Code, w.Body)
		}
	}
	// An earlier revision still has its own tree.
	f.do("viewer", "GET", "/v1/workspaces/ws-main/files/out/chart.png?rev="+f.rev, "", 404, nil)

	// HTML and SVG never run in the gateway's origin.
	for _, name := range []string{"page.html", "image.svg", "noext"} {
		f.do("key-editor", "PUT", "/v1/workspaces/ws-main/files/"+name, "<script>alert(1)</script>", 201, &rev)
		if rev.Author.Kind != "key" {
			t.Errorf("a key's write is authored %+v, want kind key", rev.Author)
		}
		w := f.do("viewer", "GET", "/v1/workspaces/ws-main/files/"+name, "", 200, nil)
		if !strings.HasPrefix(w.Header().Get("Content-Disposition"), "attachment") || !strings.Contains(w.Header().Get("Content-Security-Policy"), "sandbox") ||
			w.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s headers = %v, want an attachment, sandboxed, nosniff", name, w.Header())
		}
	}

	// A write from a stale revision that changes a path changed since is
	// a conflict, named.
	r = f.request(f.creds["editor"], "PUT", "/v1/workspaces/ws-main/files/out/chart.png", "other")
	r.Header.Set("If-Match", f.rev)
	if w := f.serve(r); w.Code != 409 || !strings.Contains(w.Body.String(), "out/chart.png") {
		t.Errorf("PUT from a stale revision = %d %s, want 409 naming out/chart.png", w.Code, w.Body)
	}
	var revs []api.Revision
	f.do("viewer", "GET", "/v1/workspaces/ws-main/revisions", "", 200, &revs)
	if len(revs) != 5 || revs[0].Number != 5 {
		t.Errorf("revisions = %d, newest %+v, want 5 newest first", len(revs), revs[0])
	}
	var d api.WorkspaceDiff
	f.do("viewer", "GET", "/v1/workspaces/ws-main/diff?from="+f.rev+"&to="+revs[0].ID, "", 200, &d)
	if len(d.Changes.Added) != 4 || d.Text == nil {
		t.Errorf("diff = %+v, want 4 added", d)
	}
	f.do("editor", "POST", "/v1/workspaces/ws-main/restore", `{"rev":"`+f.rev+`"}`, 201, &rev)
	if len(rev.Changes.Removed) != 4 {
		t.Errorf("restore = %+v, want the 4 files removed", rev)
	}
	f.do("editor", "DELETE", "/v1/workspaces/ws-main/files/data/a.txt", "", 200, &rev)
	f.do("viewer", "GET", "/v1/workspaces/ws-main/files/data/a.txt", "", 404, nil)
	w = f.do("viewer", "GET", "/v1/workspaces/ws-main/archive?rev="+f.rev, "", 200, nil)
	if w.Header().Get("Content-Type") != "application/gzip" || !strings.HasPrefix(w.Header().Get("Content-Disposition"), "attachment") {
		t.Errorf("archive headers = %v, want a gzip attachment", w.Header())
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestMaxFileSize: a file over --max-file-size is refused with 413 naming
// the flag, with or without a Content-Length, and makes no revision.
func TestMaxFileSize(t *testing.T) {
	f := newFixtureWith(t, func(c *Config) { c.MaxFileSize = 10 })
	w := f.serve(f.request(f.creds["editor"], "PUT", "/v1/workspaces/ws-main/files/big", "01234567890"))
	if w.Code != 413 || !strings.Contains(w.Body.String(), "--max-file-size") {
		t.Errorf("PUT 11 bytes = %d %s, want 413 naming --max-file-size", w.Code, w.Body)
	}
	r := f.request(f.creds["editor"], "PUT", "/v1/workspaces/ws-main/files/big", "01234567890")
	r.ContentLength = -1
	if w := f.serve(r); w.Code != 413 || !strings.Contains(w.Body.String(), "--max-file-size") {
		t.Errorf("PUT 11 bytes without a length = %d %s, want 413 naming --max-file-size", w.Code, w.Body)
	}
	body := `{"files":[{"path":"big","sha256":"` + strings.Repeat("ab", 32) + `","size":11}]}`
	if w := f.serve(f.request(f.creds["editor"], "POST", "/v1/workspaces/ws-main/uploads", body)); w.Code != 413 {
		t.Errorf("uploads of 11 bytes = %d %s, want 413", w.Code, w.Body)
	}
	var revs []api.Revision
	f.do("viewer", "GET", "/v1/workspaces/ws-main/revisions", "", 200, &revs)
	if len(revs) != 1 {
		t.Errorf("%d revisions, want only the first", len(revs))
	}
	f.do("editor", "PUT", "/v1/workspaces/ws-main/files/small", "0123456789", 201, nil)
}

// TestUploadsThroughTheGateway: the local store's presigned URLs are
// rewritten to the gateway's own /v1/blobs/, which proxies them
// unchanged with no identity; the commit makes the revision.
func TestUploadsThroughTheGateway(t *testing.T) {
	f := newFixture(t)
	content := "a large dataset"
	d := manifest.Digest([]byte(content))
	body := `{"files":[{"path":"data/big.csv","sha256":"` + d + `","size":15}],"message":"dataset"}`
	var up api.UploadResponse
	f.do("editor", "POST", "/v1/workspaces/ws-main/uploads", body, 200, &up)
	u := up.URLs[d]
	if !strings.HasPrefix(u, testSite+"/v1/blobs/"+d+"?") {
		t.Fatalf("upload URL %q, want the gateway's %s/v1/blobs/%s?...", u, testSite, d)
	}
	path := strings.TrimPrefix(u, testSite)
	if w := f.serve(f.request(cred{}, "PUT", path, "not the bytes of it")); w.Code != 400 {
		t.Errorf("PUT of other bytes = %d %s, want the store's 400", w.Code, w.Body)
	}
	if w := f.serve(f.request(cred{}, "PUT", strings.Replace(path, "sig=", "sig=00", 1), content)); w.Code != 403 {
		t.Errorf("PUT with a forged signature = %d %s, want the store's 403", w.Code, w.Body)
	}
	if w := f.serve(f.request(cred{}, "PUT", path, content)); w.Code != 200 || w.Header().Get("ETag") != `"`+d+`"` {
		t.Fatalf("PUT through the proxy = %d %v %s, want the store's 200 with the ETag", w.Code, w.Header(), w.Body)
	}
	f.do("editor", "POST", "/v1/workspaces/ws-main/uploads", strings.Replace(body, `"message"`, `"commit":true,"message"`, 1), 201, &up)
	if up.Revision == nil || up.Revision.Changes.Added[0] != "data/big.csv" {
		t.Fatalf("commit = %+v, want a revision adding data/big.csv", up)
	}
	if w := f.do("viewer", "GET", "/v1/workspaces/ws-main/files/data/big.csv", "", 200, nil); w.Body.String() != content {
		t.Errorf("GET big.csv = %q, want %q", w.Body, content)
	}
	// A commit may delete paths in the same revision; a deletion of
	// nothing is a 404, an unclean path a 400.
	body = `{"files":[{"path":"data/copy.csv","sha256":"` + d + `","size":15}],"delete":["data/big.csv"],"commit":true}`
	f.do("editor", "POST", "/v1/workspaces/ws-main/uploads", body, 201, &up)
	if up.Revision == nil || len(up.Revision.Changes.Added) != 1 || len(up.Revision.Changes.Removed) != 1 || up.Revision.Changes.Removed[0] != "data/big.csv" {
		t.Fatalf("commit with a deletion = %+v, want one revision adding data/copy.csv and removing data/big.csv", up)
	}
	f.do("editor", "POST", "/v1/workspaces/ws-main/uploads", `{"files":[],"delete":["data/big.csv"],"commit":true}`, 404, nil)
	f.do("editor", "POST", "/v1/workspaces/ws-main/uploads", `{"files":[],"delete":["../x"],"commit":true}`, 400, nil)
	// A presigned GET (the one a node's assignment carries for a step of
	// the workspace) goes through as well, ranges and all, as an
	// attachment.
	f.sched.Submit(t, "s-reader", wsMain)
	get := f.sched.agent.Assigned("s-reader").Spec.WorkspaceAccess.URLs[d]
	if get == "" {
		t.Fatalf("a step's assignment has no GET URL for %s", d)
	}
	r := f.request(cred{}, "GET", get[strings.Index(get, "/v1/blobs/"):], "")
	r.Header.Set("Range", "bytes=2-6")
	if w := f.serve(r); w.Code != 206 || w.Body.String() != "large" || !strings.HasPrefix(w.Header().Get("Content-Disposition"), "attachment") {
		t.Errorf("GET through the proxy = %d %v %q, want 206 \"large\" as an attachment", w.Code, w.Header(), w.Body)
	}
}

// TestLibrary: the account library is one workspace for the organisation:
// everyone reads it, limited members too; only an admin of the whole
// organisation writes it.
func TestLibrary(t *testing.T) {
	f := newFixture(t)
	var lib api.Workspace
	f.do("viewer", "GET", "/v1/library", "", 200, &lib)
	var again api.Workspace
	f.do("other", "GET", "/v1/library", "", 200, &again)
	if !validID(lib.ID, prefixWorkspace) || again.ID != lib.ID {
		t.Fatalf("library = %+v and %+v, want one workspace id", lib, again)
	}
	files := "/v1/workspaces/" + lib.ID + "/files/notes.md"
	for _, who := range []string{"editor", "key-editor", "other"} {
		if w := f.serve(f.request(f.creds[who], "PUT", files, "x")); w.Code != 403 {
			t.Errorf("PUT library as %s = %d %s, want 403", who, w.Code, w.Body)
		}
	}
	f.do("admin", "PUT", files, "shared notes", 201, nil)
	for _, who := range []string{"viewer", "other", "key-viewer"} {
		if w := f.do(who, "GET", files, "", 200, nil); w.Body.String() != "shared notes" {
			t.Errorf("GET library as %s = %q", who, w.Body)
		}
	}
	var ws []api.Workspace
	f.do("owner", "GET", "/v1/workspaces", "", 200, &ws)
	for _, w := range ws {
		if w.ID == lib.ID {
			t.Errorf("the library is listed among the workspaces: %+v", ws)
		}
	}
	var op api.Operation
	f.do("owner", "POST", "/v1/runs", `{"workspace":"`+lib.ID+`","steps":[{"args":["true"]}]}`, 404, &op)
}
