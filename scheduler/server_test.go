package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/scheduler/client"
)

func stepRequest(idempotent bool) api.StepRequest {
	return api.StepRequest{Image: "base", Args: []string{"true"}, CPU: 1, MemoryBytes: gib, Idempotent: idempotent}
}

// TestServerStepLifecycle submits through a follower (which forwards to
// the leader) and plays an agent through the client: assignments long
// poll, phases, exit, then the cancel flow. With TLS, the gateway submits
// and reads, and agent n1 reports.
func TestServerStepLifecycle(t *testing.T) {
	t.Run("plaintext", func(t *testing.T) {
		c := newServerCluster(t, 3, nil)
		testStepLifecycle(t, c.client(c.follower()), c.client(), "http")
	})
	t.Run("tls", func(t *testing.T) {
		c := newTLSCluster(t, 3, nil)
		testStepLifecycle(t, c.clientAs("gateway/gw", c.follower()), c.clientAs("agent/n1"), "https")
	})
}

func testStepLifecycle(t *testing.T, viaFollower, all *client.Client, scheme string) {
	a := newAgent(t, all, "n1", 4, 8*gib)

	// The agent's first poll answers at once; the next one blocks until
	// the node's assignments change.
	asg, err := all.Assignments(t.Context(), "n1", 0, 0)
	if err != nil || len(asg.Steps) != 0 {
		t.Fatalf("Assignments(n1, 0) = %+v, %v; want none", asg, err)
	}
	polled := make(chan client.Assignments, 1)
	go func() {
		got, err := all.Assignments(t.Context(), "n1", asg.Index, 10*time.Second)
		if err != nil {
			t.Errorf("Assignments(n1, %d) = %v", asg.Index, err)
		}
		polled <- got
	}()
	time.Sleep(100 * time.Millisecond) // let heartbeats pass: they must not wake the poll

	s, err := viaFollower.SubmitStep(t.Context(), stepRequest(false))
	if err != nil {
		t.Fatalf("SubmitStep() via a follower = %v", err)
	}
	if s.State != "queued" || len(s.ID) < 3 || s.ID[:2] != "s-" || s.Phases.Queued.IsZero() {
		t.Errorf("SubmitStep() = %+v, want a queued step with a leader-chosen s- id", s)
	}
	got := <-polled
	if len(got.Steps) != 1 || string(got.Steps[0].ID) != s.ID || got.Steps[0].State != cluster.StatePlaced {
		t.Fatalf("Assignments long poll = %+v, want step %s placed", got, s.ID)
	}

	a.run(s.ID, 1)
	// A follower serves the read as soon as it applied the commit.
	if r, err := viaFollower.Step(t.Context(), s.ID); err != nil || r.State != "running" || r.Phases.Started.IsZero() {
		t.Errorf("Step(%s) via a follower after running = %+v, %v; want running", s.ID, r, err)
	}
	a.exit(s.ID, 1, cluster.StateExited, 3, cluster.ByExit)
	done := waitStep(t, viaFollower, s.ID, "exited", stateIs("exited"))
	if done.ExitCode == nil || *done.ExitCode != 3 || done.TerminatedBy != "exit" || done.Node != "n1" {
		t.Errorf("Step(%s) after exit = %+v, want exited with code 3 on n1", s.ID, done)
	}
	// A repeated exit report is harmless.
	a.exit(s.ID, 1, cluster.StateExited, 3, cluster.ByExit)

	// Cancel: requested -> the agent sees it -> exit -> confirmed.
	s2, err := viaFollower.SubmitStep(t.Context(), stepRequest(false))
	if err != nil {
		t.Fatal(err)
	}
	waitStep(t, viaFollower, s2.ID, "placed", stateIs("placed"))
	a.run(s2.ID, 1)
	cs, err := viaFollower.CancelStep(t.Context(), s2.ID, "user asked")
	if err != nil || cs.Cancel == nil || cs.Cancel.RequestedAt.IsZero() || !cs.Cancel.ConfirmedAt.IsZero() || cs.State != "running" {
		t.Fatalf("CancelStep(%s) = %+v, %v; want running with a cancel requested, not confirmed", s2.ID, cs, err)
	}
	asg, err = all.Assignments(t.Context(), "n1", 0, 0)
	if err != nil || len(asg.Steps) != 1 || asg.Steps[0].Cancel == nil {
		t.Fatalf("Assignments(n1) after cancel = %+v, %v; want %s with its cancel", asg, err, s2.ID)
	}
	a.exit(s2.ID, 1, cluster.StateCancelled, 143, cluster.ByUser)
	if s, _ := viaFollower.Step(t.Context(), s2.ID); s.State != "cancelled" || s.Cancel == nil || !s.Cancel.ConfirmedAt.IsZero() {
		t.Errorf("Step(%s) after the exit = %+v, want cancelled and the cancel not yet confirmed", s2.ID, s)
	}
	err = all.ConfirmCancel(t.Context(), cluster.ConfirmCancel{Step: cluster.StepID(s2.ID), Node: "n1", Attempt: 1})
	if err != nil {
		t.Fatalf("ConfirmCancel(%s) = %v", s2.ID, err)
	}
	s, _ = viaFollower.Step(t.Context(), s2.ID)
	if s.Cancel == nil || s.Cancel.ConfirmedAt.IsZero() || s.Cancel.ConfirmedAt.Before(s.Cancel.RequestedAt) {
		t.Errorf("Step(%s) after confirmation = %+v, want the cancel confirmed after it was requested", s2.ID, s.Cancel)
	}

	// Where the output is.
	u, err := viaFollower.StreamLocation(t.Context(), s2.ID)
	if want := (api.StreamURL{URL: scheme + "://127.0.0.1:7200/v1/steps/" + s2.ID + "/stream", Node: "n1"}); err != nil || u != want {
		t.Errorf("StreamLocation(%s) = %+v, %v; want %+v", s2.ID, u, err, want)
	}
	list, err := viaFollower.Steps(t.Context(), client.StepFilter{State: "cancelled", Node: "n1"})
	if err != nil || len(list) != 1 || list[0].ID != s2.ID {
		t.Errorf("Steps(cancelled on n1) = %v, %v; want [%s]", list, err, s2.ID)
	}
}

// TestServerNodeLost stops a node's heartbeats: it becomes down after the
// TTL, its non-idempotent step is lost for good, its idempotent step is
// re-placed on another node as attempt 2.
func TestServerNodeLost(t *testing.T) {
	c := newServerCluster(t, 3, func(cfg *Config) { cfg.NodeTTL = 500 * time.Millisecond })
	cl := c.client()
	newAgent(t, cl, "n1", 4, 8*gib)
	silent := newAgent(t, cl, "n2", 4, 64*gib) // most free memory: it gets the steps

	once, err := cl.SubmitStep(t.Context(), stepRequest(false))
	if err != nil {
		t.Fatal(err)
	}
	again, err := cl.SubmitStep(t.Context(), stepRequest(true))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{once.ID, again.ID} {
		if s := waitStep(t, cl, id, "placed", stateIs("placed")); s.Node != "n2" {
			t.Fatalf("step %s placed on %s, want n2", id, s.Node)
		}
		silent.run(id, 1)
	}
	silent.stop()

	lost := waitStep(t, cl, once.ID, "lost", stateIs("lost"))
	if lost.TerminatedBy != "node_lost" || lost.Attempts != 1 {
		t.Errorf("non-idempotent step after node loss = %+v, want lost by node_lost after 1 attempt", lost)
	}
	replaced := waitStep(t, cl, again.ID, "re-placed", func(s api.Step) bool { return s.Attempts == 2 && s.State == "placed" })
	if replaced.Node != "n1" {
		t.Errorf("idempotent step re-placed on %s, want n1", replaced.Node)
	}
	n, err := cl.Node(t.Context(), "n2")
	if err != nil || n.State != "down" || n.DownReason == "" {
		t.Errorf("Node(n2) = %+v, %v; want down with a reason", n, err)
	}
	// A late report about the lost attempt does not resurrect the step.
	if err := silent.c.ReportExit(t.Context(), cluster.StepExit{Node: "n2", Attempt: 1, Record: cluster.ExitRecord{
		Step: cluster.StepID(once.ID), State: cluster.StateExited, TerminatedBy: cluster.ByExit}}); err != nil {
		t.Errorf("late ReportExit() = %v", err)
	}
	if s, _ := cl.Step(t.Context(), once.ID); s.State != "lost" {
		t.Errorf("step %s after a late exit = %s, want lost", once.ID, s.State)
	}
}

// TestServerDrain drains a node with two running steps: one ends by
// itself, the other is cancelled at the deadline, and the drain is
// complete only once both sandboxes are reported cleaned up.
func TestServerDrain(t *testing.T) {
	c := newServerCluster(t, 3, nil)
	cl := c.client(c.follower())
	a := newAgent(t, cl, "n1", 4, 8*gib)
	var ids []string
	for range 2 {
		s, err := cl.SubmitStep(t.Context(), stepRequest(false))
		if err != nil {
			t.Fatal(err)
		}
		waitStep(t, cl, s.ID, "placed", stateIs("placed"))
		a.run(s.ID, 1)
		ids = append(ids, s.ID)
	}

	n, err := cl.DrainNode(t.Context(), "n1", 500*time.Millisecond)
	if err != nil || n.State != "draining" || n.Drain == nil || n.Drain.Complete || n.Drain.Deadline.IsZero() {
		t.Fatalf("DrainNode(n1) = %+v, %v; want draining, not complete, with a deadline", n, err)
	}
	// No new placement on a draining node.
	waiting, err := cl.SubmitStep(t.Context(), stepRequest(false))
	if err != nil {
		t.Fatal(err)
	}

	a.exit(ids[0], 1, cluster.StateExited, 0, cluster.ByExit)
	a.phase(ids[0], 1, "", cluster.Phases{CleanedUp: time.Now()})
	// The deadline cancels the other.
	s := waitStep(t, cl, ids[1], "cancel requested", func(s api.Step) bool { return s.Cancel != nil })
	if s.State != "running" {
		t.Errorf("step %s at the drain deadline = %s, want still running until its exit", ids[1], s.State)
	}
	a.exit(ids[1], 1, cluster.StateCancelled, 137, cluster.ByUser)
	if err := cl.ConfirmCancel(t.Context(), cluster.ConfirmCancel{Step: cluster.StepID(ids[1]), Node: "n1", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if n, _ := cl.Node(t.Context(), "n1"); n.Running != 0 || n.Drain == nil || n.Drain.Complete {
		t.Errorf("Node(n1) before the last cleanup = %+v, want no step running and the drain not complete", n)
	}
	a.phase(ids[1], 1, "", cluster.Phases{CleanedUp: time.Now()})
	if n, _ := cl.Node(t.Context(), "n1"); n.State != "draining" || n.Drain == nil || !n.Drain.Complete {
		t.Errorf("Node(n1) after the cleanups = %+v, want draining, complete", n)
	}
	if s, _ := cl.Step(t.Context(), waiting.ID); s.State != "queued" {
		t.Errorf("step %s submitted during the drain = %s, want queued", waiting.ID, s.State)
	}

	if n, err := cl.UndrainNode(t.Context(), "n1"); err != nil || n.State != "ready" || n.Drain != nil {
		t.Errorf("UndrainNode(n1) = %+v, %v; want ready", n, err)
	}
	waitStep(t, cl, waiting.ID, "placed after the undrain", stateIs("placed"))
}

// TestServerMembers lists the members and removes one, with TLS: the
// members joined over it, ask each other's health over it, and the
// operator's removal is forwarded over it.
func TestServerMembers(t *testing.T) {
	c := newTLSCluster(t, 3, nil)
	cl := c.client()
	ms, err := cl.Members(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	leader := c.waitLeader()
	var want []api.Member
	for _, m := range c.members {
		want = append(want, api.Member{ID: m.id, Address: m.srv.cfg.RaftAddr, HTTPAddress: m.srv.cfg.HTTPAddr,
			Leader: m == leader, Voter: true})
	}
	if diff := cmp.Diff(want, ms, cmpopts.IgnoreFields(api.Member{}, "LastIndex")); diff != "" {
		t.Errorf("Members() (-want +got):\n%s", diff)
	}
	for _, m := range ms {
		if m.LastIndex == 0 || m.Error != "" {
			t.Errorf("member %s: last index %d, error %q; want an index", m.ID, m.LastIndex, m.Error)
		}
	}

	gone := c.follower()
	if err := cl.RemoveMember(t.Context(), gone.id); err != nil {
		t.Fatalf("RemoveMember(%s) = %v", gone.id, err)
	}
	c.stopMember(gone)
	rest := c.client(slices.DeleteFunc(slices.Clone(c.members), func(m *testServer) bool { return m == gone })...)
	ms, err = rest.Members(t.Context())
	if err != nil || len(ms) != 2 || slices.ContainsFunc(ms, func(m api.Member) bool { return m.ID == gone.id }) {
		t.Errorf("Members() after removing %s = %+v, %v", gone.id, ms, err)
	}
	if err := rest.RemoveMember(t.Context(), "nobody"); !client.IsNotFound(err) {
		t.Errorf("RemoveMember(nobody) = %v, want not found", err)
	}
	// The two left still commit.
	if _, err := rest.SubmitStep(t.Context(), stepRequest(false)); err != nil {
		t.Errorf("SubmitStep() after the removal = %v", err)
	}
	if _, ok := leader.srv.fsm.State().Member(gone.id); ok && leader != gone {
		t.Errorf("the record of the removed member %s is still there", gone.id)
	}
}

// TestServerSnapshotRoundTrip saves the state, changes it, restores the
// saved document and finds the saved state on every member.
func TestServerSnapshotRoundTrip(t *testing.T) {
	c := newServerCluster(t, 3, nil)
	cl := c.client()
	a := newAgent(t, cl, "n1", 4, 8*gib)
	s1, err := cl.SubmitStep(t.Context(), stepRequest(false))
	if err != nil {
		t.Fatal(err)
	}
	waitStep(t, cl, s1.ID, "placed", stateIs("placed"))
	a.run(s1.ID, 1)
	// Recorded failed at once: no node has 64 cores.
	if _, err := cl.SubmitStep(t.Context(), api.StepRequest{ID: "too-big", Image: "base", Args: []string{"x"}, CPU: 64, MemoryBytes: gib}); !client.IsCode(err, api.CodeUnplaceable) {
		t.Fatalf("SubmitStep(too-big) = %v, want unplaceable", err)
	}
	saved, err := cl.Snapshot(t.Context())
	if err != nil {
		t.Fatalf("Snapshot() = %v", err)
	}
	before, _ := cl.Steps(t.Context(), client.StepFilter{})

	a.exit(s1.ID, 1, cluster.StateExited, 0, cluster.ByExit)
	if _, err := cl.SubmitStep(t.Context(), api.StepRequest{ID: "after", Image: "base", Args: []string{"x"}, CPU: 64, MemoryBytes: gib}); !client.IsCode(err, api.CodeUnplaceable) {
		t.Fatalf("SubmitStep(after) = %v, want unplaceable", err)
	}
	if err := cl.RestoreSnapshot(t.Context(), saved); err != nil {
		t.Fatalf("RestoreSnapshot() = %v", err)
	}
	ignore := cmpopts.IgnoreFields(api.Step{}, "ModifyIndex")
	for _, m := range c.members {
		after, err := c.client(m).Steps(t.Context(), client.StepFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(before, after, ignore); diff != "" {
			t.Errorf("member %s: steps after the restore (-saved +got):\n%s", m.id, diff)
		}
	}
	// The restored state goes on: the agent's step is running again and
	// its exit is accepted.
	a.exit(s1.ID, 1, cluster.StateExited, 0, cluster.ByExit)

	var doc snapshotData
	if err := json.Unmarshal(saved, &doc); err != nil {
		t.Fatal(err)
	}
	doc.Version = 99
	bad, _ := json.Marshal(doc)
	var ce *client.Error
	if err := cl.RestoreSnapshot(t.Context(), bad); !errors.As(err, &ce) || ce.Status != 400 {
		t.Errorf("RestoreSnapshot(version 99) = %v, want a 400", err)
	}
}

// TestServerRunStops checks that a single member stops on cancel, even
// with a long poll in flight, and that it restarts from its data dir.
func TestServerRunStops(t *testing.T) {
	checkNoServerGoroutines(t)
	c := &serverCluster{t: t, transport: newTestTransport(t)}
	cfg := serverConfig(t, "solo")
	cfg.Bootstrap = true
	m := c.start(cfg)
	c.waitLeader()
	c.waitMembers(1)
	cl := c.client()
	newAgent(t, cl, "n1", 1, gib)
	asg, err := cl.Assignments(t.Context(), "n1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	polled := make(chan error, 1)
	go func() {
		_, err := cl.Assignments(context.Background(), "n1", asg.Index, time.Minute)
		polled <- err
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	c.stopMember(m)
	select {
	case <-polled:
	case <-time.After(5 * time.Second):
		t.Fatal("the long poll did not end when the member stopped")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("stopping took %v, want it prompt", d)
	}

	// Restart on the same data: the state is back.
	m = c.start(cfg)
	c.waitLeader()
	waitFor(t, "the node back after restart", func() bool {
		_, ok := m.srv.fsm.State().Node("n1")
		return ok
	})
}

// TestServerQueueExpiry: a step that fits nowhere now expires after the
// queue timeout, saying why it was not placed; while it waits, one event
// says why.
func TestServerQueueExpiry(t *testing.T) {
	c := newServerCluster(t, 1, func(cfg *Config) { cfg.QueueTimeout = 300 * time.Millisecond })
	cl := c.client()
	newAgent(t, cl, "n1", 1, gib)
	// The first holds the node (placed, never started: within the start
	// timeout), the second waits for it.
	first, err := cl.SubmitStep(t.Context(), api.StepRequest{Image: "base", Args: []string{"true"}, CPU: 1, MemoryBytes: gib})
	if err != nil {
		t.Fatal(err)
	}
	waitStep(t, cl, first.ID, "placed", stateIs("placed"))
	s, err := cl.SubmitStep(t.Context(), api.StepRequest{Image: "base", Args: []string{"true"}, CPU: 1, MemoryBytes: gib})
	if err != nil {
		t.Fatal(err)
	}
	s = waitStep(t, cl, s.ID, "expired", stateIs("expired"))
	if s.TerminatedBy != "timeout" || !strings.Contains(s.Reason, "capacity exhausted") {
		t.Errorf("expired step = %+v, want terminated by timeout, the reason quoting the capacity", s)
	}
	var waits []api.Event
	for _, e := range s.Events {
		if e.Kind == cluster.EventWaiting {
			waits = append(waits, e)
		}
	}
	if len(waits) != 1 || waits[0].Waiting == nil || waits[0].Waiting.Reason != cluster.WaitCapacity || !strings.Contains(waits[0].Message, "no ready node has 1 cores and 1GiB of memory free") {
		t.Errorf("waiting events = %+v, want one, reason capacity, saying what is missing", waits)
	}
}

// TestServerHealthAndMetrics reads /healthz and /metrics.
func TestServerHealthAndMetrics(t *testing.T) {
	c := newServerCluster(t, 1, nil)
	cl := c.client()
	h, err := cl.Health(t.Context())
	if err != nil || h.Status != "ok" || h.RaftState != "leader" || h.ID != "m0" || h.AppliedIndex == 0 {
		t.Errorf("Health() = %+v, %v; want ok, leader m0", h, err)
	}
	newAgent(t, cl, "n1", 1, gib)
	if _, err := cl.SubmitStep(t.Context(), stepRequest(false)); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Step(t.Context(), "nope"); !client.IsNotFound(err) {
		t.Fatalf("Step(nope) = %v", err)
	}
	resp, err := (&http.Client{Transport: c.transport}).Get(c.members[0].url() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`rodon_scheduler_http_requests_total{code="201",route="POST /v1/steps"} 1`,
		`rodon_scheduler_http_requests_total{code="404",route="GET /v1/steps/{id}"} 1`,
		`rodon_scheduler_raft_leader 1`,
		`rodon_scheduler_raft_state{state="leader"} 1`,
		`rodon_scheduler_nodes{state="ready"} 1`,
		`rodon_scheduler_placement_latency_seconds_count`,
		`rodon_scheduler_steps{state=`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestServerLeaderFailover removes the leader from the cluster: its leader
// loops stop while its Server runs on, and the new leader's loops place
// the next step.
func TestServerLeaderFailover(t *testing.T) {
	c := newServerCluster(t, 3, nil)
	old := c.waitLeader()
	waitFor(t, "the leader loops", func() bool { return int(old.srv.loops.Load()) == len(old.srv.leaderLoops(time.Time{})) })
	rest := slices.DeleteFunc(slices.Clone(c.members), func(m *testServer) bool { return m == old })
	cl := c.client(rest...)
	newAgent(t, cl, "n1", 4, 8*gib)

	if err := cl.RemoveMember(t.Context(), old.id); err != nil {
		t.Fatalf("RemoveMember(%s, the leader) = %v", old.id, err)
	}
	waitFor(t, "the old leader's loops to stop", func() bool { return old.srv.loops.Load() == 0 })
	var leader *testServer
	waitFor(t, "a new leader running its loops", func() bool {
		for _, m := range rest {
			if m.srv.raft.IsLeader() && int(m.srv.loops.Load()) == len(m.srv.leaderLoops(time.Time{})) {
				leader = m
				return true
			}
		}
		return false
	})
	s, err := cl.SubmitStep(t.Context(), stepRequest(false))
	if err != nil {
		t.Fatalf("SubmitStep() after the failover = %v", err)
	}
	waitStep(t, cl, s.ID, "placed by the new leader", stateIs("placed"))
	ms, err := cl.Members(t.Context())
	if err != nil || len(ms) != 2 {
		t.Errorf("Members() after removing the leader = %+v, %v; want 2", ms, err)
	}
	waitFor(t, "the new leader to drop the old one's record", func() bool {
		_, ok := leader.srv.fsm.State().Member(old.id)
		return !ok
	})
}
