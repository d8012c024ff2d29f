package scheduler

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// TestAssignmentsAsChanges plays an agent that asks for changes: the
// first answer holds every live step, the next ones only what changed
// (with the live attempts), and a long poll is not woken by the changes
// of another node. An agent that does not ask gets every live step.
func TestAssignmentsAsChanges(t *testing.T) {
	c := newServerCluster(t, 1, nil)
	cl := c.client()
	a := newAgent(t, cl, "n1", 4, 8*gib)
	newAgent(t, cl, "n2", 4, 8*gib)
	ctx := t.Context()
	ids := func(as client.Assignments) []string {
		out := []string{}
		for _, s := range as.Steps {
			out = append(out, string(s.ID))
		}
		return out
	}
	submitOn := func(node cluster.NodeID) string {
		t.Helper()
		req := stepRequest(false)
		req.Node = string(node)
		s, err := cl.SubmitStep(ctx, req)
		if err != nil {
			t.Fatalf("SubmitStep() = %v", err)
		}
		waitStep(t, cl, s.ID, "placed", stateIs("placed"))
		return s.ID
	}

	s1 := submitOn("n1")
	first, err := cl.AssignmentChanges(ctx, "n1", 0, 0)
	if err != nil || first.Changes || !cmp.Equal(ids(first), []string{s1}) {
		t.Fatalf("AssignmentChanges(n1, 0) = %+v, %v; want every live step (%s), not as changes", first, err, s1)
	}
	// Steps come without their events, which stay in the state.
	if ev := first.Steps[0].Events; len(ev) != 0 {
		t.Errorf("AssignmentChanges(n1, 0) step %s has events %v, want none", s1, ev)
	}
	if st, err := cl.Step(ctx, s1); err != nil || len(st.Events) == 0 {
		t.Errorf("Step(%s) = %d events, %v; want its events kept", s1, len(st.Events), err)
	}

	// A long poll: the other node's changes do not end it, this node's do.
	polled := make(chan client.Assignments, 1)
	go func() {
		got, err := cl.AssignmentChanges(ctx, "n1", first.Index, 10*time.Second)
		if err != nil {
			t.Errorf("AssignmentChanges(n1, %d) = %v", first.Index, err)
		}
		polled <- got
	}()
	submitOn("n2")
	select {
	case got := <-polled:
		t.Fatalf("the long poll of n1 ended on a change of n2: %+v", got)
	case <-time.After(200 * time.Millisecond):
	}
	s2 := submitOn("n1")
	got := <-polled
	wantLive := []cluster.StepAttempt{{Step: cluster.StepID(s1), Attempt: 1}, {Step: cluster.StepID(s2), Attempt: 1}}
	slices.SortFunc(wantLive, func(a, b cluster.StepAttempt) int { return strings.Compare(string(a.Step), string(b.Step)) }) // by id
	if !got.Changes || !cmp.Equal(ids(got), []string{s2}) || !cmp.Equal(got.Live, wantLive) {
		t.Errorf("AssignmentChanges(n1, %d) = %+v; want only %s, as changes, live %v", first.Index, got, s2, wantLive)
	}

	// s1 ends: it leaves the live list, and there is no step to send.
	a.run(s1, 1)
	a.exit(s1, 1, cluster.StateExited, 0, cluster.ByExit)
	a.run(s2, 1)
	next, err := cl.AssignmentChanges(ctx, "n1", got.Index, 0)
	wantLive = []cluster.StepAttempt{{Step: cluster.StepID(s2), Attempt: 1}}
	if err != nil || !next.Changes || !cmp.Equal(ids(next), []string{s2}) || next.Steps[0].State != cluster.StateRunning || !cmp.Equal(next.Live, wantLive) {
		t.Errorf("AssignmentChanges(n1, %d) after s1 ended = %+v, %v; want %s running, live %v", got.Index, next, err, s2, wantLive)
	}

	// The old answer for an agent that does not ask.
	full, err := cl.Assignments(ctx, "n1", got.Index, 0)
	if err != nil || full.Changes || full.Live != nil || !cmp.Equal(ids(full), []string{s2}) {
		t.Errorf("Assignments(n1, %d) = %+v, %v; want every live step (%s), not as changes", got.Index, full, err, s2)
	}
	// A base ahead of the state: every live step, once the wait ends.
	ahead, err := cl.AssignmentChanges(ctx, "n1", next.Index+100, 50*time.Millisecond)
	if err != nil || ahead.Changes || !cmp.Equal(ids(ahead), []string{s2}) {
		t.Errorf("AssignmentChanges(n1, ahead) = %+v, %v; want every live step, not as changes", ahead, err)
	}
}
