package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/blob"
	"github.com/rodon-compute/rodon/internal/manifest"
)

// A step's workspace on the agents' side (docs/design/workspaces.md, 1):
// its base fixed at submission, presigned GET URLs in its assignments,
// PUT URLs for its result's blobs, and the commit of its result with its
// exit.

// resolveBase fixes the base revision of a step that names a workspace:
// the head when none is named ("" for a workspace without revisions), or
// the one named, which must be a revision of that workspace.
func (s *Server) resolveBase(spec *cluster.StepSpec) error {
	if spec.Workspace == "" {
		return nil
	}
	st := s.fsm.State()
	if spec.BaseRevision == "" {
		w, _ := st.Workspace(spec.Workspace)
		spec.BaseRevision = w.Head
		return nil
	}
	if r, ok := st.Revision(spec.BaseRevision); !ok || r.Workspace != spec.Workspace {
		return badRequest("field \"base_revision\": %s is no revision of workspace %s", spec.BaseRevision, spec.Workspace)
	}
	return nil
}

// openWorkspace returns step as its node's agent receives it: with
// presigned GET URLs for its base revision (WorkspaceAccess) and its
// library's head (LibraryAccess), valid for the step's life (blobTTL).
// When they cannot be made (the store fails, the manifest is gone) the
// access names the revision and its manifest without URLs: the node then
// fails the step (workspace_unavailable) and its other steps go on. The
// state's record is not changed.
func (s *Server) openWorkspace(ctx context.Context, step cluster.Step) cluster.Step {
	spec := &step.Spec
	if spec.Workspace == "" && spec.Library == "" {
		return step
	}
	ttl := s.blobTTL(*spec)
	expires := s.now().Add(ttl)
	if spec.Workspace != "" {
		spec.WorkspaceAccess = s.access(ctx, step.ID, spec.Workspace, spec.BaseRevision, ttl, expires)
		spec.WorkspaceAccess.ReadOnly = spec.WorkspaceReadOnly
	}
	if spec.Library != "" {
		w, _ := s.fsm.State().Workspace(spec.Library)
		spec.LibraryAccess = s.access(ctx, step.ID, spec.Library, w.Head, ttl, expires)
		spec.LibraryAccess.ReadOnly = true
	}
	return step
}

// access returns the URLs of revision rev of workspace ws: its manifest's
// and one per distinct blob; none when they cannot be made.
func (s *Server) access(ctx context.Context, step cluster.StepID, ws, rev string, ttl time.Duration, expires time.Time) *cluster.WorkspaceAccess {
	a := &cluster.WorkspaceAccess{Workspace: ws, Revision: rev, Expires: expires}
	if rev == "" {
		return a
	}
	if r, ok := s.fsm.State().Revision(rev); ok {
		a.Manifest = r.Manifest
	}
	urls, err := s.presignTree(ctx, ws, rev, ttl)
	if err != nil {
		s.logger.Warn("no URLs for a step's workspace: its node will fail it", "step", step, "workspace", ws, "revision", rev, "error", err)
		return a
	}
	a.URLs = urls
	return a
}

// presignTree returns GET URLs for revision rev's manifest and blobs.
func (s *Server) presignTree(ctx context.Context, ws, rev string, ttl time.Duration) (map[string]string, error) {
	if s.blobs == nil {
		return nil, errNoStore
	}
	r, m, err := s.revisionManifest(ctx, ws, rev)
	if err != nil {
		return nil, err
	}
	digests := m.Digests()
	urls := make(map[string]string, len(digests)+1)
	if urls[r.Manifest], err = s.blobs.PresignGet(ctx, r.Manifest, ttl); err != nil {
		return nil, fmt.Errorf("presign manifest %s: %w", r.Manifest, err)
	}
	for d := range digests {
		if urls[d], err = s.blobs.PresignGet(ctx, d, ttl); err != nil {
			return nil, fmt.Errorf("presign blob %s: %w", d, err)
		}
	}
	return urls, nil
}

// maxUploadsBody bounds the body of POST /v1/agent/uploads: a tree's
// blobs at the largest.
const maxUploadsBody = 32 << 20

// handleUploads answers POST /v1/agent/uploads: PUT URLs for the blobs of
// a step's result that the store lacks. The node must be the caller's and
// hold the step's current attempt, not ended.
func (s *Server) handleUploads(w http.ResponseWriter, r *http.Request) error {
	var req cluster.UploadsRequest
	if err := decodeBody(w, r, &req, maxUploadsBody, false); err != nil {
		return err
	}
	if err := checkAttempt(req.Node, req.Attempt); err != nil {
		return err
	}
	if c, ok := callerOf(r.Context()); ok && string(req.Node) != c.id.Name {
		s.refuse(w, r, r.Pattern, refusal(c.id, "%s may not %s for node %q: only for its own node %s", c.id, c.access.action, req.Node, c.id.Name))
		return nil
	}
	if len(req.Blobs) > manifest.DefaultLimits.MaxEntries+1 {
		return badRequest("field \"blobs\": %d blobs, at most %d", len(req.Blobs), manifest.DefaultLimits.MaxEntries+1)
	}
	step, ok := s.fsm.State().Step(req.Step)
	switch {
	case !ok:
		return notFound("step %s: not found", req.Step)
	case step.Node != req.Node || step.Attempts != req.Attempt || !step.Live():
		if c, ok := callerOf(r.Context()); ok && step.Node != req.Node {
			s.refuse(w, r, r.Pattern, refusal(c.id, "%s may not %s for step %s: its current attempt is not on node %s", c.id, c.access.action, req.Step, req.Node))
			return nil
		}
		return conflict("step %s: attempt %d on node %s is not its current, live attempt (attempt %d on node %q is %s)",
			req.Step, req.Attempt, req.Node, step.Attempts, step.Node, step.State)
	case step.Spec.Workspace == "":
		return conflict("step %s has no workspace: it uploads nothing", req.Step)
	case step.Spec.WorkspaceReadOnly:
		return conflict("step %s has its workspace read-only: it uploads nothing", req.Step)
	case s.blobs == nil:
		return errNoStore
	}
	ttl := s.blobTTL(step.Spec)
	out := cluster.UploadsResponse{URLs: map[string]string{}, Expires: s.now().Add(ttl)}
	for i, b := range req.Blobs {
		if err := manifest.CheckDigest(b.SHA256); err != nil {
			return badRequest("field \"blobs[%d].sha256\": %v", i, err)
		}
		if b.Size < 0 {
			return badRequest("field \"blobs[%d].size\": %d is negative", i, b.Size)
		}
		if _, dup := out.URLs[b.SHA256]; dup {
			continue
		}
		_, err := s.blobs.Stat(r.Context(), b.SHA256)
		switch {
		case err == nil:
			continue
		case !errors.Is(err, blob.ErrNotFound):
			return fmt.Errorf("blob store: %w", err)
		}
		if out.URLs[b.SHA256], err = s.blobs.PresignPut(r.Context(), b.SHA256, b.Size, ttl); err != nil {
			return fmt.Errorf("presign blob %s: %w", b.SHA256, err)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// exitWithWorkspace applies the exit of a step that reported a workspace
// result, on the leader: under the workspace's lock it computes the
// revision the result makes and commits it in the same entry as the
// exit. A result that cannot be used leaves a warning event and no
// revision; a conflict keeps the tree as a detached revision and fails
// the step. A repeated or late report commits nothing, and neither does
// a result of a step whose workspace is read-only (its node should have
// reported none: the exit is recorded without it, and logged).
func (s *Server) exitWithWorkspace(w http.ResponseWriter, r *http.Request, c cluster.StepExit) error {
	ctx := r.Context()
	st := s.fsm.State()
	step, _ := st.Step(c.Record.Step)
	ws := step.Spec.Workspace
	if ws == "" || step.Spec.WorkspaceReadOnly {
		if ws != "" {
			s.logger.Warn("a step with a read-only workspace reported a result: no revision", "step", step.ID, "node", c.Node, "manifest", c.Record.Workspace.Manifest)
		}
		c.Record.Workspace = nil
		return s.applyReport(w, r, c)
	}
	unlock := s.wsLocks.lock(ws)
	defer unlock()
	step, _ = st.Step(c.Record.Step) // as of the lock
	if !step.Live() || step.Node != c.Node || step.Attempts != c.Attempt {
		return s.applyReport(w, r, c)
	}
	plan, err := s.planExit(ctx, step, c.Record.Workspace)
	switch {
	case err != nil:
		s.logger.Warn("step's workspace result not saved", "step", step.ID, "error", err)
		warn := event(s.now(), cluster.EventWarning, "workspace changes not saved: %v", err)
		warn.Warning = &api.Warning{Cause: api.WarningWorkspaceNotSaved}
		if _, err := s.apply(ctx, cluster.StepEvents{Step: step.ID, Node: c.Node, Attempt: c.Attempt, Events: []cluster.Event{warn}}); err != nil {
			return err
		}
	case plan == nil:
		// The step left its tree as it found it: no revision.
	case plan.cmd.Revision.Detached:
		c.Record.State, c.Record.Cause, c.Record.Reason = cluster.StateFailed, api.CauseWorkspaceConflict, conflictReason(*plan)
		c.Commit = &plan.cmd
	default:
		c.Commit = &plan.cmd
	}
	res, err := s.apply(ctx, c)
	if err != nil {
		return err
	}
	if er, ok := res.(*ExitResult); ok {
		s.logger.Warn("step's revision refused with its exit; committing it again", "step", step.ID, "error", er.Refused)
		s.recommit(ctx, step, c.Record.Workspace)
	}
	return s.answerIndex(w)
}

// answerIndex answers {"index": N}.
func (s *Server) answerIndex(w http.ResponseWriter) error {
	idx := s.fsm.State().Index()
	writeIndexed(w, http.StatusOK, idx, struct {
		Index uint64 `json:"index"`
	}{idx})
	return nil
}

// planExit computes the revision a step's result makes; nil when the
// step changed nothing. An error says why the result cannot be saved.
func (s *Server) planExit(ctx context.Context, step cluster.Step, res *cluster.WorkspaceResult) (*commitPlan, error) {
	if s.blobs == nil {
		return nil, errNoStore
	}
	spec := step.Spec
	baseRev, baseM, err := s.revisionManifest(ctx, spec.Workspace, spec.BaseRevision)
	if err != nil {
		return nil, fmt.Errorf("base revision %s: %w", spec.BaseRevision, err)
	}
	if res.Base != "" && res.Base != spec.BaseRevision && res.Base != baseRev.Manifest {
		return nil, fmt.Errorf("the result is made from %s, but the step's base is %q", res.Base, spec.BaseRevision)
	}
	mine, err := s.manifestOf(ctx, res.Manifest)
	if err != nil {
		return nil, err
	}
	if err := checkSizes(mine, stepLimits(spec)); err != nil {
		return nil, err
	}
	d := manifest.Diff(baseM, mine)
	if len(d.Added)+len(d.Modified)+len(d.Removed) == 0 {
		return nil, nil
	}
	if err := s.missingBlobs(ctx, baseM, mine); err != nil {
		return nil, err
	}
	plan, err := s.planCommit(ctx, spec.Workspace, spec.BaseRevision, baseM, mine, res.Manifest,
		cluster.Revision{Author: api.Author{Kind: api.AuthorStep, ID: string(step.ID)}, Step: string(step.ID)})
	if err != nil {
		return nil, err
	}
	return &plan, nil
}

// recommit commits the revision of a step whose exit was recorded without
// it, as a command of its own that attaches it to the step; a few tries.
func (s *Server) recommit(ctx context.Context, step cluster.Step, res *cluster.WorkspaceResult) {
	for range 3 {
		plan, err := s.planExit(ctx, step, res)
		if err != nil || plan == nil {
			s.logger.Warn("step's revision not committed", "step", step.ID, "error", err)
			return
		}
		_, err = s.apply(ctx, plan.cmd)
		if !errors.Is(err, ErrHeadMoved) {
			if err != nil {
				s.logger.Warn("step's revision not committed", "step", step.ID, "error", err)
			}
			return
		}
	}
}
