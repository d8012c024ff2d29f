package scheduler

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/hashicorp/raft"

	"github.com/rodon-compute/rodon/cluster"
)

// snapshotVersion is the format of a persisted snapshot.
const snapshotVersion = 1

// snapshotData is a persisted snapshot: the records sorted by ID, as JSON.
type snapshotData struct {
	Version int             `json:"version"`
	Index   uint64          `json:"index"`
	Nodes   []*cluster.Node `json:"nodes"`
	Steps   []*cluster.Step `json:"steps"`
	// Members are the members' address records (absent from snapshots
	// taken before they existed).
	Members []*cluster.Member `json:"members,omitempty"`
	// Records is the record store, sorted by kind and id, and Audit the
	// audit log in sequence order (both absent from snapshots taken
	// before they existed, and when empty).
	Records []*Record     `json:"records,omitempty"`
	Audit   []*AuditEntry `json:"audit,omitempty"`
	// Gateways are the gateways' address records, sorted by name (absent
	// from snapshots taken before they existed, and when empty).
	Gateways []*cluster.Gateway `json:"gateways,omitempty"`
	// Workspaces and Revisions are the workspaces of the store and every
	// revision, detached ones included, sorted by id (absent from
	// snapshots taken before they existed, and when empty).
	Workspaces []*cluster.Workspace `json:"workspaces,omitempty"`
	Revisions  []*cluster.Revision  `json:"revisions,omitempty"`
}

// fsmSnapshot holds pointers to the records as they were when it was taken;
// records are never modified in place, so it needs no copy.
type fsmSnapshot struct {
	data snapshotData
}

// Snapshot captures the state for Raft. It only collects pointers; Persist,
// which Raft calls on another goroutine while Apply goes on, does the I/O.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	st := f.st
	st.mu.RLock()
	defer st.mu.RUnlock()
	d := snapshotData{
		Version: snapshotVersion,
		Index:   st.index,
		Nodes:   make([]*cluster.Node, 0, len(st.nodes)),
		Steps:   make([]*cluster.Step, 0, len(st.steps)),
	}
	for _, n := range st.nodes {
		d.Nodes = append(d.Nodes, n)
	}
	for _, s := range st.steps {
		d.Steps = append(d.Steps, s)
	}
	for _, m := range st.members {
		d.Members = append(d.Members, m)
	}
	for _, byID := range st.records {
		for _, r := range byID {
			d.Records = append(d.Records, r)
		}
	}
	// Entries are only appended: the prefix the snapshot sees never
	// changes, and its capacity keeps appends out of it.
	d.Audit = st.audit[:len(st.audit):len(st.audit)]
	d.Gateways = st.snapshotGateways()
	d.Workspaces, d.Revisions = st.snapshotWorkspaces()
	return &fsmSnapshot{data: d}, nil
}

// Persist writes the snapshot to sink and closes it, or cancels it on error.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	d := s.data
	d.sort()
	if err := json.NewEncoder(sink).Encode(d); err != nil {
		sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

// sort orders the records by ID (and kind). The audit log, in sequence
// order already and shared with the state, is left alone.
func (d *snapshotData) sort() {
	slices.SortFunc(d.Nodes, func(a, b *cluster.Node) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(d.Steps, func(a, b *cluster.Step) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(d.Members, func(a, b *cluster.Member) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(d.Records, func(a, b *Record) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.ID, b.ID)) })
	slices.SortFunc(d.Workspaces, func(a, b *cluster.Workspace) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(d.Revisions, func(a, b *cluster.Revision) int { return cmp.Compare(a.ID, b.ID) })
}

// document returns the state as the document a snapshot persists, with
// the records sorted by ID (GET /v1/snapshot).
func (f *FSM) document() snapshotData {
	snap, _ := f.Snapshot() // never fails
	d := snap.(*fsmSnapshot).data
	d.sort()
	return d
}

// Release does nothing: the snapshot holds no resources.
func (s *fsmSnapshot) Release() {}

// Restore replaces the state with the snapshot read from rc, and closes rc.
// The applied index never goes back: a restored snapshot older than the
// state keeps the current index, and WaitIndex callers wake up.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var d snapshotData
	if err := json.NewDecoder(rc).Decode(&d); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	if d.Version != snapshotVersion {
		return fmt.Errorf("restore snapshot: version %d, want %d", d.Version, snapshotVersion)
	}
	fresh := newState()
	for _, n := range d.Nodes {
		fresh.putNode(n)
	}
	for _, s := range d.Steps {
		fresh.putStep(nil, s)
	}
	for _, m := range d.Members {
		fresh.members[m.ID] = m
	}
	for _, r := range d.Records {
		fresh.putRecord(r.Kind, r.ID, r)
	}
	fresh.audit = d.Audit
	for _, g := range d.Gateways {
		fresh.gateways[g.Name] = g
	}
	for _, w := range d.Workspaces {
		fresh.ws.workspaces[w.ID] = w
	}
	for _, r := range d.Revisions {
		fresh.ws.putRevision(r)
	}
	slices.SortFunc(fresh.audit, func(a, b *AuditEntry) int { return cmp.Compare(a.Seq, b.Seq) })
	fresh.indexAudit()
	st := f.st
	st.mu.Lock()
	defer st.mu.Unlock()
	st.takeNodesAndSteps(fresh)
	st.members = fresh.members
	st.records, st.recordOrder, st.audit, st.auditByTenant = fresh.records, fresh.recordOrder, fresh.audit, fresh.auditByTenant
	st.gateways = fresh.gateways
	st.ws = fresh.ws
	st.reset = max(st.index, d.Index)
	st.advance(d.Index)
	return nil
}
