package scheduler

import (
	"fmt"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// The outcomes of placement that are not a placement: a step no node
// could ever take fails at once, a step that waits says why, and an
// attempt its node does not start in time is taken back. The leader
// decides (placement.go, leader_loops.go); these applies record it.

// failUnplaceable makes s, a queued step, failed because no node could
// ever take it, with the cause u.
func failUnplaceable(s *cluster.Step, u *cluster.Unplaceable, reason string, at time.Time) {
	if reason == "" {
		reason = "no node could ever take the step"
	}
	s.State, s.TerminatedBy, s.EndedAt = cluster.StateFailed, cluster.ByPlatform, at
	s.Reason = reason
	s.Unplaceable = u.Clone()
	e := event(at, cluster.EventUnplaceable, "%s", reason)
	e.Unplaceable = &api.NotPlaceable{Resource: unplaceableKind(u)}
	s.AddEvent(e)
}

func (st *State) applyStepUnplaceable(idx uint64, c *cluster.StepUnplaceable) any {
	old, s, err := st.step(c.Step)
	if err != nil {
		return err
	}
	if s.State != cluster.StateQueued || c.Attempt != s.Attempts {
		return fmt.Errorf("step %s is %s (attempt %d), not queued as attempt %d: %w", s.ID, s.State, s.Attempts, c.Attempt, ErrTransition)
	}
	failUnplaceable(s, &c.Cause, c.Reason, c.At)
	s.ModifyIndex = idx
	st.putStep(old, s)
	return nil
}

// Bounds of a waiting event, which the leader writes.
const (
	maxWaitReason  = 64
	maxWaitMessage = 1024
	maxWaits       = 1000
)

// lastWait returns the reason of the latest waiting event of s since it
// was (re)queued; "" if it has none.
func lastWait(s *cluster.Step) string {
	for i := len(s.Events) - 1; i >= 0; i-- {
		switch e := s.Events[i]; e.Kind {
		case cluster.EventWaiting:
			if e.Waiting != nil {
				return e.Waiting.Reason
			}
			return ""
		case cluster.EventQueued, cluster.EventRequeued:
			return ""
		}
	}
	return ""
}

func (st *State) applyStepsWaiting(idx uint64, c *cluster.StepsWaiting) any {
	if len(c.Waits) > maxWaits {
		return fmt.Errorf("%d waits in one entry, at most %d: %w", len(c.Waits), maxWaits, ErrInvalid)
	}
	for _, w := range c.Waits {
		if w.Reason == "" || len(w.Reason) > maxWaitReason || len(w.Message) > maxWaitMessage {
			return fmt.Errorf("step %s: wait reason %q: want 1-%d bytes, and a message of at most %d: %w",
				w.Step, w.Reason, maxWaitReason, maxWaitMessage, ErrInvalid)
		}
	}
	for _, w := range c.Waits {
		old, ok := st.steps[w.Step]
		if !ok || old.State != cluster.StateQueued || old.Attempts != w.Attempt || lastWait(old) == w.Reason {
			continue // placed, ended or gone meanwhile, or already said
		}
		s := cloneStep(old)
		e := event(c.At, cluster.EventWaiting, "%s", w.Message)
		e.Waiting = &api.Waiting{Reason: w.Reason}
		s.AddEvent(e)
		s.ModifyIndex = idx
		st.putStep(old, s)
	}
	return nil
}

func (st *State) applyStartTimeout(idx uint64, c *cluster.StartTimeout) any {
	old, s, err := st.step(c.Step)
	if err != nil {
		return err
	}
	switch {
	case c.State != cluster.StatePlaced && c.State != cluster.StateStarting:
		return fmt.Errorf("step %s: start timeout in state %q: want placed or starting: %w", s.ID, c.State, ErrInvalid)
	case s.State != c.State || s.Attempts != c.Attempt || s.Node != c.Node:
		return fmt.Errorf("step %s is %s (attempt %d on node %q), not %s as attempt %d on node %s: %w",
			s.ID, s.State, s.Attempts, s.Node, c.State, c.Attempt, c.Node, ErrTransition)
	}
	reason := c.Reason
	if reason == "" {
		reason = fmt.Sprintf("node %s did not start attempt %d", c.Node, c.Attempt)
	}
	s.AddEvent(event(c.At, cluster.EventNotStarted, "%s", reason))
	s.ModifyIndex = idx
	if s.Spec.Idempotent && s.Cancel == nil && s.Attempts < cluster.MaxAttempts {
		e := event(c.At, cluster.EventRequeued, "re-queued as attempt %d", s.Attempts+1)
		e.Attempt = s.Attempts + 1
		s.AddEvent(e)
		s.State, s.Node = cluster.StateQueued, ""
		s.Attempts++
		s.Phases = cluster.Phases{Queued: c.At}
		st.putStep(old, s)
		return nil
	}
	s.State, s.TerminatedBy, s.EndedAt = cluster.StateFailed, cluster.ByPlatform, c.At
	switch {
	case s.Cancel != nil:
		s.Reason = reason + "; not re-run: a cancel was requested"
	case !s.Spec.Idempotent:
		s.Reason = reason + "; not re-run: the step is not idempotent (at most once)"
	default:
		s.Reason = fmt.Sprintf("%s; not re-run: %d attempts made", reason, s.Attempts)
	}
	if s.Cancel.Pending() {
		s.Cancel.Unverified = fmt.Sprintf("node %s never started the step nor confirmed it gone", c.Node)
		s.AddEvent(event(c.At, cluster.EventCancelUnverified, "%s", s.Cancel.Unverified))
	}
	st.putStep(old, s)
	return nil
}
