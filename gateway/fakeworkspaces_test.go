package gateway

import (
	"archive/tar"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/blob"
	"github.com/rodon-compute/rodon/internal/httpapi"
	"github.com/rodon-compute/rodon/internal/manifest"
	"github.com/rodon-compute/rodon/scheduler/client"
	"github.com/rodon-compute/rodon/scheduler/schedulertest"
)

// fakeWorkspaces is a FAKE of the scheduler's workspace API
// (docs/design/workspaces.md, "Scheduler workspace API") and of the local
// store's /v1/blobs/ route, served in front of the real scheduler of the
// tests (schedulertest's Use) until the scheduler has them: revisions in
// memory, no Raft, blobs in a real blob.Local whose signed URLs name the
// member. It is the contract as the gateway relies on it, no more: trees
// are checked with internal/manifest as the scheduler checks them. Remove
// it (newTestScheduler) once the scheduler serves these routes.
//
// It also stands in for what the scheduler's step records will carry
// (api.Step.Revision, Spec.BaseRevision and Spec.Library): it keeps
// what each submission asked and what SetStepRevision says a step made,
// and adds them to the answers of GET /v1/steps/{id} where the scheduler
// left them empty.
type fakeWorkspaces struct {
	mu    sync.Mutex
	revs  map[string][]api.Revision // by workspace, oldest first
	trees map[string]*manifest.Manifest
	store *blob.Local
	n     int
	// steps holds, by step id, what it was submitted with and made.
	steps map[string]*fakeStep
}

type fakeStep struct{ base, library, revision string }

func installFakeWorkspaces(t *testing.T, c *schedulertest.Cluster) *fakeWorkspaces {
	store, err := blob.NewLocal(t.TempDir(), bytes.Repeat([]byte("k"), 32), strings.Split(c.URLs(), ",")[0])
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeWorkspaces{revs: map[string][]api.Revision{}, trees: map[string]*manifest.Manifest{}, store: store,
		steps: map[string]*fakeStep{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/workspaces/{id}/revisions", f.list)
	mux.HandleFunc("GET /v1/workspaces/{id}/revisions/{rev}", f.revision)
	mux.HandleFunc("GET /v1/workspaces/{id}/tree", f.tree)
	mux.HandleFunc("GET /v1/workspaces/{id}/files/{path...}", f.get)
	mux.HandleFunc("PUT /v1/workspaces/{id}/files/{path...}", f.put)
	mux.HandleFunc("DELETE /v1/workspaces/{id}/files/{path...}", f.del)
	mux.HandleFunc("POST /v1/workspaces/{id}/uploads", f.uploads)
	mux.HandleFunc("GET /v1/workspaces/{id}/archive", f.archive)
	mux.HandleFunc("GET /v1/workspaces/{id}/diff", f.diff)
	mux.HandleFunc("POST /v1/workspaces/{id}/restore", f.restore)
	mux.Handle("/v1/blobs/", store.Handler())
	c.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p := r.URL.Path
			switch {
			case strings.HasPrefix(p, "/v1/workspaces/") || strings.HasPrefix(p, "/v1/blobs/"):
				mux.ServeHTTP(w, r)
			case r.Method == http.MethodPost && p == "/v1/steps":
				f.submitted(r)
				next.ServeHTTP(w, r)
			case r.Method == http.MethodGet && strings.HasPrefix(p, "/v1/steps/") && strings.Count(p, "/") == 3:
				f.patchStep(w, r, next)
			default:
				next.ServeHTTP(w, r)
			}
		})
	})
	return f
}

// SetStepRevision says step id made revision rev.
func (f *fakeWorkspaces) SetStepRevision(id, rev string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.steps[id] == nil {
		f.steps[id] = &fakeStep{}
	}
	f.steps[id].revision = rev
}

// submitted keeps what a step submission asked of workspaces.
func (f *fakeWorkspaces) submitted(r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b))
	var req api.StepRequest
	if json.Unmarshal(b, &req) != nil || req.ID == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.steps[req.ID] == nil {
		f.steps[req.ID] = &fakeStep{base: req.BaseRevision, library: req.Library}
	}
}

// patchStep serves a step read, adding what the scheduler left out.
func (f *fakeWorkspaces) patchStep(w http.ResponseWriter, r *http.Request, next http.Handler) {
	rec := httptest.NewRecorder()
	next.ServeHTTP(rec, r)
	var st api.Step
	if rec.Code == http.StatusOK && json.Unmarshal(rec.Body.Bytes(), &st) == nil {
		f.mu.Lock()
		if fs := f.steps[st.ID]; fs != nil {
			st.Revision = cmp.Or(st.Revision, fs.revision)
			st.Spec.BaseRevision = cmp.Or(st.Spec.BaseRevision, fs.base)
			st.Spec.Library = cmp.Or(st.Spec.Library, fs.library)
		}
		f.mu.Unlock()
		b, _ := json.Marshal(st)
		rec.Body = bytes.NewBuffer(b)
		rec.Header().Del("Content-Length")
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

func fail(w http.ResponseWriter, status int, code, format string, args ...any) {
	httpapi.WriteError(w, &httpapi.Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)})
}

// at returns the tree of revision rev (the head when empty) of ws.
func (f *fakeWorkspaces) at(ws, rev string) (*manifest.Manifest, bool) {
	revs := f.revs[ws]
	if rev == "" {
		if len(revs) == 0 {
			return &manifest.Manifest{}, true
		}
		rev = revs[len(revs)-1].ID
	}
	m, ok := f.trees[rev]
	return m, ok
}

// Commit makes a revision of ws with tree m (checked as the scheduler
// checks a step's result) from the head, authored by who.
func (f *fakeWorkspaces) Commit(ws string, who api.Author, m *manifest.Manifest, message string) (api.Revision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.commit(ws, who, m, message)
}

func (f *fakeWorkspaces) commit(ws string, who api.Author, m *manifest.Manifest, message string) (api.Revision, error) {
	m.Sort()
	if err := m.Validate(manifest.DefaultLimits); err != nil {
		return api.Revision{}, err
	}
	parent, _ := f.at(ws, "")
	f.n++
	rev := api.Revision{ID: fmt.Sprintf("rev-fake%d", f.n), Workspace: ws, Number: int64(len(f.revs[ws]) + 1), Author: who,
		CreatedAt: time.Now().UTC(), Message: message, Changes: manifest.Diff(parent, m), Files: int64(len(m.Entries)), Bytes: m.TotalBytes()}
	_, rev.Manifest = manifest.Encode(m)
	if n := len(f.revs[ws]); n > 0 {
		rev.Parent = f.revs[ws][n-1].ID
	}
	f.revs[ws] = append(f.revs[ws], rev)
	f.trees[rev.ID] = m
	return rev, nil
}

// Blob stores b and returns its digest.
func (f *fakeWorkspaces) Blob(b []byte) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := manifest.Digest(b)
	if err := f.store.Put(context.Background(), d, bytes.NewReader(b), int64(len(b))); err != nil {
		panic(err)
	}
	return d
}

// read returns blob d's bytes (nil when absent).
func (f *fakeWorkspaces) read(d string) []byte {
	rc, _, err := f.store.Open(context.Background(), d)
	if err != nil {
		return nil
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return b
}

func author(r *http.Request) api.Author {
	kind, id, _ := strings.Cut(r.Header.Get(client.AuthorHeader), ":")
	return api.Author{Kind: kind, ID: id}
}

// write makes a revision of edit applied to the tree If-Match names (the
// head when none), refusing a path changed since.
func (f *fakeWorkspaces) write(w http.ResponseWriter, r *http.Request, status int, paths []string, edit func(m *manifest.Manifest)) {
	if rev, ok := f.change(w, r, paths, edit); ok {
		httpapi.WriteJSON(w, status, rev)
	}
}

func (f *fakeWorkspaces) change(w http.ResponseWriter, r *http.Request, paths []string, edit func(m *manifest.Manifest)) (api.Revision, bool) {
	ws := r.PathValue("id")
	base, ok := f.at(ws, r.Header.Get("If-Match"))
	if !ok {
		fail(w, http.StatusPreconditionFailed, api.CodeConflict, "If-Match %s is no revision of %s", r.Header.Get("If-Match"), ws)
		return api.Revision{}, false
	}
	if head, _ := f.at(ws, ""); head != base {
		c := manifest.Diff(base, head)
		changed := slices.Concat(c.Added, c.Modified, c.Removed)
		for _, p := range paths {
			if slices.Contains(changed, p) {
				fail(w, http.StatusConflict, api.CodeConflict, "workspace conflict: %s changed since %s", p, r.Header.Get("If-Match"))
				return api.Revision{}, false
			}
		}
	}
	m := &manifest.Manifest{Entries: append([]manifest.Entry(nil), base.Entries...)}
	edit(m)
	rev, err := f.commit(ws, author(r), m, r.Header.Get(client.MessageHeader))
	if err != nil {
		fail(w, http.StatusBadRequest, api.CodeBadRequest, "%v", err)
		return rev, false
	}
	return rev, true
}

func under(e manifest.Entry, p string) bool { return e.Path == p || strings.HasPrefix(e.Path, p+"/") }

func without(m *manifest.Manifest, p string) {
	m.Entries = slices.DeleteFunc(m.Entries, func(e manifest.Entry) bool { return under(e, p) })
}

func (f *fakeWorkspaces) list(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	revs := f.revs[r.PathValue("id")]
	out := []api.Revision{}
	for i := len(revs) - 1; i >= 0; i-- {
		out = append(out, revs[i])
	}
	httpapi.WriteJSON(w, 200, out)
}

func (f *fakeWorkspaces) revision(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, rev := range f.revs[r.PathValue("id")] {
		if rev.ID == r.PathValue("rev") {
			httpapi.WriteJSON(w, 200, rev)
			return
		}
	}
	fail(w, 404, api.CodeNotFound, "no revision %s", r.PathValue("rev"))
}

func (f *fakeWorkspaces) tree(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.at(r.PathValue("id"), r.URL.Query().Get("rev"))
	if !ok {
		fail(w, 404, api.CodeNotFound, "no revision %s", r.URL.Query().Get("rev"))
		return
	}
	p := r.URL.Query().Get("path")
	out := []api.TreeEntry{}
	for _, e := range m.Entries {
		if p == "" || under(e, p) {
			out = append(out, api.TreeEntry{Path: e.Path, Type: string(e.Type), Size: e.Size, SHA256: e.SHA256, Mode: e.Mode, Target: e.Target})
		}
	}
	httpapi.WriteJSON(w, 200, out)
}

func (f *fakeWorkspaces) get(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	m, ok := f.at(r.PathValue("id"), r.URL.Query().Get("rev"))
	var e manifest.Entry
	if ok {
		e, ok = m.Lookup(r.PathValue("path"))
	}
	f.mu.Unlock()
	b := f.read(e.SHA256)
	switch {
	case !ok || e.Type == manifest.Dir:
		fail(w, 404, api.CodeNotFound, "no file %s", r.PathValue("path"))
	case e.Type == manifest.Symlink:
		w.Header().Set("X-Rodon-Type", "symlink")
		io.WriteString(w, e.Target)
	default:
		w.Header().Set("ETag", `"`+e.SHA256+`"`)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
	}
}

func (f *fakeWorkspaces) put(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		fail(w, 400, api.CodeBadRequest, "read body: %v", err)
		return
	}
	p := r.PathValue("path")
	if err := manifest.CheckPath(p, manifest.DefaultLimits); err != nil {
		fail(w, 400, api.CodeBadRequest, "%v", err)
		return
	}
	d := f.Blob(b)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.write(w, r, http.StatusCreated, []string{p}, func(m *manifest.Manifest) {
		without(m, p)
		m.Entries = append(m.Entries, manifest.Entry{Path: p, Type: manifest.File, Mode: 0o644, Size: int64(len(b)), SHA256: d})
	})
}

func (f *fakeWorkspaces) del(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := r.PathValue("path")
	if m, _ := f.at(r.PathValue("id"), ""); !slices.ContainsFunc(m.Entries, func(e manifest.Entry) bool { return under(e, p) }) {
		fail(w, 404, api.CodeNotFound, "no file %s", p)
		return
	}
	f.write(w, r, http.StatusOK, []string{p}, func(m *manifest.Manifest) { without(m, p) })
}

func (f *fakeWorkspaces) uploads(w http.ResponseWriter, r *http.Request) {
	var req api.UploadRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, 400, api.CodeBadRequest, "%v", err)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := api.UploadResponse{URLs: map[string]string{}, Expires: time.Now().Add(time.Hour).UTC()}
	for _, u := range req.Files {
		if _, err := f.store.Stat(r.Context(), u.SHA256); err != nil {
			out.URLs[u.SHA256], _ = f.store.PresignPut(r.Context(), u.SHA256, u.Size, time.Hour)
		}
	}
	if !req.Commit {
		httpapi.WriteJSON(w, 200, out)
		return
	}
	if len(out.URLs) > 0 {
		fail(w, 400, api.CodeBadRequest, "%d blobs are not uploaded yet", len(out.URLs))
		return
	}
	var paths []string
	for _, u := range req.Files {
		paths = append(paths, u.Path)
	}
	r.Header.Set("If-Match", req.Parent)
	r.Header.Set(client.MessageHeader, req.Message)
	rev, ok := f.change(w, r, paths, func(m *manifest.Manifest) {
		for _, u := range req.Files {
			without(m, u.Path)
			m.Entries = append(m.Entries, manifest.Entry{Path: u.Path, Type: manifest.File, Mode: 0o644, Size: u.Size, SHA256: u.SHA256})
		}
	})
	if ok {
		out.Revision = &rev
		httpapi.WriteJSON(w, http.StatusCreated, out)
	}
}

func (f *fakeWorkspaces) archive(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.at(r.PathValue("id"), r.URL.Query().Get("rev"))
	if !ok {
		fail(w, 404, api.CodeNotFound, "no revision")
		return
	}
	w.Header().Set("Content-Type", "application/gzip")
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	for _, e := range m.Entries {
		if e.Type == manifest.File {
			tw.WriteHeader(&tar.Header{Name: e.Path, Mode: int64(e.Mode), Size: e.Size, Typeflag: tar.TypeReg})
			tw.Write(f.read(e.SHA256))
		}
	}
	tw.Close()
	gz.Close()
}

func (f *fakeWorkspaces) diff(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := r.URL.Query()
	a, ok1 := f.at(r.PathValue("id"), q.Get("from"))
	b, ok2 := f.at(r.PathValue("id"), q.Get("to"))
	if q.Get("from") == "" {
		a, ok1 = &manifest.Manifest{}, true
	}
	if !ok1 || !ok2 {
		fail(w, 404, api.CodeNotFound, "no such revision")
		return
	}
	httpapi.WriteJSON(w, 200, api.WorkspaceDiff{From: q.Get("from"), To: q.Get("to"), Changes: manifest.Diff(a, b)})
}

func (f *fakeWorkspaces) restore(w http.ResponseWriter, r *http.Request) {
	var req api.RestoreRequest
	json.NewDecoder(r.Body).Decode(&req)
	f.mu.Lock()
	defer f.mu.Unlock()
	old, ok := f.at(r.PathValue("id"), req.Rev)
	if !ok || req.Rev == "" {
		fail(w, 404, api.CodeNotFound, "no revision %s", req.Rev)
		return
	}
	f.write(w, r, http.StatusCreated, nil, func(m *manifest.Manifest) { m.Entries = append([]manifest.Entry(nil), old.Entries...) })
}
