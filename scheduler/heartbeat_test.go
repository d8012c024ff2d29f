package scheduler

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// TestHeartbeatsInMemory: the leader logs a node's first heartbeat of its
// term and those that change its health; the others stay in its memory,
// which keeps the node alive, answers which attempts are unwanted, and
// shows the last heartbeat and the warm pool on GET /v1/nodes (a follower
// forwards it). A silent node is still declared down after the TTL.
func TestHeartbeatsInMemory(t *testing.T) {
	const ttl = 600 * time.Millisecond
	c := newServerCluster(t, 3, func(cfg *Config) { cfg.NodeTTL = ttl })
	cl := c.client(c.follower())
	ready := cluster.Health{State: cluster.NodeReady}
	if _, err := cl.Register(t.Context(), cluster.RegisterNode{Node: "n1", Address: netip.MustParseAddrPort("127.0.0.1:7200"),
		Capacity: cluster.Resources{CPU: 4, MemoryBytes: 8 * gib}, Health: ready}); err != nil {
		t.Fatal(err)
	}
	leader := c.waitLeader().srv
	logged := func() uint64 {
		_, items := leader.fsm.Applied()
		return items[cluster.CmdHeartbeat]
	}
	before := logged()
	pool := &cluster.PoolStatus{Ready: 2, Creating: 1, Classes: 1, MemoryBytes: 100 << 20, BudgetBytes: 1 << 30}
	var last time.Time
	beats := 0
	// Beats for 3 TTLs: the node stays ready on memory alone.
	for end := time.Now().Add(3 * ttl); time.Now().Before(end); {
		res, err := cl.Heartbeat(t.Context(), cluster.Heartbeat{Node: "n1", Health: ready, Pool: pool,
			Running: []cluster.StepAttempt{{Step: "ghost", Attempt: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		if want := []cluster.StepAttempt{{Step: "ghost", Attempt: 1}}; !cmp.Equal(res.Unwanted, want) {
			t.Fatalf("Heartbeat() unwanted = %v, want %v", res.Unwanted, want)
		}
		last = time.Now()
		beats++
		time.Sleep(ttl / 6)
	}
	// One logged: the first of the term (one more for each election a
	// loaded machine may hold meanwhile).
	if got := logged() - before; got < 1 || got > 3 {
		t.Errorf("%d of %d heartbeats logged with no change, want 1 (the first of the term)", got, beats)
	}
	n, err := cl.Node(t.Context(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	wantPool := &api.WarmPool{Ready: 2, Creating: 1, Classes: 1, MemoryBytes: 100 << 20, BudgetBytes: 1 << 30}
	if n.State != "ready" || n.LastHeartbeat.Before(last.Add(-ttl/3)) || !cmp.Equal(n.Pool, wantPool) {
		t.Errorf("Node(n1) = state %s, last heartbeat %v (last sent %v), pool %+v; want ready, recent, %+v", n.State, n.LastHeartbeat, last, n.Pool, wantPool)
	}
	// A change of health is logged.
	degraded := cluster.Health{State: cluster.NodeDegraded, Reasons: []string{"disk"}}
	before = logged()
	if _, err := cl.Heartbeat(t.Context(), cluster.Heartbeat{Node: "n1", Health: degraded}); err != nil {
		t.Fatal(err)
	}
	if got := logged() - before; got < 1 {
		t.Errorf("a change of health was not logged")
	}
	if n, _ := cl.Node(t.Context(), "n1"); n.State != "degraded" || n.Pool != nil {
		t.Errorf("Node(n1) = %s, pool %+v; want degraded, no pool", n.State, n.Pool)
	}
	// Silence: down after the TTL.
	deadline := time.Now().Add(5 * ttl)
	for {
		n, err := cl.Node(t.Context(), "n1")
		if err == nil && n.State == "down" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Node(n1) = %+v, %v; want down once silent for the TTL", n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestStateUnwanted(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, running("s1", false)...)
	f.mustApply(t, submit("s2", false), place("s2", "n1"))
	got := f.State().Unwanted("n1", []cluster.StepAttempt{{Step: "s1", Attempt: 1}, {Step: "s1", Attempt: 2}, {Step: "s2", Attempt: 1}, {Step: "nope", Attempt: 1}})
	want := []cluster.StepAttempt{{Step: "nope", Attempt: 1}, {Step: "s1", Attempt: 2}}
	if !cmp.Equal(got, want) {
		t.Errorf("Unwanted() = %v, want %v", got, want)
	}
	if got := f.State().Unwanted("n2", []cluster.StepAttempt{{Step: "s1", Attempt: 1}}); len(got) != 1 {
		t.Errorf("Unwanted(n2, s1 of n1) = %v, want it", got)
	}
}
