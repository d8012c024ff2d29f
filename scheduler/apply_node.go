package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

func validateHealth(h cluster.Health) error {
	switch {
	case h.State == cluster.NodeReady:
		return nil
	case h.State == cluster.NodeDegraded && len(h.Reasons) > 0:
		return nil
	case h.State == cluster.NodeDegraded:
		return fmt.Errorf("health degraded without a reason: %w", ErrInvalid)
	}
	return fmt.Errorf("health state %q: want ready or degraded: %w", h.State, ErrInvalid)
}

// liveState is the state of a node that is not down.
func liveState(n *cluster.Node) cluster.NodeState {
	switch {
	case n.Drain != nil:
		return cluster.NodeDraining
	case n.Health.State == cluster.NodeDegraded:
		return cluster.NodeDegraded
	}
	return cluster.NodeReady
}

// nodeMaxLimits returns a node's maxima of step limits with each zero
// field set to the cluster's (cluster.MaxLimits).
func nodeMaxLimits(l cluster.Limits) cluster.Limits {
	m := cluster.MaxLimits
	return cluster.Limits{
		Pids:           cmp.Or(l.Pids, m.Pids),
		Timeout:        cmp.Or(l.Timeout, m.Timeout),
		WorkspaceBytes: cmp.Or(l.WorkspaceBytes, m.WorkspaceBytes),
		OutputBytes:    cmp.Or(l.OutputBytes, m.OutputBytes),
	}
}

// covers reports whether the maxima max allow every limit of l.
func covers(max, l cluster.Limits) bool {
	return l.Pids <= max.Pids && l.Timeout <= max.Timeout && l.WorkspaceBytes <= max.WorkspaceBytes && l.OutputBytes <= max.OutputBytes
}

func (st *State) node(id cluster.NodeID) (*cluster.Node, error) {
	n, ok := st.nodes[id]
	if !ok {
		return nil, fmt.Errorf("node %s: %w", id, ErrNotFound)
	}
	c := n.Clone()
	return &c, nil
}

func (st *State) applyRegisterNode(idx uint64, c *cluster.RegisterNode) any {
	switch {
	case cluster.ValidateNodeID(c.Node) != nil:
		return fmt.Errorf("%w: %w", cluster.ValidateNodeID(c.Node), ErrInvalid)
	case !c.Address.IsValid():
		return fmt.Errorf("node %s: no address: %w", c.Node, ErrInvalid)
	case !(c.Capacity.CPU > 0) || c.Capacity.MemoryBytes <= 0:
		return fmt.Errorf("node %s: capacity %g cores, %d bytes: must be positive: %w",
			c.Node, c.Capacity.CPU, c.Capacity.MemoryBytes, ErrInvalid)
	case c.MaxStarting < 0:
		return fmt.Errorf("node %s: negative start concurrency %d: %w", c.Node, c.MaxStarting, ErrInvalid)
	}
	if err := validateHealth(c.Health); err != nil {
		return fmt.Errorf("node %s: %w", c.Node, err)
	}
	maxLimits := nodeMaxLimits(c.MaxLimits)
	if err := maxLimits.Check(cluster.MaxLimits); err != nil {
		return fmt.Errorf("node %s: max_limits: %w: %w", c.Node, err, ErrInvalid)
	}
	n := &cluster.Node{ID: c.Node, CreateIndex: idx}
	if old, ok := st.nodes[c.Node]; ok {
		cl := old.Clone()
		n = &cl
	}
	n.Address = c.Address
	n.Capacity = c.Capacity
	n.Labels = c.Labels
	n.Health = c.Health
	n.MaxStarting = cmp.Or(c.MaxStarting, cluster.DefaultMaxStarting)
	n.MaxLimits = maxLimits
	n.Registered = c.At
	n.LastHeartbeat = c.At
	n.DownSince, n.DownReason = time.Time{}, ""
	n.State = liveState(n)
	n.ModifyIndex = idx
	st.putNode(n)
	return nil
}

func (st *State) applyHeartbeat(idx uint64, c *cluster.Heartbeat) any {
	n, err := st.node(c.Node)
	if err != nil {
		return err
	}
	if err := validateHealth(c.Health); err != nil {
		return fmt.Errorf("node %s: %w", c.Node, err)
	}
	n.Health = c.Health
	n.LastHeartbeat = c.At
	n.DownSince, n.DownReason = time.Time{}, ""
	n.State = liveState(n)
	n.ModifyIndex = idx
	st.putNode(n)

	return &cluster.HeartbeatResult{Unwanted: st.unwanted(c.Node, c.Running)}
}

// Unwanted returns the attempts of running, which node says it runs, that
// the state does not want running there (ended, elsewhere, another
// attempt, or unknown), as a logged heartbeat would answer them. It
// changes nothing: the leader answers a heartbeat it does not log with it.
func (st *State) Unwanted(node cluster.NodeID, running []cluster.StepAttempt) []cluster.StepAttempt {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.unwanted(node, running)
}

func (st *State) unwanted(node cluster.NodeID, running []cluster.StepAttempt) []cluster.StepAttempt {
	var out []cluster.StepAttempt
	for _, a := range running {
		s, ok := st.steps[a.Step]
		if !ok || s.Node != node || s.Attempts != a.Attempt || !s.Live() {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b cluster.StepAttempt) int {
		return cmp.Or(cmp.Compare(a.Step, b.Step), cmp.Compare(a.Attempt, b.Attempt))
	})
	return out
}

func (st *State) applySetNodeState(idx uint64, c *cluster.SetNodeState) any {
	if c.State == cluster.NodeDown {
		reason := strings.Join(c.Reasons, "; ")
		if reason == "" {
			reason = "declared down by an operator"
		}
		return st.markLost(idx, c.Node, reason, c.At)
	}
	n, err := st.node(c.Node)
	if err != nil {
		return err
	}
	switch c.State {
	case cluster.NodeDraining:
		d := &cluster.Drain{RequestedAt: c.At, Deadline: c.Deadline}
		if n.Drain != nil {
			d.RequestedAt = n.Drain.RequestedAt
		}
		n.Drain = d
	case cluster.NodeReady:
		n.Drain = nil
	case cluster.NodeDegraded:
		h := cluster.Health{State: cluster.NodeDegraded, Reasons: c.Reasons}
		if err := validateHealth(h); err != nil {
			return fmt.Errorf("node %s: %w", c.Node, err)
		}
		n.Health = h
	default:
		return fmt.Errorf("node %s: state %q: want ready, degraded, draining or down: %w", c.Node, c.State, ErrInvalid)
	}
	if n.State != cluster.NodeDown {
		n.State = liveState(n)
	}
	n.ModifyIndex = idx
	st.putNode(n)
	return nil
}

func (st *State) applyMarkNodeLost(idx uint64, c *cluster.MarkNodeLost) any {
	reason := c.Reason
	if reason == "" {
		reason = "stopped answering"
	}
	return st.markLost(idx, c.Node, reason, c.At)
}

// markLost declares node down and ends its live steps (see
// cluster.MarkNodeLost). A node already down is left as it is.
func (st *State) markLost(idx uint64, id cluster.NodeID, reason string, at time.Time) any {
	n, err := st.node(id)
	if err != nil {
		return err
	}
	if n.State == cluster.NodeDown {
		return nil
	}
	n.State = cluster.NodeDown
	n.DownSince, n.DownReason = at, reason
	n.ModifyIndex = idx
	st.putNode(n)

	ids := make([]cluster.StepID, 0, len(st.live[id]))
	for sid := range st.live[id] {
		ids = append(ids, sid)
	}
	slices.Sort(ids)
	for _, sid := range ids {
		old := st.steps[sid]
		s := cloneStep(old)
		s.ModifyIndex = idx
		lost := fmt.Sprintf("node %s lost (%s) with attempt %d %s", id, reason, s.Attempts, s.State)
		if s.Spec.Idempotent && s.Cancel == nil && s.Attempts < cluster.MaxAttempts {
			e := event(at, cluster.EventRequeued, "%s; re-queued as attempt %d", lost, s.Attempts+1)
			e.Attempt = s.Attempts + 1
			s.AddEvent(e)
			s.State, s.Node = cluster.StateQueued, ""
			s.Attempts++
			s.Phases = cluster.Phases{Queued: at}
			st.putStep(old, s)
			continue
		}
		s.State, s.TerminatedBy, s.EndedAt = cluster.StateLost, cluster.ByNodeLost, at
		switch {
		case s.Cancel != nil:
			s.Reason = lost + "; not re-run: a cancel was requested"
		case !s.Spec.Idempotent:
			s.Reason = lost + "; not re-run: the step is not idempotent (at most once)"
		default:
			s.Reason = fmt.Sprintf("%s; not re-run: %d attempts made", lost, s.Attempts)
		}
		s.AddEvent(event(at, cluster.EventLost, "%s", s.Reason))
		if s.Cancel.Pending() {
			s.Cancel.Unverified = fmt.Sprintf("node %s is down: the step's process could not be confirmed gone", id)
			s.AddEvent(event(at, cluster.EventCancelUnverified, "%s", s.Cancel.Unverified))
		}
		st.putStep(old, s)
	}
	return nil
}

// cloneStep returns a deep copy of s for an apply to change, with room
// for the event a change usually adds (AddEvent would copy them again).
func cloneStep(s *cluster.Step) *cluster.Step {
	shallow := *s
	shallow.Events = nil
	c := shallow.Clone()
	if len(s.Events) > 0 {
		c.Events = append(make([]cluster.Event, 0, len(s.Events)+1), s.Events...)
	}
	return &c
}

func event(at time.Time, kind, format string, args ...any) cluster.Event {
	return cluster.Event{Time: at, Kind: kind, Message: fmt.Sprintf(format, args...)}
}
