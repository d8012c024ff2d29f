package scheduler

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/manifest"
)

// The scheduler's workspace API (docs/design/workspaces.md, 1): the
// routes and shapes of the gateway's (SPEC.md, "Workspaces and
// revisions"), for the gateway and operators. Reads are served by any
// member from its state and the blob store; writes by the leader, through
// the commit path of the steps' results (planCommit: compare-and-set on
// the head, rebase, a conflict kept as a detached revision and answered
// 409).

// Headers of the workspace API.
const (
	// AuthorHeader names a write's author, KIND:ID (account or key);
	// only the gateway sends it.
	AuthorHeader = "X-Rodon-Author"
	// MessageHeader is a write's message, ModeHeader a written file's
	// mode (755 or 644, octal).
	MessageHeader = "X-Rodon-Message"
	ModeHeader    = "X-Rodon-Mode"
	// SymlinkHeader names the target of a symlink read as a file: the
	// link itself is the answer, never what it points at.
	SymlinkHeader = "X-Rodon-Symlink"
	// DetachedHeader names the detached revision a conflicting write's
	// tree is kept as.
	DetachedHeader = "X-Rodon-Detached-Revision"
)

// cursorRevisions is the revisions list's cursor kind.
const cursorRevisions = 'v'

func (s *Server) workspaceRoutes(mux *router) {
	mux.HandleFunc("GET /v1/workspaces/{id}/revisions", s.read(s.handleRevisions))
	mux.HandleFunc("GET /v1/workspaces/{id}/revisions/{rev}", s.read(s.handleRevision))
	mux.HandleFunc("GET /v1/workspaces/{id}/tree", s.read(s.handleTree))
	mux.HandleFunc("GET /v1/workspaces/{id}/files/{path...}", s.read(s.handleGetFile))
	mux.HandleFunc("PUT /v1/workspaces/{id}/files/{path...}", s.write(s.handlePutFile))
	mux.HandleFunc("DELETE /v1/workspaces/{id}/files/{path...}", s.write(s.handleDeleteFile))
	mux.HandleFunc("POST /v1/workspaces/{id}/uploads", s.write(s.handleWorkspaceUploads))
	mux.HandleFunc("GET /v1/workspaces/{id}/archive", s.read(s.handleArchive))
	mux.HandleFunc("GET /v1/workspaces/{id}/diff", s.read(s.handleDiff))
	mux.HandleFunc("POST /v1/workspaces/{id}/restore", s.write(s.handleRestoreRevision))
	if h, ok := s.blobs.(interface{ Handler() http.Handler }); ok {
		bh := h.Handler()
		mux.Handle("GET /v1/blobs/{digest}", bh)
		mux.Handle("PUT /v1/blobs/{digest}", bh)
	}
}

// workspaceOf returns the path's workspace id, checked.
func workspaceOf(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if err := cluster.ValidateWorkspaceID(id); err != nil {
		return id, badRequest("%v", err)
	}
	return id, nil
}

// revOf returns the revision ?rev= names (the head when absent) with its
// tree.
func (s *Server) revOf(r *http.Request, ws, param string) (cluster.Revision, *manifest.Manifest, error) {
	rev := r.URL.Query().Get(param)
	if rev == "" {
		w, _ := s.fsm.State().Workspace(ws)
		rev = w.Head
	}
	return s.revisionManifest(r.Context(), ws, rev)
}

func (s *Server) handleRevisions(w http.ResponseWriter, r *http.Request) error {
	ws, err := workspaceOf(r)
	if err != nil {
		return err
	}
	p, err := pageOf(r, cursorRevisions)
	if err != nil {
		return err
	}
	var before int64
	if p.key != "" {
		if before, err = strconv.ParseInt(p.key, 10, 64); err != nil || before < 1 {
			return badRequest("query parameter cursor: not a cursor of this list: pass the %s header of the previous page", NextCursorHeader)
		}
	}
	st := s.fsm.State()
	idx := st.Index()
	revs, next, more := st.RevisionsPage(ws, before, p.limit)
	setNext(w, cursorRevisions, strconv.FormatInt(next, 10), more)
	writeIndexed(w, http.StatusOK, idx, revs)
	return nil
}

func (s *Server) handleRevision(w http.ResponseWriter, r *http.Request) error {
	ws, err := workspaceOf(r)
	if err != nil {
		return err
	}
	st := s.fsm.State()
	rev, ok := st.Revision(r.PathValue("rev"))
	if !ok || rev.Workspace != ws {
		return notFound("revision %s: not a revision of workspace %s", r.PathValue("rev"), ws)
	}
	writeIndexed(w, http.StatusOK, st.Index(), rev)
	return nil
}

func treeEntry(e manifest.Entry) api.TreeEntry {
	return api.TreeEntry{Path: e.Path, Type: string(e.Type), Size: e.Size, SHA256: e.SHA256, Mode: e.Mode, Target: e.Target}
}

func (s *Server) handleTree(w http.ResponseWriter, r *http.Request) error {
	ws, err := workspaceOf(r)
	if err != nil {
		return err
	}
	prefix := r.URL.Query().Get("path")
	if prefix != "" {
		if prefix, err = manifest.Clean(strings.TrimSuffix(prefix, "/"), manifest.DefaultLimits); err != nil {
			return badRequest("query parameter path: %v", err)
		}
	}
	_, m, err := s.revOf(r, ws, "rev")
	if err != nil {
		return err
	}
	out := []api.TreeEntry{}
	for _, e := range m.Entries {
		if prefix == "" || e.Path == prefix || strings.HasPrefix(e.Path, prefix+"/") {
			out = append(out, treeEntry(e))
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// filePath returns the path's file path, cleaned (manifest.Clean).
func filePath(r *http.Request) (string, error) {
	p, err := manifest.Clean(r.PathValue("path"), manifest.DefaultLimits)
	if err != nil {
		return p, badRequest("%v", err)
	}
	return p, nil
}

func (s *Server) handleGetFile(w http.ResponseWriter, r *http.Request) error {
	ws, err := workspaceOf(r)
	if err != nil {
		return err
	}
	p, err := filePath(r)
	if err != nil {
		return err
	}
	rev, m, err := s.revOf(r, ws, "rev")
	if err != nil {
		return err
	}
	e, ok := m.Lookup(p)
	switch {
	case !ok:
		return notFound("workspace %s: no file %q in revision %q", ws, p, rev.ID)
	case e.Type == manifest.Symlink:
		// The link itself, never what it points at.
		w.Header().Set(SymlinkHeader, e.Target)
		writeJSON(w, http.StatusOK, treeEntry(e))
		return nil
	case e.Type == manifest.Dir:
		return badRequest("workspace %s: %q is a directory: read its tree (GET /v1/workspaces/%s/tree?path=)", ws, p, ws)
	}
	rc, _, err := s.blobs.Open(r.Context(), e.SHA256)
	if err != nil {
		return fmt.Errorf("workspace %s: file %q: %w", ws, p, err)
	}
	defer rc.Close()
	h := w.Header()
	h.Set("ETag", `"`+e.SHA256+`"`)
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Rodon-Revision", rev.ID)
	h.Set(ModeHeader, strconv.FormatUint(uint64(e.Mode), 8))
	http.ServeContent(w, r, "", time.Time{}, rc)
	return nil
}
