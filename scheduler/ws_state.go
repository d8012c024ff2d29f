package scheduler

import (
	"slices"

	"github.com/google/btree"

	"github.com/rodon-compute/rodon/cluster"
)

// Workspaces of the store in the replicated state (docs/design/workspaces.md):
// each workspace's head and count, every revision by id, and per
// workspace an index of its history (the revisions with a number), newest
// first, for the revisions list's pages. Detached revisions are kept by id
// only: they are not on the history.

// wsState is the part of State that holds workspaces. The caller of its
// methods holds State.mu.
type wsState struct {
	workspaces map[string]*cluster.Workspace
	revisions  map[string]*cluster.Revision
	// history orders each workspace's numbered revisions, newest first.
	history map[string]*revisionTree
}

// revisionTree orders the revisions of one workspace by number, newest
// first.
type revisionTree = btree.BTreeG[*cluster.Revision]

func revisionLess(a, b *cluster.Revision) bool { return a.Number > b.Number }

func newWSState() wsState {
	return wsState{
		workspaces: make(map[string]*cluster.Workspace),
		revisions:  make(map[string]*cluster.Revision),
		history:    make(map[string]*revisionTree),
	}
}

// putRevision stores r, a revision not stored yet, and keeps the history
// index current. It does not move the head.
func (ws *wsState) putRevision(r *cluster.Revision) {
	ws.revisions[r.ID] = r
	if r.Detached {
		return
	}
	t := ws.history[r.Workspace]
	if t == nil {
		t = btree.NewG(treeDegree, revisionLess)
		ws.history[r.Workspace] = t
	}
	t.ReplaceOrInsert(r)
}

// cloneRevision returns a deep copy of r.
func cloneRevision(r *cluster.Revision) cluster.Revision {
	c := *r
	c.Changes.Added = slices.Clone(r.Changes.Added)
	c.Changes.Modified = slices.Clone(r.Changes.Modified)
	c.Changes.Removed = slices.Clone(r.Changes.Removed)
	c.Conflict = slices.Clone(r.Conflict)
	return c
}

// Workspace returns the workspace with the given id; false when it has no
// revision yet (a workspace exists in the store from its first).
func (st *State) Workspace(id string) (cluster.Workspace, bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	w, ok := st.ws.workspaces[id]
	if !ok {
		return cluster.Workspace{ID: id}, false
	}
	return *w, true
}

// Revision returns the revision with the given id, detached or not.
func (st *State) Revision(id string) (cluster.Revision, bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	r, ok := st.ws.revisions[id]
	if !ok {
		return cluster.Revision{}, false
	}
	return cloneRevision(r), true
}

// RevisionsPage returns at most limit revisions of workspace ws on its
// history, newest first, from number before on (0: from the head), and
// the number the next page starts at; more is false on the last page.
// Its cost does not depend on how many revisions there are.
func (st *State) RevisionsPage(ws string, before int64, limit int) (revs []cluster.Revision, next int64, more bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	revs = []cluster.Revision{}
	t := st.ws.history[ws]
	if t == nil || limit <= 0 {
		return revs, 0, false
	}
	visit := func(r *cluster.Revision) bool {
		if len(revs) == limit {
			next, more = r.Number, true
			return false
		}
		revs = append(revs, cloneRevision(r))
		return true
	}
	if before <= 0 {
		t.Ascend(visit)
	} else {
		t.AscendGreaterOrEqual(&cluster.Revision{Number: before}, visit)
	}
	return revs, next, more
}

// snapshotWorkspaces returns the workspaces and revisions for a snapshot.
// The caller holds mu.
func (st *State) snapshotWorkspaces() ([]*cluster.Workspace, []*cluster.Revision) {
	ws := make([]*cluster.Workspace, 0, len(st.ws.workspaces))
	for _, w := range st.ws.workspaces {
		ws = append(ws, w)
	}
	revs := make([]*cluster.Revision, 0, len(st.ws.revisions))
	for _, r := range st.ws.revisions {
		revs = append(revs, r)
	}
	return ws, revs
}
