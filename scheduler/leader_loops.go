package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

// Each pass of a leader loop reads the state, applies what is due, and
// returns when the next pass is due for the clock (zero: only on the next
// change of the state). A failed Apply is logged and retried on the next
// pass; after leadership is lost, the loops are stopped.

// placeQueued places the queued steps, oldest first, each on the node
// Place picks given the reservations so far. A step that no node could
// ever take fails (step_unplaceable); one that fits nowhere now waits for
// the next change of the state (a step ending, a node registering), and
// says why in a waiting event when the reason changed (steps_waiting, one
// entry for the pass).
func (s *Server) placeQueued(ctx context.Context) time.Time {
	st := s.fsm.State()
	var waits []cluster.Wait
	defer func() { s.recordWaits(ctx, waits) }()
	for _, step := range st.Steps(StepFilter{State: cluster.StateQueued}) {
		if ctx.Err() != nil {
			return time.Time{}
		}
		nodes, used, _ := st.Placement()
		node, err := Place(nodes, used, step.Spec)
		var ce *CapacityError
		switch {
		case errors.As(err, &ce) && ce.Unplaceable != nil:
			s.logger.Info("step unplaceable", "step", step.ID, "reason", ce.Reason)
			_, err := s.raft.Apply(ctx, cluster.StepUnplaceable{Step: step.ID, Attempt: step.Attempts, Cause: *ce.Unplaceable,
				Reason: ce.Reason, At: s.now()})
			if err != nil {
				s.loopError(ctx, "fail unplaceable step", err, "step", step.ID)
			}
			s.setPending(step.ID, "")
			continue
		case err != nil:
			// Capacity exhausted: retried when the state changes. The
			// reason is kept for the step's expiry, should it come.
			s.setPending(step.ID, err.Error())
			if ce != nil && ce.Wait != lastWait(&step) {
				msg := "waiting: " + ce.Reason
				if len(msg) > maxWaitMessage {
					msg = msg[:maxWaitMessage-3] + "..."
				}
				waits = append(waits, cluster.Wait{Step: step.ID, Attempt: step.Attempts, Reason: ce.Wait, Message: msg})
			}
			continue
		}
		s.setPending(step.ID, "")
		now := s.now()
		if _, err := s.raft.Apply(ctx, cluster.PlaceStep{Step: step.ID, Node: node, At: now}); err != nil {
			s.loopError(ctx, "place step", err, "step", step.ID, "node", node)
			continue
		}
		s.metrics.placement.Observe(now.Sub(step.Phases.Queued).Seconds())
	}
	return time.Time{}
}

// recordWaits records why the waiting steps wait, in entries of at most
// maxWaits.
func (s *Server) recordWaits(ctx context.Context, waits []cluster.Wait) {
	for len(waits) > 0 && ctx.Err() == nil {
		n := min(len(waits), maxWaits)
		if _, err := s.raft.Apply(ctx, cluster.StepsWaiting{Waits: waits[:n], At: s.now()}); err != nil {
			s.loopError(ctx, "record why steps wait", err, "steps", n)
			return
		}
		waits = waits[n:]
	}
}

// checkStarts takes back the attempts their node did not start in time:
// a step still placed (its node did not report it starting) StartTimeout
// after its placement, or still starting (its sandbox not running)
// CreateTimeout after it. An idempotent one is queued again, any other
// fails (start_timeout).
func (s *Server) checkStarts(ctx context.Context) time.Time {
	st := s.fsm.State()
	var next time.Time
	for _, b := range []struct {
		state cluster.StepState
		bound time.Duration
		what  string
	}{
		{cluster.StatePlaced, s.cfg.StartTimeout, "report it starting"},
		{cluster.StateStarting, s.cfg.CreateTimeout, "start its sandbox"},
	} {
		for _, step := range st.Steps(StepFilter{State: b.state}) {
			due := step.Phases.Placed.Add(b.bound)
			now := s.now()
			if now.Before(due) {
				next = earliest(next, due)
				continue
			}
			reason := fmt.Sprintf("node %s did not %s within %v of its placement (attempt %d)", step.Node, b.what, b.bound, step.Attempts)
			s.logger.Warn("step not started in time", "step", step.ID, "node", step.Node, "reason", reason)
			if _, err := s.raft.Apply(ctx, cluster.StartTimeout{Step: step.ID, Node: step.Node, Attempt: step.Attempts,
				State: b.state, Reason: reason, At: now}); err != nil {
				s.loopError(ctx, "take back a step not started", err, "step", step.ID)
				next = earliest(next, now.Add(time.Second))
			}
		}
	}
	return next
}

// compactSteps removes from the replicated state the terminal steps that
// ended more than StepRetention ago, maxCompact per compact_steps entry
// (each entry wakes the loop for the next), and is due again when the
// oldest remaining one's retention ends.
func (s *Server) compactSteps(ctx context.Context) time.Time {
	oldest, ok := s.fsm.State().OldestEnded()
	if !ok {
		return time.Time{} // nothing ended: a change of the state wakes the loop
	}
	now := s.now()
	before := now.Add(-s.cfg.StepRetention)
	if !oldest.Before(before) {
		return oldest.Add(s.cfg.StepRetention).Add(time.Millisecond)
	}
	res, err := s.raft.Apply(ctx, cluster.CompactSteps{Before: before, Limit: maxCompact, At: now})
	if err != nil {
		s.loopError(ctx, "compact steps", err)
		return now.Add(time.Second)
	}
	n := 0
	if r, ok := res.(*CompactResult); ok {
		n = r.Dropped
	}
	s.metrics.compacted.Add(float64(n))
	s.metrics.compactionRun.Set(float64(now.UnixNano()) / 1e9)
	s.logger.Info("terminal steps compacted", "steps", n, "ended_before", before, "retention", s.cfg.StepRetention)
	return time.Time{}
}

// checkNodes declares down the nodes silent for longer than the TTL. A
// node's silence counts from its last heartbeat, or from when this member
// became the leader (since), whichever is later: a new leader gives every
// node a full TTL, since it cannot know what the previous one heard.
func (s *Server) checkNodes(ctx context.Context, since time.Time) time.Time {
	ttl := s.cfg.NodeTTL
	var next time.Time
	for _, n := range s.fsm.State().Nodes() {
		if n.State == cluster.NodeDown {
			continue
		}
		last := later(n.LastHeartbeat, since)
		due := last.Add(ttl)
		now := s.now()
		if now.Before(due) {
			next = earliest(next, due)
			continue
		}
		reason := fmt.Sprintf("no heartbeat for %v (ttl %v)", now.Sub(last).Round(time.Millisecond), ttl)
		s.logger.Warn("node lost", "node", n.ID, "reason", reason)
		if _, err := s.raft.Apply(ctx, cluster.MarkNodeLost{Node: n.ID, Reason: reason, At: now}); err != nil {
			s.loopError(ctx, "mark node lost", err, "node", n.ID)
			next = earliest(next, now.Add(time.Second))
		}
	}
	return next
}

// checkDrains cancels the live steps of draining nodes whose deadline has
// passed.
func (s *Server) checkDrains(ctx context.Context) time.Time {
	st := s.fsm.State()
	var next time.Time
	for _, n := range st.Nodes() {
		if n.Drain == nil || n.Drain.Deadline.IsZero() || n.State == cluster.NodeDown {
			continue
		}
		now := s.now()
		if now.Before(n.Drain.Deadline) {
			next = earliest(next, n.Drain.Deadline)
			continue
		}
		for _, step := range st.Assignments(n.ID) {
			if step.Cancel != nil {
				continue
			}
			reason := fmt.Sprintf("node %s was drained and its deadline %s passed", n.ID, n.Drain.Deadline.Format(time.RFC3339))
			if _, err := s.raft.Apply(ctx, cluster.RequestCancel{Step: step.ID, Reason: reason, At: now}); err != nil {
				s.loopError(ctx, "cancel step at drain deadline", err, "step", step.ID, "node", n.ID)
				next = earliest(next, now.Add(time.Second))
			}
		}
	}
	return next
}

// expireQueued ends the steps queued for longer than QueueTimeout.
func (s *Server) expireQueued(ctx context.Context) time.Time {
	var next time.Time
	for _, step := range s.fsm.State().Steps(StepFilter{State: cluster.StateQueued}) {
		due := step.Phases.Queued.Add(s.cfg.QueueTimeout)
		now := s.now()
		if now.Before(due) {
			next = earliest(next, due)
			continue
		}
		reason := fmt.Sprintf("not placed within the queue timeout of %v", s.cfg.QueueTimeout)
		if why := s.pendingReason(step.ID); why != "" {
			reason += ": " + why
		}
		if _, err := s.raft.Apply(ctx, cluster.Expire{Step: step.ID, Reason: reason, At: now}); err != nil {
			s.loopError(ctx, "expire step", err, "step", step.ID)
			next = earliest(next, now.Add(time.Second))
			continue
		}
		s.setPending(step.ID, "")
	}
	return next
}

// setPending records why step id could not be placed; "" forgets it.
func (s *Server) setPending(id cluster.StepID, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if reason == "" {
		delete(s.pending, id)
		return
	}
	if s.pending == nil {
		s.pending = make(map[cluster.StepID]string)
	}
	s.pending[id] = reason
}

func (s *Server) pendingReason(id cluster.StepID) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending[id]
}

// loopError logs a failed Apply of a leader loop: not at all when the loop
// is stopping or the member no longer leads, at debug level when the state
// changed under the pass.
func (s *Server) loopError(ctx context.Context, what string, err error, args ...any) {
	switch {
	case ctx.Err() != nil || errors.Is(err, ErrNotLeader) || errors.Is(err, ErrStopped):
	case errors.Is(err, ErrTransition) || errors.Is(err, ErrTerminal) || errors.Is(err, ErrNotFound) ||
		errors.Is(err, ErrCapacityExhausted) || errors.Is(err, ErrUnavailable):
		// The state changed since the pass read it; the next pass sees it.
		s.logger.Debug(what, append(args, "error", err)...)
	default:
		s.logger.Warn(what, append(args, "error", err)...)
	}
}

// earliest returns the earlier of two times, where zero means none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}
