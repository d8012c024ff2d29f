package scheduler

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/google/btree"

	"github.com/rodon-compute/rodon/cluster"
)

// State is one member's copy of the replicated state. The FSM writes it;
// any goroutine may read it through its getters, which return deep copies.
// Stored records are never modified in place: an apply replaces a record
// with a changed copy, so a snapshot can hold the old pointers.
type State struct {
	mu sync.RWMutex
	// index is the Raft index of the last applied entry.
	index uint64
	// changed is closed and replaced after each apply (see WaitIndex).
	changed chan struct{}
	nodes   map[cluster.NodeID]*cluster.Node
	// nodeOrder orders the node ids (nodes are never removed).
	nodeOrder *btree.BTreeG[cluster.NodeID]
	steps     map[cluster.StepID]*cluster.Step
	// live holds the placed, starting and running steps of each node, and
	// usage their reservations.
	live  map[cluster.NodeID]map[cluster.StepID]struct{}
	usage map[cluster.NodeID]Usage
	// ordered indexes the steps by submission: all, by state, by node and
	// by both (state_index.go); ended the terminal steps by their end.
	ordered map[StepFilter]*stepTree
	ended   *stepTree
	// assigned is, per node, the index of the last entry that changed the
	// node's assignments (a live step added, changed or removed); reset is
	// the index of the last restore, which may have changed any node's.
	assigned map[cluster.NodeID]uint64
	reset    uint64
	// members holds the scheduler members' address records.
	members map[string]*cluster.Member
	// records is the record store, by kind, then id; recordOrder orders
	// each kind's by id.
	records     map[string]map[string]*Record
	recordOrder map[string]*recordTree
	// audit is the audit log in sequence order. Entries are only
	// appended, so a snapshot may hold a prefix of the slice; an audit
	// drop replaces it with a new slice of the entries kept.
	audit []*AuditEntry
	// auditByTenant holds the same entries by tenant, each in sequence
	// order ("" for the entries without a tenant); an apply replaces a
	// tenant's slice rather than removing from it in place.
	auditByTenant map[string][]*AuditEntry
	// gateways holds the gateways' address records, by name.
	gateways map[string]*cluster.Gateway
	// ws holds the workspaces of the store and their revisions
	// (ws_state.go).
	ws wsState

	// wmu guards watchers, the channels of the topics being waited for
	// (state_watch.go); closed and dropped by a change of their topic.
	// Held inside mu, never the other way round.
	wmu      sync.Mutex
	watchers map[topic]chan struct{}
}

func newState() *State {
	return &State{
		changed:   make(chan struct{}),
		nodes:     make(map[cluster.NodeID]*cluster.Node),
		nodeOrder: newNodeOrder(),
		steps:     make(map[cluster.StepID]*cluster.Step),
		live:      make(map[cluster.NodeID]map[cluster.StepID]struct{}),
		usage:     make(map[cluster.NodeID]Usage),
		ordered:   make(map[StepFilter]*stepTree),
		ended:     btree.NewG(treeDegree, endedLess),

		assigned:      make(map[cluster.NodeID]uint64),
		members:       make(map[string]*cluster.Member),
		records:       make(map[string]map[string]*Record),
		auditByTenant: make(map[string][]*AuditEntry),
		recordOrder:   make(map[string]*recordTree),
		gateways:      make(map[string]*cluster.Gateway),
		ws:            newWSState(),
		watchers:      make(map[topic]chan struct{}),
	}
}

// takeNodesAndSteps replaces the nodes and steps of st, and every index
// of them, with those of fresh (a restore). The caller holds mu for
// writing.
func (st *State) takeNodesAndSteps(fresh *State) {
	st.nodes, st.nodeOrder = fresh.nodes, fresh.nodeOrder
	st.steps, st.live, st.usage, st.ordered, st.ended = fresh.steps, fresh.live, fresh.usage, fresh.ordered, fresh.ended
	st.assigned = fresh.assigned
	st.notifyAll()
}

// putStep stores s in place of old (nil for a new step) and keeps the
// indexes current. The caller holds mu for writing and does not modify s
// afterwards.
func (st *State) putStep(old, s *cluster.Step) {
	if old != nil {
		st.liveStep(old, -1)
		if old.Live() {
			st.assigned[old.Node] = max(st.assigned[old.Node], s.ModifyIndex)
		}
	}
	st.steps[s.ID] = s
	st.reorderStep(old, s)
	st.liveStep(s, 1)
	if s.Live() {
		st.assigned[s.Node] = max(st.assigned[s.Node], s.ModifyIndex)
	}
	st.stepTopics(old, s)
}

func (st *State) indexStep(s *cluster.Step, sign int) {
	st.orderStep(s, sign)
	st.liveStep(s, sign)
}

// liveStep adds (sign 1) or removes (sign -1) s in the live sets and
// usage of its node, if it is live. The caller holds mu for writing.
func (st *State) liveStep(s *cluster.Step, sign int) {
	if !s.Live() {
		return
	}
	set := st.live[s.Node]
	if set == nil {
		set = make(map[cluster.StepID]struct{})
		st.live[s.Node] = set
	}
	u := st.usage[s.Node]
	u.add(s, sign)
	if sign > 0 {
		set[s.ID] = struct{}{}
	} else {
		delete(set, s.ID)
	}
	if len(set) == 0 {
		delete(st.live, s.Node)
		delete(st.usage, s.Node)
	} else {
		st.usage[s.Node] = u
	}
}

// Index returns the Raft index of the last entry applied to the state. It
// only grows.
func (st *State) Index() uint64 {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.index
}

// WaitIndex blocks until the applied index is greater than after, and
// returns it; or returns ctx's error. It is the long poll of agents and
// watchers: read, remember Index, WaitIndex(ctx, index), read again.
func (st *State) WaitIndex(ctx context.Context, after uint64) (uint64, error) {
	for {
		st.mu.RLock()
		idx, ch := st.index, st.changed
		st.mu.RUnlock()
		if idx > after {
			return idx, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return idx, ctx.Err()
		}
	}
}

// advance records idx as applied and wakes WaitIndex callers. The caller
// holds mu for writing.
func (st *State) advance(idx uint64) {
	if idx > st.index {
		st.index = idx
	}
	close(st.changed)
	st.changed = make(chan struct{})
}

// Node returns the node with the given ID.
func (st *State) Node(id cluster.NodeID) (cluster.Node, bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	n, ok := st.nodes[id]
	if !ok {
		return cluster.Node{}, false
	}
	return n.Clone(), true
}

// Nodes returns all nodes, ordered by ID.
func (st *State) Nodes() []cluster.Node {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.nodeList()
}

func (st *State) nodeList() []cluster.Node {
	out := make([]cluster.Node, 0, len(st.nodes))
	for _, n := range st.nodes {
		out = append(out, n.Clone())
	}
	slices.SortFunc(out, func(a, b cluster.Node) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Usage returns the reservations of the live steps on each node; a node
// without live steps has no entry.
func (st *State) Usage() map[cluster.NodeID]Usage {
	st.mu.RLock()
	defer st.mu.RUnlock()
	out := make(map[cluster.NodeID]Usage, len(st.usage))
	for id, u := range st.usage {
		out[id] = u
	}
	return out
}

// Placement returns the input of Place as of one index: the nodes and
// their reservations.
func (st *State) Placement() (nodes []cluster.Node, used map[cluster.NodeID]Usage, index uint64) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	used = make(map[cluster.NodeID]Usage, len(st.usage))
	for id, u := range st.usage {
		used[id] = u
	}
	return st.nodeList(), used, st.index
}

// Step returns the step with the given ID.
func (st *State) Step(id cluster.StepID) (cluster.Step, bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	s, ok := st.steps[id]
	if !ok {
		return cluster.Step{}, false
	}
	return s.Clone(), true
}

// StepNode returns the node of the current attempt of the step with the
// given ID ("" while it has none), without copying the step: the checks
// of an agent's report need no more.
func (st *State) StepNode(id cluster.StepID) (cluster.NodeID, bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	s, ok := st.steps[id]
	if !ok {
		return "", false
	}
	return s.Node, true
}

// StepFilter selects steps; a zero field selects all.
type StepFilter struct {
	State cluster.StepState
	Node  cluster.NodeID
}

// Steps returns every step that matches f, oldest submission first (the
// HTTP API pages them: StepsPage).
func (st *State) Steps(f StepFilter) []cluster.Step {
	st.mu.RLock()
	defer st.mu.RUnlock()
	var out []cluster.Step
	if t := st.ordered[f]; t != nil && t.Len() > 0 {
		out = make([]cluster.Step, 0, t.Len())
		t.Ascend(func(s *cluster.Step) bool {
			out = append(out, s.Clone())
			return true
		})
	}
	return out
}

// Assignments returns the placed, starting and running steps of a node,
// oldest submission first: what its agent should be running.
func (st *State) Assignments(node cluster.NodeID) []cluster.Step {
	st.mu.RLock()
	defer st.mu.RUnlock()
	out := make([]cluster.Step, 0, len(st.live[node]))
	for id := range st.live[node] {
		out = append(out, st.steps[id].Clone())
	}
	sortSteps(out)
	return out
}

// AssignmentChanges returns, as of one index (returned), the live steps
// of node changed after index after, oldest submission first, and every
// live attempt of node, by step id: what an agent that holds the node's
// assignments as of after needs to hold them as of index. changes is
// false when after cannot serve as a base: zero, ahead of this state (a
// member behind the one that answered before), or before a restore
// (which may have replaced any step); then steps are all the live steps,
// as Assignments returns them, and live is nil. Either way each step is
// without its events: no agent reads them (GET /v1/steps/{id} has them),
// and they were most of an answer's bytes.
func (st *State) AssignmentChanges(node cluster.NodeID, after uint64) (index uint64, steps []cluster.Step, live []cluster.StepAttempt, changes bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	ids := st.live[node]
	changes = after > 0 && after <= st.index && after >= st.reset
	if changes {
		live = make([]cluster.StepAttempt, 0, len(ids))
	}
	steps = make([]cluster.Step, 0)
	for id := range ids {
		s := st.steps[id]
		if changes {
			live = append(live, cluster.StepAttempt{Step: s.ID, Attempt: s.Attempts})
			if s.ModifyIndex <= after {
				continue
			}
		}
		c := *s
		c.Events = nil
		steps = append(steps, c.Clone())
	}
	sortSteps(steps)
	slices.SortFunc(live, func(a, b cluster.StepAttempt) int { return cmp.Compare(a.Step, b.Step) })
	return st.index, steps, live, changes
}

// AssignmentsIndex returns the index of the last entry that changed the
// assignments of node (see Assignments); zero if none did.
func (st *State) AssignmentsIndex(node cluster.NodeID) uint64 {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return max(st.assigned[node], st.reset)
}

// StepCounts returns how many steps are in each state.
func (st *State) StepCounts() map[cluster.StepState]int {
	st.mu.RLock()
	defer st.mu.RUnlock()
	out := make(map[cluster.StepState]int)
	for _, state := range stepStates {
		if n := st.stepCount(StepFilter{State: state}); n > 0 {
			out[state] = n
		}
	}
	return out
}

func sortSteps(s []cluster.Step) {
	slices.SortFunc(s, func(a, b cluster.Step) int {
		return cmp.Or(cmp.Compare(a.CreateIndex, b.CreateIndex), cmp.Compare(a.ID, b.ID))
	})
}
