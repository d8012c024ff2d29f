package scheduler

import (
	"fmt"

	"github.com/rodon-compute/rodon/cluster"
)

// applyRequestCancel records a user's request to cancel a step: a queued
// step is cancelled at once, a live one waits for its node's confirmation,
// a lost one's is unverified. A repeated request changes nothing.
func (st *State) applyRequestCancel(idx uint64, c *cluster.RequestCancel) any {
	old, s, err := st.step(c.Step)
	if err != nil {
		return err
	}
	if s.Cancel != nil {
		return nil // a repeated request; the first one's time stands
	}
	why := ""
	if c.Reason != "" {
		why = ": " + c.Reason
	}
	switch {
	case s.State == cluster.StateQueued:
		// Nothing ran, so nothing is left to confirm.
		s.Cancel = &cluster.Cancel{RequestedAt: c.At, ConfirmedAt: c.At}
		s.State, s.TerminatedBy, s.EndedAt = cluster.StateCancelled, cluster.ByUser, c.At
		s.Reason = "cancelled before it was placed" + why
		s.AddEvent(event(c.At, cluster.EventCancelRequested, "cancel requested%s", why))
		s.AddEvent(event(c.At, cluster.EventCancelConfirmed, "cancelled before it was placed: nothing ran"))
	case s.Live():
		s.Cancel = &cluster.Cancel{RequestedAt: c.At}
		s.AddEvent(event(c.At, cluster.EventCancelRequested, "cancel requested%s", why))
	case s.State == cluster.StateLost:
		s.Cancel = &cluster.Cancel{
			RequestedAt: c.At,
			Unverified:  fmt.Sprintf("node %s is down: the step's process could not be confirmed gone", s.Node),
		}
		s.AddEvent(event(c.At, cluster.EventCancelRequested, "cancel requested%s", why))
		s.AddEvent(event(c.At, cluster.EventCancelUnverified, "%s", s.Cancel.Unverified))
	default:
		return fmt.Errorf("step %s is %s: %w", s.ID, s.State, ErrTerminal)
	}
	s.ModifyIndex = idx
	st.putStep(old, s)
	return nil
}

// applyConfirmCancel records the node's answer to a cancel request:
// confirmed, or unverified with the reason.
func (st *State) applyConfirmCancel(idx uint64, c *cluster.ConfirmCancel) any {
	old, s, err := st.step(c.Step)
	if err != nil {
		return err
	}
	if s.Cancel == nil {
		return fmt.Errorf("step %s: no cancel was requested: %w", s.ID, ErrTransition)
	}
	if c.Attempt != s.Attempts || c.Node != s.Node {
		return fmt.Errorf("step %s: confirmation for attempt %d on node %s, but attempt %d is on node %q: %w",
			s.ID, c.Attempt, c.Node, s.Attempts, s.Node, ErrStale)
	}
	if !s.Cancel.ConfirmedAt.IsZero() {
		return nil // a repeated confirmation
	}
	switch s.State {
	case cluster.StateExited, cluster.StateFailed, cluster.StateCancelled:
		s.AddEvent(event(c.At, cluster.EventCancelConfirmed, "cancel confirmed: the process is gone"))
	case cluster.StateLost:
		s.AddEvent(event(c.At, cluster.EventCancelConfirmed,
			"cancel confirmed by node %s after it came back (was unverified: %s)", c.Node, s.Cancel.Unverified))
		s.Cancel.Unverified = ""
	default:
		return fmt.Errorf("step %s is %s: a cancel is confirmed only after the exit is recorded: %w", s.ID, s.State, ErrTransition)
	}
	s.Cancel.ConfirmedAt = c.At
	s.ModifyIndex = idx
	st.putStep(old, s)
	return nil
}
