package scheduler

import (
	"fmt"
	"slices"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/manifest"
)

// ExitResult is what applying a StepExit with a Commit returns when the
// exit applied but its revision did not (the head moved since the leader
// computed it): Refused says why. The step is recorded ended without a
// revision; the leader computes the tree again and commits it alone
// (CommitRevision with Revision.Step set), which attaches it to the step.
type ExitResult struct {
	Refused error
}

// checkRevision checks what a commit may hold, whatever the state.
func checkRevision(c *cluster.CommitRevision) error {
	r := &c.Revision
	if err := cluster.ValidateRevisionID(r.ID); err != nil {
		return fmt.Errorf("%w: %w", err, ErrInvalid)
	}
	if err := cluster.ValidateWorkspaceID(r.Workspace); err != nil {
		return fmt.Errorf("revision %s: %w: %w", r.ID, err, ErrInvalid)
	}
	if err := manifest.CheckDigest(r.Manifest); err != nil {
		return fmt.Errorf("revision %s: manifest: %w: %w", r.ID, err, ErrInvalid)
	}
	switch r.Author.Kind {
	case api.AuthorAccount, api.AuthorKey, api.AuthorStep:
	default:
		return fmt.Errorf("revision %s: author kind %q: want account, key or step: %w", r.ID, r.Author.Kind, ErrInvalid)
	}
	for _, l := range [][]string{r.Changes.Added, r.Changes.Modified, r.Changes.Removed, r.Conflict} {
		if len(l) > api.MaxRevisionPaths {
			return fmt.Errorf("revision %s: a list of %d paths, at most %d: %w", r.ID, len(l), api.MaxRevisionPaths, ErrInvalid)
		}
	}
	if r.Detached != (len(r.Conflict) > 0) {
		return fmt.Errorf("revision %s: a detached revision names its conflicting paths, and only it: %w", r.ID, ErrInvalid)
	}
	if len(r.Message) > maxReason {
		return fmt.Errorf("revision %s: a message of %d bytes, at most %d: %w", r.ID, len(r.Message), maxReason, ErrInvalid)
	}
	return nil
}

// commitRevision adds the revision of c: on the history, as the new head,
// if the head is still c.ExpectHead (ErrHeadMoved otherwise), numbered one
// past it and with it as its parent; or, detached, aside, numbered 0. It
// returns the revision stored. The caller holds mu for writing and has
// checked c (checkRevision).
func (st *State) commitRevision(idx uint64, c *cluster.CommitRevision) (*cluster.Revision, error) {
	r := cloneRevision(&c.Revision)
	if _, ok := st.ws.revisions[r.ID]; ok {
		return nil, fmt.Errorf("revision %s: %w", r.ID, ErrExists)
	}
	if r.Parent != "" {
		p, ok := st.ws.revisions[r.Parent]
		if !ok || p.Workspace != r.Workspace {
			return nil, fmt.Errorf("revision %s: parent %s is no revision of workspace %s: %w", r.ID, r.Parent, r.Workspace, ErrInvalid)
		}
	}
	w, ok := st.ws.workspaces[r.Workspace]
	if !ok {
		w = &cluster.Workspace{ID: r.Workspace}
	}
	if r.Detached {
		r.Number = 0
		st.ws.putRevision(&r)
		return &r, nil
	}
	if w.Head != c.ExpectHead {
		return nil, fmt.Errorf("workspace %s: commit of revision %s expected head %q, but it is %q: %w",
			r.Workspace, r.ID, c.ExpectHead, w.Head, ErrHeadMoved)
	}
	r.Parent, r.Number = w.Head, w.Number+1
	st.ws.putRevision(&r)
	st.ws.workspaces[r.Workspace] = &cluster.Workspace{ID: w.ID, Head: r.ID, Number: r.Number, ModifyIndex: idx}
	return &r, nil
}

// applyCommitRevision adds a revision made by a write of the workspace
// API, or the revision of a step whose exit was recorded without it (see
// ExitResult): that step then gets it, if it has none yet.
func (st *State) applyCommitRevision(idx uint64, c *cluster.CommitRevision) any {
	if err := checkRevision(c); err != nil {
		return err
	}
	var old, s *cluster.Step
	if id := cluster.StepID(c.Revision.Step); id != "" {
		var err error
		if old, s, err = st.step(id); err != nil {
			return err
		}
		if s.Revision != "" || !s.State.Terminal() {
			return fmt.Errorf("step %s is %s with revision %q: a step's revision is committed with its exit: %w", id, s.State, s.Revision, ErrTransition)
		}
		if s.Spec.WorkspaceReadOnly {
			return fmt.Errorf("step %s: its workspace is read-only: it makes no revision: %w", id, ErrInvalid)
		}
	}
	r, err := st.commitRevision(idx, c)
	if err != nil {
		return err
	}
	if s != nil {
		s.Revision = r.ID
		alignFilesChanged(s, r)
		s.ModifyIndex = idx
		st.putStep(old, s)
	}
	return r
}

// alignFilesChanged makes the files_changed events of s carry the lists
// of its revision r: the one account of what the step changed.
func alignFilesChanged(s *cluster.Step, r *cluster.Revision) {
	for i := range s.Events {
		if s.Events[i].Kind == api.EventFilesChanged {
			s.Events[i].Files = revisionChanges(r)
		}
	}
}

// revisionChanges returns a copy of r's change lists.
func revisionChanges(r *cluster.Revision) *api.FilesChanged {
	return &api.FilesChanged{
		Added:    slices.Clone(r.Changes.Added),
		Modified: slices.Clone(r.Changes.Modified),
		Removed:  slices.Clone(r.Changes.Removed),
		More:     r.Changes.More,
	}
}

// capChanges caps each list of c at api.MaxRevisionPaths, counting the
// rest in More.
func capChanges(c api.FilesChanged) api.FilesChanged {
	for _, l := range []*[]string{&c.Added, &c.Modified, &c.Removed} {
		if *l == nil {
			*l = []string{}
		}
		if n := len(*l) - api.MaxRevisionPaths; n > 0 {
			c.More += n
			*l = (*l)[:api.MaxRevisionPaths]
		}
	}
	return c
}
