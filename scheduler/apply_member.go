package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

func (st *State) applySetMember(idx uint64, c *cluster.SetMember) any {
	if c.ID == "" || c.RaftAddress == "" || c.HTTPAddress == "" {
		return fmt.Errorf("member %q: id, raft_address and http_address are required: %w", c.ID, ErrInvalid)
	}
	st.members[c.ID] = &cluster.Member{ID: c.ID, RaftAddress: c.RaftAddress, HTTPAddress: c.HTTPAddress, Version: c.Version, ModifyIndex: idx}
	return nil
}

func (st *State) applyRemoveMember(_ uint64, c *cluster.RemoveMember) any {
	delete(st.members, c.ID)
	return nil
}

// Member returns the address record of the scheduler member id.
func (st *State) Member(id string) (cluster.Member, bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	m, ok := st.members[id]
	if !ok {
		return cluster.Member{}, false
	}
	return *m, true
}

// Members returns the members' address records, ordered by ID.
func (st *State) Members() []cluster.Member {
	st.mu.RLock()
	defer st.mu.RUnlock()
	out := make([]cluster.Member, 0, len(st.members))
	for _, m := range st.members {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b cluster.Member) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// applyRestore replaces the nodes and steps (see cluster.Restore). The
// document is checked first: a bad one changes nothing.
func (st *State) applyRestore(idx uint64, c *cluster.Restore) any {
	fresh := newState()
	for i := range c.Nodes {
		n := c.Nodes[i].Clone()
		switch {
		case cluster.ValidateNodeID(n.ID) != nil:
			return fmt.Errorf("restore: %w: %w", cluster.ValidateNodeID(n.ID), ErrInvalid)
		case fresh.nodes[n.ID] != nil:
			return fmt.Errorf("restore: node %s appears twice: %w", n.ID, ErrInvalid)
		}
		switch n.State {
		case cluster.NodeReady, cluster.NodeDegraded, cluster.NodeDraining:
			n.LastHeartbeat = later(n.LastHeartbeat, c.At)
		case cluster.NodeDown:
		default:
			return fmt.Errorf("restore: node %s: state %q: %w", n.ID, n.State, ErrInvalid)
		}
		n.ModifyIndex = idx
		fresh.putNode(&n)
	}
	for i := range c.Steps {
		s := c.Steps[i].Clone()
		if err := cluster.ValidateStepID(s.ID); err != nil {
			return fmt.Errorf("restore: %w: %w", err, ErrInvalid)
		}
		if fresh.steps[s.ID] != nil {
			return fmt.Errorf("restore: step %s appears twice: %w", s.ID, ErrInvalid)
		}
		if _, ok := stepRank[s.State]; !ok && s.State != cluster.StateQueued && !s.State.Terminal() {
			return fmt.Errorf("restore: step %s: state %q: %w", s.ID, s.State, ErrInvalid)
		}
		if s.Live() && fresh.nodes[s.Node] == nil {
			return fmt.Errorf("restore: step %s is %s on node %q, which the document lacks: %w", s.ID, s.State, s.Node, ErrInvalid)
		}
		s.ModifyIndex = idx
		fresh.putStep(nil, &s)
	}
	st.takeNodesAndSteps(fresh)
	st.reset = idx
	return nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
