package scheduler

import (
	"cmp"
	"fmt"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

// stepRank orders the states an agent's reports move a step through.
var stepRank = map[cluster.StepState]int{
	cluster.StatePlaced:   1,
	cluster.StateStarting: 2,
	cluster.StateRunning:  3,
}

func (st *State) step(id cluster.StepID) (old, s *cluster.Step, err error) {
	old, ok := st.steps[id]
	if !ok {
		return nil, nil, fmt.Errorf("step %s: %w", id, ErrNotFound)
	}
	return old, cloneStep(old), nil
}

func transition(s *cluster.Step, to cluster.StepState) error {
	if s.State.Terminal() {
		return fmt.Errorf("step %s is %s: %w", s.ID, s.State, ErrTerminal)
	}
	return fmt.Errorf("step %s: %s->%s: %w", s.ID, s.State, to, ErrTransition)
}

// report checks that an agent's report, which would move the step to
// state to, concerns the step's current attempt. It returns late=true for
// an earlier attempt, which the caller records as an event only,
// ErrTransition for a queued step and ErrStale for a report about an
// attempt or node the step does not have.
func report(s *cluster.Step, node cluster.NodeID, attempt int, to cluster.StepState) (late bool, err error) {
	switch {
	case attempt > 0 && attempt < s.Attempts:
		return true, nil
	case attempt == s.Attempts && s.State == cluster.StateQueued:
		return false, transition(s, to)
	case attempt != s.Attempts || node != s.Node:
		return false, fmt.Errorf("step %s: report for attempt %d on node %s, but attempt %d is on node %q: %w",
			s.ID, attempt, node, s.Attempts, s.Node, ErrStale)
	}
	return false, nil
}

func (st *State) applySubmitStep(idx uint64, c *cluster.SubmitStep) any {
	if err := cluster.ValidateStepID(c.Step); err != nil {
		return fmt.Errorf("%w: %w", err, ErrInvalid)
	}
	if err := c.Spec.Validate(); err != nil {
		return fmt.Errorf("step %s: %w: %w", c.Step, err, ErrInvalid)
	}
	if len(c.Spec.Env) > 0 || c.Spec.EnvError != "" {
		return fmt.Errorf("step %s: plaintext environment values are never replicated: the leader seals them: %w", c.Step, ErrInvalid)
	}
	if plaintextTicket(c.Spec) {
		return fmt.Errorf("step %s: secrets tickets are replicated sealed only (spec.secrets.sealed_ticket): the leader seals them: %w", c.Step, ErrInvalid)
	}
	if c.Spec.WorkspaceAccess != nil || c.Spec.LibraryAccess != nil {
		return fmt.Errorf("step %s: workspace URLs are never replicated: members make them for assignments: %w", c.Step, ErrInvalid)
	}
	if _, ok := st.steps[c.Step]; ok {
		return fmt.Errorf("step %s: %w", c.Step, ErrExists)
	}
	s := &cluster.Step{
		ID:          c.Step,
		Spec:        c.Spec,
		State:       cluster.StateQueued,
		Attempts:    1,
		Phases:      cluster.Phases{Queued: c.At},
		CreateIndex: idx,
		ModifyIndex: idx,
	}
	s.AddEvent(event(c.At, cluster.EventQueued, "queued"))
	if c.Unplaceable != nil {
		// The leader found that no node could ever take it.
		failUnplaceable(s, c.Unplaceable, c.Reason, c.At)
	}
	st.putStep(nil, s)
	return nil
}

func (st *State) applyPlaceStep(idx uint64, c *cluster.PlaceStep) any {
	old, s, err := st.step(c.Step)
	if err != nil {
		return err
	}
	if s.State != cluster.StateQueued {
		return transition(s, cluster.StatePlaced)
	}
	n, ok := st.nodes[c.Node]
	if !ok {
		return fmt.Errorf("node %s: %w", c.Node, ErrNotFound)
	}
	switch checkFit(n, st.usage[n.ID], s.Spec) {
	case fitNotReady:
		return fmt.Errorf("node %s is %s: %w", n.ID, n.State, ErrUnavailable)
	case fitTooSmall:
		return &CapacityError{Reason: fmt.Sprintf("node %s is too small for step %s", n.ID, s.ID), Unsatisfiable: true}
	case fitFull:
		return &CapacityError{Reason: fmt.Sprintf("node %s has too little free for step %s", n.ID, s.ID), RetryAfter: RetryResources}
	case fitStarting:
		return &CapacityError{Reason: fmt.Sprintf("node %s is starting as many steps as it may", n.ID), RetryAfter: RetryStarting}
	}
	s.State, s.Node = cluster.StatePlaced, c.Node
	s.Phases.Placed = c.At
	s.ModifyIndex = idx
	e := event(c.At, cluster.EventPlaced, "placed on node %s (attempt %d)", c.Node, s.Attempts)
	e.Attempt = s.Attempts
	s.AddEvent(e)
	st.putStep(old, s)
	return nil
}

func (st *State) applyStepPhase(idx uint64, c *cluster.StepPhase) any {
	old, s, err := st.step(c.Step)
	if err != nil {
		return err
	}
	if c.State != "" && c.State != cluster.StateStarting && c.State != cluster.StateRunning {
		return fmt.Errorf("step %s: phase state %q: want starting or running: %w", c.Step, c.State, ErrInvalid)
	}
	late, err := report(s, c.Node, c.Attempt, cmp.Or(c.State, s.State))
	if err != nil {
		return err
	}
	if late {
		s.AddEvent(event(c.At, cluster.EventLateReport, "attempt %d on node %s reported phase %s", c.Attempt, c.Node, phaseName(c)))
		s.ModifyIndex = idx
		st.putStep(old, s)
		return nil
	}
	if c.State != "" {
		switch {
		case s.State == cluster.StateLost:
			s.AddEvent(event(c.At, cluster.EventLateReport, "node %s reported the lost step %s", c.Node, c.State))
			c.State = ""
		case s.State.Terminal() || stepRank[c.State] < stepRank[s.State]:
			return transition(s, c.State)
		case c.State == s.State:
			// A repeated report.
		case c.State == cluster.StateStarting:
			s.State = c.State
			s.AddEvent(event(c.At, cluster.EventStarting, "starting on node %s", c.Node))
		default:
			s.State = c.State
			s.AddEvent(event(c.At, cluster.EventStarted, "running on node %s", c.Node))
		}
	}
	if !c.Phases.CleanedUp.IsZero() && s.Phases.CleanedUp.IsZero() {
		s.AddEvent(event(c.Phases.CleanedUp, cluster.EventCleanedUp, "sandbox cleaned up on node %s", c.Node))
	}
	mergePhases(&s.Phases, c.Phases)
	s.ModifyIndex = idx
	st.putStep(old, s)
	return nil
}

func phaseName(c *cluster.StepPhase) string {
	if c.State != "" {
		return string(c.State)
	}
	return "times"
}

// mergePhases records the times of from that p does not have yet; the
// first report of a phase wins.
func mergePhases(p *cluster.Phases, from cluster.Phases) {
	for _, f := range []struct {
		dst *time.Time
		src time.Time
	}{
		{&p.Queued, from.Queued}, {&p.Placed, from.Placed}, {&p.Created, from.Created},
		{&p.Started, from.Started}, {&p.FirstOutput, from.FirstOutput},
		{&p.Exited, from.Exited}, {&p.CleanedUp, from.CleanedUp},
	} {
		if f.dst.IsZero() {
			*f.dst = f.src
		}
	}
}

func (st *State) applyExpire(idx uint64, c *cluster.Expire) any {
	old, s, err := st.step(c.Step)
	if err != nil {
		return err
	}
	if s.State != cluster.StateQueued {
		return transition(s, cluster.StateExpired)
	}
	s.State, s.TerminatedBy, s.EndedAt = cluster.StateExpired, cluster.ByTimeout, c.At
	s.Reason = c.Reason
	if s.Reason == "" {
		s.Reason = "not placed before the queue deadline"
	}
	s.ModifyIndex = idx
	s.AddEvent(event(c.At, cluster.EventExpired, "%s", s.Reason))
	st.putStep(old, s)
	return nil
}

func (st *State) applyStepEvents(idx uint64, c *cluster.StepEvents) any {
	old, s, err := st.step(c.Step)
	if err != nil {
		return err
	}
	if len(c.Events) > cluster.MaxEvents {
		return fmt.Errorf("step %s: %d events in one report, at most %d: %w", c.Step, len(c.Events), cluster.MaxEvents, ErrInvalid)
	}
	late, err := report(s, c.Node, c.Attempt, s.State)
	if err != nil {
		return err
	}
	for _, e := range c.Events {
		if late {
			e.Message = fmt.Sprintf("attempt %d: %s", c.Attempt, e.Message)
		}
		s.AddEvent(e)
	}
	if r := st.ws.revisions[s.Revision]; r != nil {
		alignFilesChanged(s, r)
	}
	s.ModifyIndex = idx
	st.putStep(old, s)
	return nil
}
