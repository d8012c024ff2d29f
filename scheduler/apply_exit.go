package scheduler

import (
	"fmt"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

func validateExit(r *cluster.ExitRecord) error {
	switch r.State {
	case cluster.StateExited, cluster.StateFailed, cluster.StateCancelled:
	default:
		return fmt.Errorf("step %s: exit state %q: want exited, failed or cancelled: %w", r.Step, r.State, ErrInvalid)
	}
	switch r.TerminatedBy {
	case cluster.ByExit, cluster.ByUser, cluster.ByTimeout, cluster.ByOOM, cluster.ByPlatform:
	default:
		return fmt.Errorf("step %s: terminated_by %q: %w", r.Step, r.TerminatedBy, ErrInvalid)
	}
	return nil
}

func describeExit(r *cluster.ExitRecord) string {
	switch {
	case r.State == cluster.StateFailed:
		return fmt.Sprintf("failed (%s): %s", r.TerminatedBy, r.Reason)
	case r.Reason != "":
		return fmt.Sprintf("%s with code %d (%s): %s", r.State, r.ExitCode, r.TerminatedBy, r.Reason)
	}
	return fmt.Sprintf("%s with code %d (%s)", r.State, r.ExitCode, r.TerminatedBy)
}

func (st *State) applyStepExit(idx uint64, c *cluster.StepExit) any {
	r := &c.Record
	old, s, err := st.step(r.Step)
	if err != nil {
		return err
	}
	if err := validateExit(r); err != nil {
		return err
	}
	late, err := report(s, c.Node, c.Attempt, r.State)
	if err != nil {
		return err
	}
	switch {
	case late || s.State == cluster.StateLost:
		// The step is not resurrected, but the exit is a fact worth
		// keeping: for an idempotent step it means an attempt given up
		// on did run to its end.
		s.AddEvent(event(c.At, cluster.EventLateReport, "attempt %d on node %s %s after it was declared lost",
			c.Attempt, c.Node, describeExit(r)))
		s.ModifyIndex = idx
		st.putStep(old, s)
		return nil
	case s.State.Terminal():
		if s.State == r.State && (s.ExitCode == nil || *s.ExitCode == r.ExitCode) {
			return nil // a repeated report
		}
		return transition(s, r.State)
	case !s.Live():
		return transition(s, r.State)
	}
	s.State, s.TerminatedBy, s.Reason, s.Cause, s.EndedAt = r.State, r.TerminatedBy, r.Reason, r.Cause, c.At
	if r.State != cluster.StateFailed {
		code := r.ExitCode
		s.ExitCode = &code
	}
	mergePhases(&s.Phases, r.Phases)
	if s.Phases.Exited.IsZero() {
		s.Phases.Exited = c.At
	}
	s.ModifyIndex = idx
	e := event(c.At, cluster.EventExited, "%s", describeExit(r))
	e.Exit = &api.ExitEvent{State: string(r.State), ExitCode: r.ExitCode, TerminatedBy: string(r.TerminatedBy), Cause: r.Cause}
	s.AddEvent(e)
	st.putStep(old, s)
	return nil
}

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
