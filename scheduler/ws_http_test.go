package scheduler

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/blob"
	"github.com/rodon-compute/rodon/internal/blob/blobtest"
	"github.com/rodon-compute/rodon/internal/manifest"
)

// wsFixture is a member with TLS and its local blob store (blob.Local
// in its data dir), node n1 (and n2) registered: the workspace API, steps
// with workspaces and their agents. Requests go to via, the leader m
// unless a test says otherwise.
type wsFixture struct {
	t   *testing.T
	c   *serverCluster
	m   *testServer
	via *testServer
}

func newWSFixture(t *testing.T) *wsFixture {
	t.Helper()
	return newWSCluster(t, 1, "local")
}

// newWSCluster is a wsFixture of n members whose blob store is blobs.
func newWSCluster(t *testing.T, n int, blobs string) *wsFixture {
	t.Helper()
	return newWSClusterWith(t, n, func(cfg *Config) { cfg.BlobStore = blobs })
}

// newWSClusterWith is a wsFixture of n members configured by edit.
func newWSClusterWith(t *testing.T, n int, edit func(*Config)) *wsFixture {
	t.Helper()
	c := newTLSCluster(t, n, func(cfg *Config) { cfg.NodeTTL = time.Hour; edit(cfg) })
	f := &wsFixture{t: t, c: c, m: c.waitLeader()}
	f.via = f.m
	for i, n := range []cluster.NodeID{"n1", "n2"} {
		f.apply(cluster.RegisterNode{Node: n, Address: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(7201+i)),
			Capacity: cluster.Resources{CPU: 64, MemoryBytes: 64 * gib}, Health: cluster.Health{State: cluster.NodeReady}, At: time.Now().UTC()})
	}
	return f
}

func (f *wsFixture) apply(c cluster.Command) {
	f.t.Helper()
	if _, err := f.m.srv.raft.Apply(f.t.Context(), c); err != nil {
		f.t.Fatalf("Apply(%s) = %v", c.CommandType(), err)
	}
}

// do sends a request as who and decodes a 2xx answer into out (if not
// nil); it returns the status, the headers and the body.
func (f *wsFixture) do(who, method, path, body string, header http.Header, out any) (int, http.Header, []byte) {
	f.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(f.t.Context(), method, f.via.url()+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := (&http.Client{Transport: f.c.identity(who).tr, Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		f.t.Fatalf("%s %s as %s: %v", method, path, who, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, out); err != nil {
			f.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
	return resp.StatusCode, resp.Header, b
}

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// put writes a file as the operator and returns its revision.
func (f *wsFixture) put(ws, path, content string, header http.Header) api.Revision {
	f.t.Helper()
	var rev api.Revision
	if status, _, b := f.do("operator/ops", "PUT", "/v1/workspaces/"+ws+"/files/"+path, content, header, &rev); status != http.StatusCreated {
		f.t.Fatalf("PUT %s = %d %s, want 201", path, status, b)
	}
	return rev
}

// file reads a file of revision rev.
func (f *wsFixture) file(ws, path, rev string) (int, string) {
	f.t.Helper()
	status, _, b := f.do("gateway/gw", "GET", "/v1/workspaces/"+ws+"/files/"+path+"?rev="+rev, "", nil, nil)
	return status, string(b)
}

// submit submits a step of workspace ws as the gateway, placed on n1.
func (f *wsFixture) submit(id, ws, base string) api.Step {
	f.t.Helper()
	body := fmt.Sprintf(`{"id":%q,"image":"base","args":["true"],"cpu":1,"memory_bytes":1073741824,"workspace":%q,"base_revision":%q,"node":"n1"}`, id, ws, base)
	var s api.Step
	if status, _, b := f.do("gateway/gw", "POST", "/v1/steps", body, nil, &s); status != http.StatusCreated {
		f.t.Fatalf("submit %s = %d %s", id, status, b)
	}
	return s
}

// run waits until step id is placed on n1 and reports it running; it
// returns the step as the assignment carries it.
func (f *wsFixture) run(id string) cluster.Step {
	f.t.Helper()
	var got cluster.Step
	waitFor(f.t, "step "+id+" assigned", func() bool {
		var as assignmentsAnswer
		f.do("agent/n1", "GET", "/v1/agent/assignments?node=n1", "", nil, &as)
		for _, s := range as.Steps {
			if s.ID == cluster.StepID(id) {
				got = s
				return true
			}
		}
		return false
	})
	now := time.Now().UTC()
	f.apply(cluster.StepPhase{Step: got.ID, Node: "n1", Attempt: 1, State: cluster.StateStarting, Phases: cluster.Phases{Created: now}, At: now})
	f.apply(cluster.StepPhase{Step: got.ID, Node: "n1", Attempt: 1, State: cluster.StateRunning, Phases: cluster.Phases{Started: now}, At: now})
	return got
}

// fetch reads a presigned URL as agent/n1 would.
func (f *wsFixture) fetch(method, u string, body []byte) (int, []byte) {
	f.t.Helper()
	req, err := http.NewRequestWithContext(f.t.Context(), method, u, bytes.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: f.c.identity("agent/n1").tr}).Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// result is what an agent makes of a step's tree: the tree with files
// changed (content "" removes the path), uploaded through the uploads
// route, and the exit report.
func (f *wsFixture) finish(step cluster.Step, base *manifest.Manifest, files map[string]string) (int, []byte) {
	f.t.Helper()
	byPath := map[string]manifest.Entry{}
	if base != nil {
		for _, e := range base.Entries {
			byPath[e.Path] = e
		}
	}
	blobs := map[string][]byte{}
	for p, content := range files {
		if content == "" {
			delete(byPath, p)
			continue
		}
		d := digestOf([]byte(content))
		blobs[d] = []byte(content)
		byPath[p] = manifest.Entry{Path: p, Type: manifest.File, Mode: 0o644, Size: int64(len(content)), SHA256: d}
	}
	m := &manifest.Manifest{}
	for _, e := range byPath {
		m.Entries = append(m.Entries, e)
	}
	m.Sort()
	enc, digest := manifest.Encode(m)
	blobs[digest] = enc
	req := cluster.UploadsRequest{Step: step.ID, Node: "n1", Attempt: 1}
	for d, b := range blobs {
		req.Blobs = append(req.Blobs, cluster.BlobSize{SHA256: d, Size: int64(len(b))})
	}
	body, _ := json.Marshal(req)
	var up cluster.UploadsResponse
	if status, _, b := f.do("agent/n1", "POST", "/v1/agent/uploads", string(body), nil, &up); status != http.StatusOK {
		f.t.Fatalf("uploads of %s = %d %s", step.ID, status, b)
	}
	for d, u := range up.URLs {
		if status, b := f.fetch("PUT", u, blobs[d]); status/100 != 2 {
			f.t.Fatalf("PUT blob %s = %d %s", d, status, b)
		}
	}
	return f.exitReport(step, digest)
}

// exitReport reports the exit of step with the tree digest.
func (f *wsFixture) exitReport(step cluster.Step, digest string) (int, []byte) {
	f.t.Helper()
	now := time.Now().UTC()
	exit := cluster.StepExit{Node: "n1", Attempt: 1, Record: cluster.ExitRecord{Step: step.ID, State: cluster.StateExited, TerminatedBy: cluster.ByExit,
		Phases: cluster.Phases{Exited: now}, Workspace: &cluster.WorkspaceResult{Base: step.Spec.BaseRevision, Manifest: digest}}}
	b, _ := json.Marshal(exit)
	status, _, answer := f.do("agent/n1", "POST", "/v1/agent/steps/"+string(step.ID)+"/exit", string(b), nil, nil)
	return status, answer
}

func (f *wsFixture) step(id string) cluster.Step {
	f.t.Helper()
	s, ok := f.m.srv.fsm.State().Step(cluster.StepID(id))
	if !ok {
		f.t.Fatalf("step %s not found", id)
	}
	return s
}

func (f *wsFixture) manifestOf(rev string) *manifest.Manifest {
	f.t.Helper()
	r, ok := f.m.srv.fsm.State().Revision(rev)
	if !ok {
		f.t.Fatalf("revision %s not found", rev)
	}
	m, err := f.m.srv.manifestOf(f.t.Context(), r.Manifest)
	if err != nil {
		f.t.Fatal(err)
	}
	return m
}

func TestWorkspaceStep(t *testing.T) {
	f := newWSFixture(t)
	r1 := f.put("ws-a", "a.txt", "one\n", nil)
	if r1.Number != 1 || r1.Author != (api.Author{Kind: api.AuthorKey, ID: "operator:ops"}) {
		t.Fatalf("first revision = %+v, want number 1 by operator:ops", r1)
	}
	var r2 api.Revision
	if status, _, b := f.do("gateway/gw", "PUT", "/v1/workspaces/ws-a/files/data/b.csv", "x,y\n", http.Header{AuthorHeader: {"account:acct-1"}, MessageHeader: {"upload"}}, &r2); status != 201 {
		t.Fatalf("gateway PUT = %d %s", status, b)
	}
	if r2.Number != 2 || r2.Parent != r1.ID || r2.Author.ID != "acct-1" || r2.Message != "upload" || !slices.Equal(r2.Changes.Added, []string{"data/b.csv"}) {
		t.Fatalf("second revision = %+v", r2)
	}

	// The base is fixed at submission: the head.
	s := f.submit("s1", "ws-a", "")
	if s.Spec.BaseRevision != r2.ID {
		t.Errorf("submitted base_revision = %q, want the head %s", s.Spec.BaseRevision, r2.ID)
	}
	body := `{"image":"base","args":["true"],"cpu":1,"memory_bytes":1073741824,"workspace":"ws-b","base_revision":"` + r1.ID + `"}`
	if status, _, b := f.do("gateway/gw", "POST", "/v1/steps", body, nil, nil); status != 400 || !strings.Contains(string(b), r1.ID) {
		t.Errorf("a base of another workspace = %d %s, want 400 naming it", status, b)
	}

	// The assignment carries working URLs for the manifest and each blob.
	step := f.run("s1")
	a := step.Spec.WorkspaceAccess
	if a == nil || a.Revision != r2.ID || a.Manifest == "" || len(a.URLs) != 3 || !a.Expires.After(time.Now()) {
		t.Fatalf("assignment's workspace access = %+v, want the manifest and 2 blobs of %s", a, r2.ID)
	}
	for d, u := range a.URLs {
		status, b := f.fetch("GET", u, nil)
		if status != 200 || digestOf(b) != d {
			t.Errorf("GET %s = %d, digest %s; want 200 and the blob", u, status, digestOf(b))
		}
	}
	if st := f.step("s1"); st.Spec.WorkspaceAccess != nil {
		t.Errorf("the state's record holds the assignment's URLs")
	}

	// Another node may not ask for the step's uploads.
	up := `{"step":"s1","node":"n2","attempt":1,"blobs":[]}`
	if status, _, b := f.do("agent/n2", "POST", "/v1/agent/uploads", up, nil, nil); status != 403 {
		t.Errorf("uploads for a step of another node = %d %s, want 403", status, b)
	}
	if status, _, b := f.do("agent/n2", "POST", "/v1/agent/uploads", strings.Replace(up, "n2", "n1", 1), nil, nil); status != 403 {
		t.Errorf("uploads in another node's name = %d %s, want 403", status, b)
	}

	// The exit commits the result: a revision by the step.
	base := f.manifestOf(r2.ID)
	if status, b := f.finish(step, base, map[string]string{"chart.png": "png", "a.txt": ""}); status != 200 {
		t.Fatalf("exit = %d %s", status, b)
	}
	st := f.step("s1")
	r3, ok := f.m.srv.fsm.State().Revision(st.Revision)
	if st.State != cluster.StateExited || !ok {
		t.Fatalf("step after its exit: %s, revision %q", st.State, st.Revision)
	}
	if r3.Number != 3 || r3.Parent != r2.ID || r3.Author != (api.Author{Kind: api.AuthorStep, ID: "s1"}) ||
		!slices.Equal(r3.Changes.Added, []string{"chart.png"}) || !slices.Equal(r3.Changes.Removed, []string{"a.txt"}) {
		t.Errorf("the step's revision = %+v", r3)
	}
	if status, content := f.file("ws-a", "chart.png", ""); status != 200 || content != "png" {
		t.Errorf("GET chart.png = %d %q", status, content)
	}
	var got api.Step
	f.do("gateway/gw", "GET", "/v1/steps/s1", "", nil, &got)
	if got.Revision != r3.ID {
		t.Errorf("GET /v1/steps/s1 revision = %q, want %s", got.Revision, r3.ID)
	}

	// Neither the log nor a snapshot holds a URL.
	if snap := persist(t, f.m.srv.fsm); bytes.Contains(snap, []byte(`"urls"`)) || bytes.Contains(snap, []byte("sig=")) {
		t.Errorf("a snapshot holds presigned URLs")
	}
	filepath.WalkDir(f.m.srv.cfg.DataDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(`"urls"`)) || bytes.Contains(b, []byte("sig=")) {
			t.Errorf("%s holds presigned URLs", p)
		}
		return nil
	})

	// A repeated exit report makes no second revision.
	if status, b := f.exitReport(step, r3.Manifest); status/100 == 5 {
		t.Errorf("repeated exit = %d %s", status, b)
	}
	if revs, _, _ := f.m.srv.fsm.State().RevisionsPage("ws-a", 0, 10); len(revs) != 3 {
		t.Errorf("after a repeated exit: %d revisions, want 3", len(revs))
	}
}

// TestWorkspaceStepAuthor: a file tool's write is authored by its run's
// step (no step of the scheduler's); an empty one is refused.
func TestWorkspaceStepAuthor(t *testing.T) {
	f := newWSFixture(t)
	var rt api.Revision
	if status, _, b := f.do("gateway/gw", "PUT", "/v1/workspaces/ws-a/files/tool.txt", "t\n", http.Header{AuthorHeader: {"step:s-tool-0"}}, &rt); status != 201 {
		t.Fatalf("gateway PUT as a step = %d %s", status, b)
	}
	if rt.Author != (api.Author{Kind: api.AuthorStep, ID: "s-tool-0"}) || rt.Step != "" {
		t.Errorf("a tool's revision = %+v, want authored by step s-tool-0, no scheduler step", rt)
	}
	if status, _, b := f.do("gateway/gw", "PUT", "/v1/workspaces/ws-a/files/tool.txt", "u\n", http.Header{AuthorHeader: {"step:"}}, nil); status != 400 {
		t.Errorf("gateway PUT as step with no id = %d %s, want 400", status, b)
	}
}

func TestWorkspaceConflicts(t *testing.T) {
	f := newWSFixture(t)
	r1 := f.put("ws-a", "a.txt", "one\n", nil)
	f.submit("s1", "ws-a", "")
	f.submit("s2", "ws-a", "")
	s1, s2 := f.run("s1"), f.run("s2")
	base := f.manifestOf(r1.ID)
	if status, b := f.finish(s1, base, map[string]string{"a.txt": "first\n"}); status != 200 {
		t.Fatalf("exit s1 = %d %s", status, b)
	}
	if status, b := f.finish(s2, base, map[string]string{"a.txt": "second\n"}); status != 200 {
		t.Fatalf("exit s2 = %d %s", status, b)
	}
	won, lost := f.step("s1"), f.step("s2")
	if won.State != cluster.StateExited || lost.State != cluster.StateFailed || lost.Cause != api.CauseWorkspaceConflict {
		t.Fatalf("steps: s1 %s, s2 %s (%s); want s1 exited, s2 failed with cause %s", won.State, lost.State, lost.Cause, api.CauseWorkspaceConflict)
	}
	want := fmt.Sprintf("workspace conflict: a.txt changed by %s since %s", won.Revision, r1.ID)
	if lost.Reason != want {
		t.Errorf("reason = %q, want %q", lost.Reason, want)
	}
	d, _ := f.m.srv.fsm.State().Revision(lost.Revision)
	if !d.Detached || d.Number != 0 || !slices.Equal(d.Conflict, []string{"a.txt"}) {
		t.Errorf("the loser's revision = %+v, want detached with conflict a.txt", d)
	}
	for rev, want := range map[string]string{won.Revision: "first\n", lost.Revision: "second\n", r1.ID: "one\n"} {
		if status, content := f.file("ws-a", "a.txt", rev); status != 200 || content != want {
			t.Errorf("a.txt of %s = %d %q, want %q", rev, status, content, want)
		}
	}

	// Disjoint paths from one parent: both commit, the second rebased.
	head := won.Revision
	f.submit("s3", "ws-a", "")
	f.submit("s4", "ws-a", "")
	s3, s4 := f.run("s3"), f.run("s4")
	hm := f.manifestOf(head)
	f.finish(s3, hm, map[string]string{"x.txt": "x"})
	f.finish(s4, hm, map[string]string{"y.txt": "y"})
	r3, r4 := f.step("s3").Revision, f.step("s4").Revision
	if f.step("s4").State != cluster.StateExited {
		t.Fatalf("s4 is %s (%s), want exited", f.step("s4").State, f.step("s4").Reason)
	}
	rev4, _ := f.m.srv.fsm.State().Revision(r4)
	if rev4.Parent != r3 || !slices.Equal(rev4.Changes.Added, []string{"y.txt"}) || rev4.Files != 3 {
		t.Errorf("rebased revision = %+v, want parent %s, y.txt added, 3 files", rev4, r3)
	}
	for _, p := range []string{"a.txt", "x.txt", "y.txt"} {
		if status, _ := f.file("ws-a", p, r4); status != 200 {
			t.Errorf("%s of the rebased revision = %d, want 200", p, status)
		}
	}

	// Writes through the API take the same path: a stale If-Match on
	// another path is rebased, on the same path refused and kept.
	rX := f.put("ws-a", "z.txt", "z", http.Header{"If-Match": {head}})
	if rX.Parent != r4 {
		t.Errorf("a write from an older revision: parent %s, want the head %s", rX.Parent, r4)
	}
	status, h, b := f.do("operator/ops", "PUT", "/v1/workspaces/ws-a/files/x.txt", "mine", http.Header{"If-Match": {head}}, nil)
	if status != 409 || !strings.Contains(string(b), "x.txt") || h.Get(DetachedHeader) == "" || !strings.Contains(string(b), h.Get(DetachedHeader)) {
		t.Errorf("a conflicting write = %d %s (detached %q), want 409 naming x.txt and the detached revision", status, b, h.Get(DetachedHeader))
	}
	var refused api.Error
	if err := json.Unmarshal(b, &refused); err != nil || refused.Detail.Revision == nil || refused.Detail.Revision.ID != h.Get(DetachedHeader) ||
		!refused.Detail.Revision.Detached || !slices.Equal(refused.Detail.Revision.Conflict, []string{"x.txt"}) {
		t.Errorf("a conflicting write's error document %s (%v), want the detached revision %s typed, its conflict [x.txt]", b, err, h.Get(DetachedHeader))
	}
	if status, content := f.file("ws-a", "x.txt", h.Get(DetachedHeader)); status != 200 || content != "mine" {
		t.Errorf("the refused write's x.txt = %d %q, want it kept", status, content)
	}
	if status, _, b := f.do("operator/ops", "PUT", "/v1/workspaces/ws-a/files/q.txt", "q", http.Header{"If-Match": {"rev-none"}}, nil); status != 412 {
		t.Errorf("If-Match of no revision = %d %s, want 412", status, b)
	}
}

func TestWorkspaceAPI(t *testing.T) {
	f := newWSFixture(t)
	r1 := f.put("ws-a", "notes/a.txt", "one\ntwo\nthree\n", nil)
	f.put("ws-a", "bin/run", "#!/bin/sh\n", http.Header{ModeHeader: {"755"}})
	r3 := f.put("ws-a", "notes/a.txt", "one\nTWO\nthree\n", nil)
	for _, tc := range []struct {
		name, method, path, body string
		header                   http.Header
		want                     int
	}{
		{"bad path", "PUT", "/v1/workspaces/ws-a/files/a%00b", "x", nil, 400},
		{"dot dot", "GET", "/v1/workspaces/ws-a/files/a/%2e%2e/b", "", nil, 400},
		{"bad workspace", "GET", "/v1/workspaces/nope/tree", "", nil, 400},
		{"unknown rev", "GET", "/v1/workspaces/ws-a/tree?rev=rev-none", "", nil, 404},
		{"bad mode", "PUT", "/v1/workspaces/ws-a/files/m", "x", http.Header{ModeHeader: {"777"}}, 400},
		{"file below a file", "PUT", "/v1/workspaces/ws-a/files/bin/run/x", "x", nil, 400},
		{"a directory as a file", "PUT", "/v1/workspaces/ws-a/files/notes", "x", nil, 400},
		{"no such file", "DELETE", "/v1/workspaces/ws-a/files/none", "", nil, 404},
		{"an operator naming an author", "PUT", "/v1/workspaces/ws-a/files/o", "x", http.Header{AuthorHeader: {"account:a"}}, 403},
		{"unknown restore", "POST", "/v1/workspaces/ws-a/restore", `{"rev":"rev-none"}`, nil, 404},
	} {
		if status, _, b := f.do("operator/ops", tc.method, tc.path, tc.body, tc.header, nil); status != tc.want {
			t.Errorf("%s: %s %s = %d %s, want %d", tc.name, tc.method, tc.path, status, b, tc.want)
		}
	}

	var tree []api.TreeEntry
	f.do("gateway/gw", "GET", "/v1/workspaces/ws-a/tree?path=bin", "", nil, &tree)
	if len(tree) != 1 || tree[0].Path != "bin/run" || tree[0].Mode != 0o755 {
		t.Errorf("tree of bin = %+v", tree)
	}
	// Range and ETag.
	status, h, b := f.do("gateway/gw", "GET", "/v1/workspaces/ws-a/files/notes/a.txt", "", http.Header{"Range": {"bytes=4-6"}}, nil)
	if status != 206 || string(b) != "TWO" || h.Get("ETag") != `"`+digestOf([]byte("one\nTWO\nthree\n"))+`"` {
		t.Errorf("ranged GET = %d %q ETag %s", status, b, h.Get("ETag"))
	}

	var d api.WorkspaceDiff
	f.do("gateway/gw", "GET", "/v1/workspaces/ws-a/diff?from="+r1.ID+"&to="+r3.ID, "", nil, &d)
	if len(d.Text) != 2 || !strings.Contains(d.Text[1].Diff, "-two\n+TWO\n") {
		t.Errorf("diff = %+v, want bin/run added and notes/a.txt's line changed", d)
		for _, x := range d.Text {
			t.Logf("%s:\n%s", x.Path, x.Diff)
		}
	}

	var restored api.Revision
	if status, _, b := f.do("operator/ops", "POST", "/v1/workspaces/ws-a/restore", `{"rev":"`+r1.ID+`"}`, nil, &restored); status != 201 {
		t.Fatalf("restore = %d %s", status, b)
	}
	if restored.Manifest != f.manifestDigest(r1.ID) || restored.Number != 4 {
		t.Errorf("restored revision = %+v, want number 4 with %s's tree", restored, r1.ID)
	}

	// The archive holds the tree.
	status, _, b = f.do("gateway/gw", "GET", "/v1/workspaces/ws-a/archive?rev="+r3.ID, "", nil, nil)
	if status != 200 {
		t.Fatalf("archive = %d", status)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	if !slices.Equal(names, []string{"bin/run", "notes/a.txt"}) {
		t.Errorf("archive holds %v", names)
	}

	// The uploads route: URLs for the missing blob, then the commit.
	content := "uploaded"
	up := fmt.Sprintf(`{"files":[{"path":"u.txt","sha256":%q,"size":%d}]}`, digestOf([]byte(content)), len(content))
	var ur api.UploadResponse
	f.do("gateway/gw", "POST", "/v1/workspaces/ws-a/uploads", up, nil, &ur)
	if len(ur.URLs) != 1 {
		t.Fatalf("uploads = %+v, want one URL", ur)
	}
	for _, u := range ur.URLs {
		if status, b := f.fetch("PUT", u, []byte(content)); status/100 != 2 {
			t.Fatalf("PUT %s = %d %s", u, status, b)
		}
	}
	commit := strings.Replace(up, `]}`, `],"commit":true,"message":"bulk"}`, 1)
	if status, _, b := f.do("gateway/gw", "POST", "/v1/workspaces/ws-a/uploads", commit, nil, &ur); status != 201 || ur.Revision == nil || ur.Revision.Message != "bulk" {
		t.Fatalf("uploads commit = %d %s", status, b)
	}

	// Pagination, newest first.
	var got []int64
	path := "/v1/workspaces/ws-a/revisions?limit=2"
	for path != "" {
		var revs []api.Revision
		_, h, _ := f.do("gateway/gw", "GET", path, "", nil, &revs)
		for _, r := range revs {
			got = append(got, r.Number)
		}
		path = ""
		if c := h.Get(NextCursorHeader); c != "" {
			path = "/v1/workspaces/ws-a/revisions?limit=2&cursor=" + c
		}
	}
	if !slices.Equal(got, []int64{5, 4, 3, 2, 1}) {
		t.Errorf("revisions by pages = %v, want 5 4 3 2 1", got)
	}
}

func (f *wsFixture) manifestDigest(rev string) string {
	r, _ := f.m.srv.fsm.State().Revision(rev)
	return r.Manifest
}

// upload stores blobs through the uploads route of step's current
// attempt and returns the manifest's digest.
func (f *wsFixture) upload(step cluster.Step, m *manifest.Manifest, blobs map[string][]byte) string {
	f.t.Helper()
	enc, digest := manifest.Encode(m)
	blobs[digest] = enc
	req := cluster.UploadsRequest{Step: step.ID, Node: "n1", Attempt: 1}
	for d, b := range blobs {
		req.Blobs = append(req.Blobs, cluster.BlobSize{SHA256: d, Size: int64(len(b))})
	}
	body, _ := json.Marshal(req)
	var up cluster.UploadsResponse
	if status, _, b := f.do("agent/n1", "POST", "/v1/agent/uploads", string(body), nil, &up); status != http.StatusOK {
		f.t.Fatalf("uploads of %s = %d %s", step.ID, status, b)
	}
	for d, u := range up.URLs {
		if status, b := f.fetch("PUT", u, blobs[d]); status/100 != 2 {
			f.t.Fatalf("PUT blob %s = %d %s", d, status, b)
		}
	}
	return digest
}

// TestWorkspaceResultRefused: a result that does not validate (a symlink
// out of the tree, a blob never uploaded, a file past the step's
// workspace limit) is no revision; the exit is recorded with a warning.
func TestWorkspaceResultRefused(t *testing.T) {
	f := newWSFixture(t)
	f.put("ws-a", "a.txt", "one\n", nil)
	absent := digestOf([]byte("never uploaded"))
	for i, tc := range []struct {
		name  string
		entry manifest.Entry
	}{
		{"a symlink out of the tree", manifest.Entry{Path: "l", Type: manifest.Symlink, Mode: 0o777, Target: "../../etc/passwd"}},
		{"a blob not in the store", manifest.Entry{Path: "b", Type: manifest.File, Mode: 0o644, Size: 14, SHA256: absent}},
		{"a file past the workspace limit", manifest.Entry{Path: "big", Type: manifest.File, Mode: 0o644, Size: 2 << 30, SHA256: absent}},
	} {
		id := fmt.Sprintf("s%d", i)
		f.submit(id, "ws-a", "")
		step := f.run(id)
		digest := f.upload(step, &manifest.Manifest{Entries: []manifest.Entry{tc.entry}}, map[string][]byte{})
		if status, b := f.exitReport(step, digest); status != 200 {
			t.Fatalf("%s: exit = %d %s", tc.name, status, b)
		}
		st := f.step(id)
		var warned bool
		for _, e := range st.Events {
			warned = warned || e.Kind == api.EventWarning && e.Warning != nil && e.Warning.Cause == api.WarningWorkspaceNotSaved
		}
		if st.State != cluster.StateExited || st.Revision != "" || !warned {
			t.Errorf("%s: step %s, revision %q, warned %v; want exited without a revision, with a %s warning",
				tc.name, st.State, st.Revision, warned, api.WarningWorkspaceNotSaved)
		}
	}
	if w, _ := f.m.srv.fsm.State().Workspace("ws-a"); w.Number != 1 {
		t.Errorf("workspace after refused results: %d revisions, want 1", w.Number)
	}
}

// TestWorkspaceSymlinkAndLibrary: a symlink a step left is read as the
// link itself; a library reaches the assignment read-only, at its head.
func TestWorkspaceSymlinkAndLibrary(t *testing.T) {
	f := newWSFixture(t)
	lib := f.put("ws-lib", "ref.csv", "a,b\n", nil)
	body := `{"id":"s1","image":"base","args":["true"],"cpu":1,"memory_bytes":1073741824,"workspace":"ws-a","library":"ws-lib","node":"n1"}`
	if status, _, b := f.do("gateway/gw", "POST", "/v1/steps", body, nil, nil); status != 201 {
		t.Fatalf("submit = %d %s", status, b)
	}
	step := f.run("s1")
	if a := step.Spec.LibraryAccess; a == nil || !a.ReadOnly || a.Revision != lib.ID || len(a.URLs) != 2 {
		t.Errorf("library access = %+v, want %s read-only with 2 URLs", a, lib.ID)
	}
	if a := step.Spec.WorkspaceAccess; a == nil || a.Revision != "" || a.Manifest != "" {
		t.Errorf("access of an empty workspace = %+v, want no revision and no manifest", a)
	}
	digest := f.upload(step, &manifest.Manifest{Entries: []manifest.Entry{
		{Path: "data/x", Type: manifest.File, Mode: 0o644, Size: 1, SHA256: digestOf([]byte("x"))},
		{Path: "link", Type: manifest.Symlink, Mode: 0o777, Target: "data/x"},
	}}, map[string][]byte{digestOf([]byte("x")): []byte("x")})
	if status, b := f.exitReport(step, digest); status != 200 {
		t.Fatalf("exit = %d %s", status, b)
	}
	status, h, b := f.do("gateway/gw", "GET", "/v1/workspaces/ws-a/files/link", "", nil, nil)
	var e api.TreeEntry
	if status != 200 || json.Unmarshal(b, &e) != nil || e.Type != "symlink" || e.Target != "data/x" || h.Get(SymlinkHeader) != "data/x" {
		t.Errorf("GET link = %d %s (%s %q), want the link itself", status, b, SymlinkHeader, h.Get(SymlinkHeader))
	}
}

// TestAssignmentWithoutURLs: a revision whose manifest the store lost is
// assigned without URLs (its node fails the step); the node's other
// steps are assigned as ever.
func TestAssignmentWithoutURLs(t *testing.T) {
	f := newWSFixture(t)
	r1 := f.put("ws-a", "a.txt", "one\n", nil)
	local, ok := f.m.srv.blobs.(*blob.Local)
	if !ok {
		t.Fatalf("the member's store is %T, want its local store", f.m.srv.blobs)
	}
	d := f.manifestDigest(r1.ID)
	if err := os.Remove(filepath.Join(local.Dir(), d[:2], d)); err != nil {
		t.Fatal(err)
	}
	f.m.srv.manifests.remove(d)
	f.submit("s1", "ws-a", "")
	f.submit("s2", "", "")
	step := f.run("s1")
	if a := step.Spec.WorkspaceAccess; a == nil || a.Manifest != d || len(a.URLs) != 0 {
		t.Errorf("access of a lost manifest = %+v, want its digest and no URLs", a)
	}
	f.run("s2")
}

// TestWorkspaceThroughAFollower: a step's whole course through a member
// that does not lead (its writes and its exit forwarded to the leader),
// the members sharing one local store.
func TestWorkspaceThroughAFollower(t *testing.T) {
	f := newWSCluster(t, 2, "local://"+t.TempDir())
	for _, m := range f.c.members {
		if m != f.m {
			f.via = m
		}
	}
	r1 := f.put("ws-a", "a.txt", "one\n", nil)
	f.submit("s1", "ws-a", "")
	step := f.run("s1")
	for d, u := range step.Spec.WorkspaceAccess.URLs {
		if status, b := f.fetch("GET", u, nil); status != 200 || digestOf(b) != d {
			t.Errorf("GET %s through the follower = %d", u, status)
		}
	}
	if status, b := f.finish(step, f.manifestOf(r1.ID), map[string]string{"b.txt": "two"}); status != 200 {
		t.Fatalf("exit through the follower = %d %s", status, b)
	}
	if st := f.step("s1"); st.State != cluster.StateExited || st.Revision == "" {
		t.Fatalf("step after an exit through the follower: %s, revision %q", st.State, st.Revision)
	}
	if status, content := f.file("ws-a", "b.txt", ""); status != 200 || content != "two" {
		t.Errorf("b.txt through the follower = %d %q", status, content)
	}
}

// TestWorkspaceS3: a step's course with an S3 store (SeaweedFS on
// loopback): the node's URLs are S3's own presigned ones, and nothing of
// the store's credential is in its assignment.
func TestWorkspaceS3(t *testing.T) {
	s3cfg := blobtest.StartS3(t)
	store, err := blob.NewS3(t.Context(), s3cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := newWSClusterWith(t, 1, func(cfg *Config) { cfg.Blobs = store })
	// After the cluster's: cleanups run last first, and the cluster's
	// checks that no connection is left.
	t.Cleanup(func() { store.Close() })
	r1 := f.put("ws-a", "a.txt", "one\n", nil)
	f.submit("s1", "ws-a", "")
	step := f.run("s1")
	a, _ := json.Marshal(step)
	if bytes.Contains(a, []byte(s3cfg.SecretKey)) {
		t.Errorf("the assignment holds the store's secret key")
	}
	for d, u := range step.Spec.WorkspaceAccess.URLs {
		if !strings.Contains(u, s3cfg.Endpoint) {
			t.Errorf("URL %s is not the S3 server's", u)
		}
		if status, b := f.fetch("GET", u, nil); status != 200 || digestOf(b) != d {
			t.Errorf("GET %s = %d", u, status)
		}
	}
	if status, b := f.finish(step, f.manifestOf(r1.ID), map[string]string{"b.txt": "two"}); status != 200 {
		t.Fatalf("exit = %d %s", status, b)
	}
	if st := f.step("s1"); st.Revision == "" {
		t.Fatalf("step after its exit: %s without a revision (%+v)", st.State, st.Events)
	}
	if status, content := f.file("ws-a", "b.txt", ""); status != 200 || content != "two" {
		t.Errorf("b.txt = %d %q", status, content)
	}
}

// TestWorkspaceReadOnlyStep: a step submitted with workspace_read_only
// keeps it, is assigned its base read-only, gets no upload URLs, and a
// result its node reports anyway makes no revision.
func TestWorkspaceReadOnlyStep(t *testing.T) {
	f := newWSFixture(t)
	r1 := f.put("ws-a", "a.txt", "one\n", nil)
	body := `{"id":"s1","image":"base","args":["true"],"cpu":1,"memory_bytes":1073741824,"workspace":"ws-a","workspace_read_only":true,"node":"n1"}`
	var s api.Step
	if status, _, b := f.do("gateway/gw", "POST", "/v1/steps", body, nil, &s); status != http.StatusCreated {
		t.Fatalf("submit = %d %s", status, b)
	}
	if !s.Spec.WorkspaceReadOnly || s.Spec.BaseRevision != r1.ID {
		t.Errorf("submitted spec = %+v, want workspace_read_only from the head %s", s.Spec, r1.ID)
	}
	noWS := `{"image":"base","args":["true"],"cpu":1,"memory_bytes":1073741824,"workspace_read_only":true}`
	if status, _, b := f.do("gateway/gw", "POST", "/v1/steps", noWS, nil, nil); status != 400 || !strings.Contains(string(b), "workspace_read_only") {
		t.Errorf("workspace_read_only without a workspace = %d %s, want 400 naming the field", status, b)
	}

	step := f.run("s1")
	if a := step.Spec.WorkspaceAccess; a == nil || !a.ReadOnly || a.Revision != r1.ID || len(a.URLs) != 2 {
		t.Fatalf("assignment's workspace access = %+v, want %s read-only with 2 URLs", a, r1.ID)
	}
	if !step.Spec.WorkspaceReadOnly {
		t.Errorf("assignment's spec has workspace_read_only false")
	}

	// No upload URLs for a read-only step.
	up := `{"step":"s1","node":"n1","attempt":1,"blobs":[{"sha256":"` + digestOf([]byte("x")) + `","size":1}]}`
	if status, _, b := f.do("agent/n1", "POST", "/v1/agent/uploads", up, nil, nil); status != http.StatusConflict || !strings.Contains(string(b), "read-only") {
		t.Errorf("uploads for a read-only step = %d %s, want 409 saying read-only", status, b)
	}

	// A result reported anyway: the exit is recorded, no revision.
	m := &manifest.Manifest{Entries: []manifest.Entry{{Path: "b.txt", Type: manifest.File, Mode: 0o644, Size: 1, SHA256: digestOf([]byte("x"))}}}
	_, digest := manifest.Encode(m)
	if status, b := f.exitReport(step, digest); status != 200 {
		t.Fatalf("exit with a result = %d %s, want 200", status, b)
	}
	st := f.step("s1")
	if st.State != cluster.StateExited || st.Revision != "" {
		t.Errorf("read-only step after its exit: %s, revision %q; want exited without a revision", st.State, st.Revision)
	}
	if w, _ := f.m.srv.fsm.State().Workspace("ws-a"); w.Head != r1.ID || w.Number != 1 {
		t.Errorf("workspace after a read-only step = %+v, want head %s unchanged", w, r1.ID)
	}
}
