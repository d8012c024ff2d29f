package scheduler

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/agentd/agentdtest"
	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// No state without a deadline (issue 15, "Done means" 7): a step that no
// node could ever take fails at once with the typed capacity error, and a
// step whose node never starts it is placed again or fails within its
// bound.

// TestUnplaceableAtSubmission submits a step asking for more memory than
// any node has: the answer, within a second, is 422 unplaceable naming
// what is missing, and the step is recorded failed with the typed cause.
func TestUnplaceableAtSubmission(t *testing.T) {
	c := newServerCluster(t, 3, nil)
	cl := c.client(c.follower()) // forwarded to the leader, answered as it is
	newAgent(t, cl, "n1", 4, 8*gib)
	newAgent(t, cl, "n2", 2, 22*gib+gib/2)
	start := time.Now()
	_, err := cl.SubmitStep(t.Context(), api.StepRequest{ID: "big", Image: "base", Args: []string{"true"}, CPU: 1, MemoryBytes: 64 * gib})
	elapsed := time.Since(start)
	var e *client.Error
	if !client.IsCode(err, api.CodeUnplaceable) || !strings.Contains(err.Error(), "no node has 64GiB of memory; the largest has 22.5GiB") {
		t.Fatalf("SubmitStep(64GiB) = %v, want 422 unplaceable saying what is missing", err)
	}
	if errors.As(err, &e); e.Status != 422 {
		t.Errorf("SubmitStep(64GiB) status %d, want 422", e.Status)
	}
	if elapsed > time.Second {
		t.Errorf("SubmitStep(64GiB) answered after %v, want within a second", elapsed)
	}
	s, err := cl.Step(t.Context(), "big")
	if err != nil {
		t.Fatal(err)
	}
	want := &api.Unplaceable{Missing: []api.Shortfall{{Resource: "memory", Want: 64 * gib, Largest: 22*gib + gib/2}}}
	if s.State != "failed" || s.TerminatedBy != "platform" || s.EndedAt.IsZero() || !strings.Contains(s.Reason, "64GiB") ||
		s.Unplaceable == nil || s.Unplaceable.Missing[0] != want.Missing[0] {
		t.Errorf("step big = %+v, want failed by platform with the cause %+v", s, want)
	}
	if e := s.Events[len(s.Events)-1]; e.Kind != cluster.EventUnplaceable || e.Unplaceable == nil || e.Unplaceable.Resource != "memory" {
		t.Errorf("last event %+v, want unplaceable, reason memory", e)
	}
	// A node binding to no registered node is as unplaceable.
	_, err = cl.SubmitStep(t.Context(), api.StepRequest{Image: "base", Args: []string{"true"}, CPU: 1, MemoryBytes: gib, Node: "n9"})
	if !client.IsCode(err, api.CodeUnplaceable) || !strings.Contains(err.Error(), "node n9, which is not registered") {
		t.Errorf("SubmitStep(node n9) = %v, want unplaceable naming n9", err)
	}
}

// TestUnplaceableWhenTheFleetIsKnown: a step submitted before any node
// waits, saying why; when the only node that registers is too small, the
// placement loop fails it within a second.
func TestUnplaceableWhenTheFleetIsKnown(t *testing.T) {
	c := newServerCluster(t, 1, nil)
	cl := c.client()
	s, err := cl.SubmitStep(t.Context(), api.StepRequest{Image: "base", Args: []string{"true"}, CPU: 8, MemoryBytes: gib})
	if err != nil {
		t.Fatalf("SubmitStep() with no node = %v, want it queued", err)
	}
	s = waitStep(t, cl, s.ID, "a waiting event", func(s api.Step) bool { return lastEvent(s).Kind == cluster.EventWaiting })
	if e := lastEvent(s); e.Waiting == nil || e.Waiting.Reason != cluster.WaitNoNode || !strings.Contains(e.Message, "no node is registered") {
		t.Errorf("waiting event %+v, want no_node", e)
	}
	start := time.Now()
	newAgent(t, cl, "n1", 4, 8*gib)
	s = waitStep(t, cl, s.ID, "failed", stateIs("failed"))
	if d := time.Since(start); d > time.Second {
		t.Errorf("failed %v after the node registered, want within a second", d)
	}
	if s.Unplaceable == nil || len(s.Unplaceable.Missing) != 1 || s.Unplaceable.Missing[0].Resource != "cpu" ||
		!strings.Contains(s.Reason, "no node has 8 cores; the largest has 4") {
		t.Errorf("step = %+v, want failed, cpu missing", s)
	}
}

func lastEvent(s api.Step) api.Event {
	if len(s.Events) == 0 {
		return api.Event{}
	}
	return s.Events[len(s.Events)-1]
}

// runFakeAgent runs agentdtest's fake agent, which runs every step it is
// given in no time, until the test ends.
func runFakeAgent(t *testing.T, cl *client.Client, id cluster.NodeID, cpu float64, mem int64) *agentdtest.FakeAgent {
	t.Helper()
	a := &agentdtest.FakeAgent{Node: id, Capacity: cluster.Resources{CPU: cpu, MemoryBytes: mem}, Client: cl}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = a.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	waitFor(t, "node "+string(id)+" registered", func() bool {
		_, err := cl.Node(t.Context(), string(id))
		return err == nil
	})
	return a
}

// TestStartTimeout: a node that never starts its steps (it heartbeats but
// reports nothing) loses them within the bound: an idempotent step is
// placed again, and runs on another node; one that runs at most once
// fails with the reason; a step whose sandbox is never started fails after
// the create timeout.
func TestStartTimeout(t *testing.T) {
	const startTimeout, createTimeout = 400 * time.Millisecond, 800 * time.Millisecond
	c := newServerCluster(t, 1, func(cfg *Config) { cfg.StartTimeout, cfg.CreateTimeout = startTimeout, createTimeout })
	cl := c.client()
	stuck := newAgent(t, cl, "stuck", 4, 16*gib)

	// Idempotent: placed on the stuck node (the most free memory), then,
	// once a working node exists, placed there and run.
	idem, err := cl.SubmitStep(t.Context(), api.StepRequest{ID: "idem", Image: "base", Args: []string{"true"}, CPU: 1, MemoryBytes: gib, Idempotent: true})
	if err != nil {
		t.Fatal(err)
	}
	idem = waitStep(t, cl, idem.ID, "placed", stateIs("placed"))
	if idem.Node != "stuck" {
		t.Fatalf("step placed on %s, want stuck", idem.Node)
	}
	placedAt := time.Now()
	runFakeAgent(t, cl, "works", 4, 32*gib)
	idem = waitStep(t, cl, idem.ID, "exited", stateIs("exited"))
	if d := time.Since(placedAt); d > startTimeout+2*time.Second {
		t.Errorf("re-placed and run %v after its first placement, want within %v and 2s", d, startTimeout)
	}
	if idem.Node != "works" || idem.Attempts != 2 || !hasEvent(idem, cluster.EventNotStarted, "node stuck did not report it starting within 400ms") ||
		!hasEvent(idem, cluster.EventRequeued, "attempt 2") {
		t.Errorf("idempotent step = %+v, want run on works as attempt 2 after not_started and requeued events", idem)
	}

	// At most once: failed, saying why.
	once, err := cl.SubmitStep(t.Context(), api.StepRequest{ID: "once", Image: "base", Args: []string{"true"}, CPU: 1, MemoryBytes: gib, Node: "stuck"})
	if err != nil {
		t.Fatal(err)
	}
	once = waitStep(t, cl, once.ID, "failed", stateIs("failed"))
	if once.TerminatedBy != "platform" || once.Attempts != 1 ||
		!strings.Contains(once.Reason, "node stuck did not report it starting within 400ms of its placement (attempt 1); not re-run: the step is not idempotent") {
		t.Errorf("step run at most once = %+v, want failed by platform with the reason", once)
	}
	if d := once.EndedAt.Sub(once.Phases.Placed); d < startTimeout || d > startTimeout+2*time.Second {
		t.Errorf("failed %v after its placement, want %v and at most 2s more", d, startTimeout)
	}

	// Starting, never running: failed after the create timeout.
	slow, err := cl.SubmitStep(t.Context(), api.StepRequest{ID: "slow", Image: "base", Args: []string{"true"}, CPU: 1, MemoryBytes: gib, Node: "stuck"})
	if err != nil {
		t.Fatal(err)
	}
	placed := waitStep(t, cl, slow.ID, "placed", stateIs("placed"))
	stuck.phase("slow", 1, cluster.StateStarting, cluster.Phases{Created: time.Now()})
	// Past the start bound, not yet the create bound: the loop's next
	// pass is due at the create bound, not at once (it would spin).
	time.Sleep(time.Until(placed.Phases.Placed.Add(startTimeout + 100*time.Millisecond)))
	if next := c.waitLeader().srv.checkStarts(t.Context()); !next.After(time.Now()) {
		t.Errorf("checkStarts() with a step starting for longer than the start timeout = %v, want a time to come (its create deadline)", next)
	}
	slow = waitStep(t, cl, slow.ID, "failed", stateIs("failed"))
	if d := slow.EndedAt.Sub(slow.Phases.Placed); d < createTimeout || d > createTimeout+2*time.Second ||
		!strings.Contains(slow.Reason, "did not start its sandbox within 800ms") {
		t.Errorf("starting step = %+v, failed %v after its placement; want failed after %v, saying so", slow, d, createTimeout)
	}
}

func hasEvent(s api.Step, kind, text string) bool {
	for _, e := range s.Events {
		if e.Kind == kind && strings.Contains(e.Message, text) {
			return true
		}
	}
	return false
}
