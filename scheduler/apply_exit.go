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
	var res any
	if c.Commit != nil {
		// The revision is committed with the exit, or not at all: the
		// exit applies either way (see ExitResult).
		rev, err := st.commitExit(idx, s, c.Commit)
		if err != nil {
			res = &ExitResult{Refused: err}
		} else {
			s.Revision = rev.ID
			alignFilesChanged(s, rev)
		}
	}
	st.putStep(old, s)
	return res
}

// commitExit commits the revision a step's exit carries.
func (st *State) commitExit(idx uint64, s *cluster.Step, c *cluster.CommitRevision) (*cluster.Revision, error) {
	if c.Revision.Step != string(s.ID) || c.Revision.Workspace != s.Spec.Workspace {
		return nil, fmt.Errorf("step %s: its exit commits revision %s of step %q in workspace %q, not of the step's workspace %q: %w",
			s.ID, c.Revision.ID, c.Revision.Step, c.Revision.Workspace, s.Spec.Workspace, ErrInvalid)
	}
	if s.Spec.WorkspaceReadOnly {
		return nil, fmt.Errorf("step %s: its exit commits revision %s, but its workspace is read-only: %w", s.ID, c.Revision.ID, ErrInvalid)
	}
	if err := checkRevision(c); err != nil {
		return nil, err
	}
	return st.commitRevision(idx, c)
}
