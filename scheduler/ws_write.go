package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/blob"
	"github.com/rodon-compute/rodon/internal/manifest"
	"github.com/rodon-compute/rodon/internal/pki"
)

// The writes of the workspace API, on the leader: each computes the tree
// it makes from its base (If-Match, or the head when the request began)
// and commits it through planCommit under the workspace's lock.

// authorOf returns the author of a write: the one the gateway names in
// AuthorHeader (without it, the gateway itself as the key gateway:NAME),
// or for an operator operator:NAME as a key. Without TLS the header is
// taken as it is, and its absence is an operator.
func authorOf(r *http.Request) (api.Author, error) {
	h := r.Header.Get(AuthorHeader)
	c, ok := callerOf(r.Context())
	switch {
	case ok && c.id.Role == pki.RoleOperator:
		if h != "" {
			return api.Author{}, refusal(c.id, "%s may not send %s: an operator's writes are its own", c.id, AuthorHeader)
		}
		return api.Author{Kind: api.AuthorKey, ID: "operator:" + c.id.Name}, nil
	case !ok && h == "":
		return api.Author{Kind: api.AuthorKey, ID: "operator"}, nil
	case h == "":
		// A write of the gateway itself, for no one in particular.
		return api.Author{Kind: api.AuthorKey, ID: "gateway:" + c.id.Name}, nil
	}
	kind, id, _ := strings.Cut(h, ":")
	if kind != api.AuthorAccount && kind != api.AuthorKey && kind != api.AuthorStep || id == "" || len(id) > 256 || strings.IndexFunc(id, unicode.IsControl) >= 0 {
		return api.Author{}, badRequest("header %s %q: want KIND:ID, kind account, key or step (an agent run's tool call), ID of at most 256 printable characters", AuthorHeader, h)
	}
	return api.Author{Kind: kind, ID: id}, nil
}

// writeMeta is what every write names: author and message.
func writeMeta(r *http.Request) (cluster.Revision, error) {
	a, err := authorOf(r)
	if err != nil {
		return cluster.Revision{}, err
	}
	msg := r.Header.Get(MessageHeader)
	if len(msg) > maxReason {
		return cluster.Revision{}, badRequest("header %s: %d bytes, at most %d", MessageHeader, len(msg), maxReason)
	}
	return cluster.Revision{Author: a, Message: msg}, nil
}

// writeBase returns the revision a write is made from: If-Match's, which
// must be a revision of the workspace (412 otherwise), or the head when
// the request began.
func (s *Server) writeBase(ctx context.Context, ws, ifMatch string) (string, *manifest.Manifest, error) {
	rev := strings.Trim(strings.TrimPrefix(ifMatch, "W/"), `"`)
	if rev == "" {
		w, _ := s.fsm.State().Workspace(ws)
		_, m, err := s.revisionManifest(ctx, ws, w.Head)
		return w.Head, m, err
	}
	if r, ok := s.fsm.State().Revision(rev); !ok || r.Workspace != ws {
		return "", nil, &httpError{Status: http.StatusPreconditionFailed, Code: api.CodeConflict,
			Message: fmt.Sprintf("If-Match %q: not a revision of workspace %s", ifMatch, ws)}
	}
	_, m, err := s.revisionManifest(ctx, ws, rev)
	return rev, m, err
}

// commitWrite commits tree made from base as a revision of ws, through
// the commit path of the steps' results. A conflict is kept as a
// detached revision and answered 409, naming the paths and that
// revision. The caller holds the workspace's lock.
func (s *Server) commitWrite(w http.ResponseWriter, r *http.Request, ws, base string, baseM, tree *manifest.Manifest, meta cluster.Revision) (cluster.Revision, error) {
	ctx := r.Context()
	if err := tree.Validate(manifest.DefaultLimits); err != nil {
		return cluster.Revision{}, &httpError{Status: http.StatusRequestEntityTooLarge, Code: api.CodeTooLarge, Message: fmt.Sprintf("workspace %s: %v", ws, err)}
	}
	digest, err := s.putManifest(ctx, tree)
	if err != nil {
		return cluster.Revision{}, err
	}
	for range 3 {
		plan, err := s.planCommit(ctx, ws, base, baseM, tree, digest, meta)
		if err != nil {
			return cluster.Revision{}, err
		}
		res, err := s.raft.Apply(ctx, plan.cmd)
		if errors.Is(err, ErrHeadMoved) {
			continue
		} else if err != nil {
			return cluster.Revision{}, err
		}
		rev := *res.(*cluster.Revision)
		if rev.Detached {
			w.Header().Set(DetachedHeader, rev.ID)
			e := conflict("%s; the tree written is kept as detached revision %s", conflictReason(plan), rev.ID)
			e.Revision = &rev
			return rev, e
		}
		w.Header().Set("Location", "/v1/workspaces/"+ws+"/revisions/"+rev.ID)
		return rev, nil
	}
	return cluster.Revision{}, &httpError{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable,
		Message: fmt.Sprintf("workspace %s: its head kept moving: retry", ws), RetryAfter: time.Second}
}

// answerRevision answers a write's revision.
func (s *Server) answerRevision(w http.ResponseWriter, status int, rev cluster.Revision, err error) error {
	if err != nil {
		return err
	}
	writeIndexed(w, status, s.fsm.State().Index(), rev)
	return nil
}

// withFiles returns a copy of m with the files es added or replaced. A
// file below another file or a symlink, or in place of a directory that
// holds entries, is refused.
func withFiles(m *manifest.Manifest, es []manifest.Entry) (*manifest.Manifest, error) {
	byPath := make(map[string]manifest.Entry, len(m.Entries)+len(es))
	for _, e := range m.Entries {
		byPath[e.Path] = e
	}
	for _, e := range es {
		if old, ok := byPath[e.Path]; ok && old.Type == manifest.Dir {
			delete(byPath, e.Path)
		}
		for dir := parentDir(e.Path); dir != ""; dir = parentDir(dir) {
			switch old, ok := byPath[dir]; {
			case ok && old.Type == manifest.Dir:
				delete(byPath, dir) // no longer empty
			case ok:
				return nil, badRequest("path %q: below %q, a %s", e.Path, dir, old.Type)
			}
		}
		byPath[e.Path] = e
	}
	out := &manifest.Manifest{Entries: make([]manifest.Entry, 0, len(byPath))}
	for _, e := range byPath {
		out.Entries = append(out.Entries, e)
	}
	out.Sort()
	for i := 0; i+1 < len(out.Entries); i++ {
		if e := out.Entries[i]; strings.HasPrefix(out.Entries[i+1].Path, e.Path+"/") {
			return nil, badRequest("path %q: a directory of the workspace, not a file", e.Path)
		}
	}
	return out, nil
}

// withoutPaths is m without paths (each a file, a symlink, or a directory
// with everything under it), and the first path that names nothing.
func withoutPaths(m *manifest.Manifest, paths []string) (*manifest.Manifest, string) {
	out := &manifest.Manifest{Entries: make([]manifest.Entry, 0, len(m.Entries))}
	found := make([]bool, len(paths))
	for _, e := range m.Entries {
		keep := true
		for i, p := range paths {
			if e.Path == p || strings.HasPrefix(e.Path, p+"/") {
				keep, found[i] = false, true
			}
		}
		if keep {
			out.Entries = append(out.Entries, e)
		}
	}
	for i, ok := range found {
		if !ok {
			return nil, paths[i]
		}
	}
	return out, ""
}

func parentDir(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ""
	}
	return p[:i]
}

// fileMode reads ModeHeader: 644 (the default) or 755.
func fileMode(h string) (uint32, error) {
	switch h {
	case "", "644", "0644":
		return 0o644, nil
	case "755", "0755":
		return 0o755, nil
	}
	return 0, badRequest("header %s %q: want 644 or 755", ModeHeader, h)
}

// maxFileBytes bounds one file written through the API.
var maxFileBytes = cluster.MaxLimits.WorkspaceBytes

func (s *Server) handlePutFile(w http.ResponseWriter, r *http.Request) error {
	ws, err := workspaceOf(r)
	if err != nil {
		return err
	}
	p, err := filePath(r)
	if err != nil {
		return err
	}
	mode, err := fileMode(r.Header.Get(ModeHeader))
	if err != nil {
		return err
	}
	meta, err := writeMeta(r)
	if err != nil {
		return s.writeRefusal(w, r, err)
	}
	if s.blobs == nil {
		return errNoStore
	}
	if r.ContentLength > maxFileBytes {
		return tooLarge(p, maxFileBytes)
	}
	base, baseM, err := s.writeBase(r.Context(), ws, r.Header.Get("If-Match"))
	if err != nil {
		return err
	}
	digest, size, err := s.blobs.PutUnknown(r.Context(), r.Body, maxFileBytes)
	switch {
	case errors.Is(err, blob.ErrTooLarge):
		return tooLarge(p, maxFileBytes)
	case err != nil:
		return fmt.Errorf("store %q: %w", p, err)
	}
	tree, err := withFiles(baseM, []manifest.Entry{{Path: p, Type: manifest.File, Mode: mode, Size: size, SHA256: digest}})
	if err != nil {
		return err
	}
	unlock := s.wsLocks.lock(ws)
	defer unlock()
	rev, err := s.commitWrite(w, r, ws, base, baseM, tree, meta)
	return s.answerRevision(w, http.StatusCreated, rev, err)
}

func tooLarge(p string, max int64) error {
	return &httpError{Status: http.StatusRequestEntityTooLarge, Code: api.CodeTooLarge,
		Message: fmt.Sprintf("file %q: more than %d bytes", p, max)}
}

// writeRefusal answers a refused identity as a refusal, other errors as
// they are.
func (s *Server) writeRefusal(w http.ResponseWriter, r *http.Request, err error) error {
	var fe *forbiddenError
	if errors.As(err, &fe) {
		s.refuse(w, r, r.Pattern, err)
		return nil
	}
	return err
}

func (s *Server) handleDeleteFile(w http.ResponseWriter, r *http.Request) error {
	ws, err := workspaceOf(r)
	if err != nil {
		return err
	}
	p, err := filePath(r)
	if err != nil {
		return err
	}
	meta, err := writeMeta(r)
	if err != nil {
		return s.writeRefusal(w, r, err)
	}
	unlock := s.wsLocks.lock(ws)
	defer unlock()
	base, baseM, err := s.writeBase(r.Context(), ws, r.Header.Get("If-Match"))
	if err != nil {
		return err
	}
	tree, missing := withoutPaths(baseM, []string{p})
	if missing != "" {
		return notFound("workspace %s: no file %q in revision %q", ws, p, base)
	}
	rev, err := s.commitWrite(w, r, ws, base, baseM, tree, meta)
	return s.answerRevision(w, http.StatusOK, rev, err)
}

func (s *Server) handleWorkspaceUploads(w http.ResponseWriter, r *http.Request) error {
	ws, err := workspaceOf(r)
	if err != nil {
		return err
	}
	var req api.UploadRequest
	if err := decodeBody(w, r, &req, maxUploadsBody, false); err != nil {
		return err
	}
	meta, err := writeMeta(r)
	if err != nil {
		return s.writeRefusal(w, r, err)
	}
	if req.Message != "" {
		meta.Message = req.Message
	}
	if len(meta.Message) > maxReason {
		return badRequest("field \"message\": %d bytes, at most %d", len(meta.Message), maxReason)
	}
	if s.blobs == nil {
		return errNoStore
	}
	if len(req.Files)+len(req.Delete) == 0 || len(req.Files) > manifest.DefaultLimits.MaxEntries || len(req.Delete) > manifest.DefaultLimits.MaxEntries {
		return badRequest("field \"files\": %d files and %d deletions: want 1 to %d of either", len(req.Files), len(req.Delete), manifest.DefaultLimits.MaxEntries)
	}
	deleted := make([]string, len(req.Delete))
	for i, d := range req.Delete {
		p, err := manifest.Clean(d, manifest.DefaultLimits)
		if err != nil {
			return badRequest("field \"delete[%d]\": %v", i, err)
		}
		deleted[i] = p
	}
	es := make([]manifest.Entry, len(req.Files))
	for i, f := range req.Files {
		p, err := manifest.Clean(f.Path, manifest.DefaultLimits)
		if err != nil {
			return badRequest("field \"files[%d].path\": %v", i, err)
		}
		if err := manifest.CheckDigest(f.SHA256); err != nil {
			return badRequest("field \"files[%d].sha256\": %v", i, err)
		}
		if f.Size < 0 || f.Size > maxFileBytes {
			return &httpError{Status: http.StatusRequestEntityTooLarge, Code: api.CodeTooLarge,
				Message: fmt.Sprintf("field \"files[%d].size\": %d: want 0 to %d bytes", i, f.Size, maxFileBytes)}
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		if mode != 0o644 && mode != 0o755 {
			return badRequest("field \"files[%d].mode\": %o: want 644 or 755", i, f.Mode)
		}
		es[i] = manifest.Entry{Path: p, Type: manifest.File, Mode: mode, Size: f.Size, SHA256: f.SHA256}
		if slices.Contains(deleted, p) {
			return badRequest("field \"files[%d].path\": %s is deleted too", i, p)
		}
	}
	ctx := r.Context()
	if !req.Commit {
		out := api.UploadResponse{URLs: map[string]string{}, Expires: s.now().Add(blob.MaxTTL / 4)}
		for _, e := range es {
			if _, ok := out.URLs[e.SHA256]; ok {
				continue
			}
			if _, err := s.blobs.Stat(ctx, e.SHA256); err == nil {
				continue
			} else if !errors.Is(err, blob.ErrNotFound) {
				return fmt.Errorf("blob store: %w", err)
			}
			if out.URLs[e.SHA256], err = s.blobs.PresignPut(ctx, e.SHA256, e.Size, blob.MaxTTL/4); err != nil {
				return fmt.Errorf("presign blob %s: %w", e.SHA256, err)
			}
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	for i, e := range es {
		if err := s.blobs.Verify(ctx, e.SHA256); err != nil {
			return badRequest("field \"files[%d]\" (%s): blob %s: %v: upload it first", i, e.Path, e.SHA256, err)
		}
	}
	unlock := s.wsLocks.lock(ws)
	defer unlock()
	base, baseM, err := s.writeBase(ctx, ws, req.Parent)
	if err != nil {
		return err
	}
	kept, missing := withoutPaths(baseM, deleted)
	if missing != "" {
		return notFound("workspace %s: no file %q to delete in revision %q", ws, missing, base)
	}
	tree, err := withFiles(kept, es)
	if err != nil {
		return err
	}
	rev, err := s.commitWrite(w, r, ws, base, baseM, tree, meta)
	if err != nil {
		return err
	}
	writeIndexed(w, http.StatusCreated, s.fsm.State().Index(), api.UploadResponse{URLs: map[string]string{}, Revision: &rev})
	return nil
}

func (s *Server) handleRestoreRevision(w http.ResponseWriter, r *http.Request) error {
	ws, err := workspaceOf(r)
	if err != nil {
		return err
	}
	var req api.RestoreRequest
	if err := decodeBody(w, r, &req, maxBody, false); err != nil {
		return err
	}
	meta, err := writeMeta(r)
	if err != nil {
		return s.writeRefusal(w, r, err)
	}
	if req.Message != "" {
		meta.Message = req.Message
	}
	if meta.Message == "" {
		meta.Message = "restore " + req.Rev
	}
	if len(meta.Message) > maxReason {
		return badRequest("field \"message\": %d bytes, at most %d", len(meta.Message), maxReason)
	}
	if req.Rev == "" {
		return badRequest("field \"rev\": missing: want the revision to restore")
	}
	ctx := r.Context()
	_, tree, err := s.revisionManifest(ctx, ws, req.Rev)
	if err != nil {
		return err
	}
	unlock := s.wsLocks.lock(ws)
	defer unlock()
	base, baseM, err := s.writeBase(ctx, ws, "")
	if err != nil {
		return err
	}
	rev, err := s.commitWrite(w, r, ws, base, baseM, tree, meta)
	return s.answerRevision(w, http.StatusCreated, rev, err)
}
