package scheduler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// testConfig is a RaftConfig with timeouts fit for an in-process cluster.
func testConfig(id string) RaftConfig {
	cfg := DefaultRaftConfig()
	cfg.ID = id
	cfg.HeartbeatTimeout = 50 * time.Millisecond
	cfg.ElectionTimeout = 50 * time.Millisecond
	cfg.LeaderLeaseTimeout = 50 * time.Millisecond
	cfg.CommitTimeout = 5 * time.Millisecond
	cfg.ApplyTimeout = 2 * time.Second
	return cfg
}

// member is one scheduler member of a testCluster.
type member struct {
	id    string
	fsm   *FSM
	raft  *Raft
	trans *raft.InmemTransport
	stop  context.CancelFunc
	done  chan error
}

// testCluster is an in-process scheduler cluster on raft's InmemTransport
// with the real FSM, after hashicorp/raft's testing.go.
type testCluster struct {
	t       testing.TB
	members []*member
}

// newTestCluster starts n members: the first bootstraps the cluster, and
// the leader adds the others as voters. Cleanup stops them all and checks
// that no Raft goroutine is left.
func newTestCluster(t testing.TB, n int) *testCluster {
	t.Helper()
	checkNoRaftGoroutines(t)
	c := &testCluster{t: t}
	for i := range n {
		id := fmt.Sprintf("m%d", i)
		_, trans := raft.NewInmemTransport(raft.ServerAddress(id))
		store := raft.NewInmemStore()
		fsm := NewFSM(testLogger(t))
		cfg := testConfig(id)
		cfg.Bootstrap = i == 0
		r, err := NewRaft(cfg, fsm, testLogger(t), RaftDeps{
			Transport: trans, Logs: store, Stable: store, Snapshots: raft.NewInmemSnapshotStore(),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		m := &member{id: id, fsm: fsm, raft: r, trans: trans, stop: stop, done: make(chan error, 1)}
		go func() { m.done <- r.Run(ctx) }()
		c.members = append(c.members, m)
		t.Cleanup(func() {
			m.stop()
			select {
			case err := <-m.done:
				if err != nil {
					t.Errorf("member %s: Run() = %v", m.id, err)
				}
			case <-time.After(5 * time.Second):
				t.Errorf("member %s: Run did not return after cancel", m.id)
			}
		})
	}
	c.heal()
	leader := c.waitLeader(c.members...)
	for _, m := range c.members {
		if m != leader {
			if err := leader.raft.AddVoter(t.Context(), m.id, string(m.trans.LocalAddr())); err != nil {
				t.Fatalf("AddVoter(%s) = %v", m.id, err)
			}
		}
	}
	return c
}

// heal connects every member to every other.
func (c *testCluster) heal() {
	for _, a := range c.members {
		for _, b := range c.members {
			if a != b {
				a.trans.Connect(b.trans.LocalAddr(), b.trans)
			}
		}
	}
}

// partition cuts the members in far off from the others, both ways.
func (c *testCluster) partition(far ...*member) {
	for _, a := range c.members {
		for _, b := range c.members {
			if slices.Contains(far, a) != slices.Contains(far, b) {
				a.trans.Disconnect(b.trans.LocalAddr())
			}
		}
	}
}

// waitLeader waits until exactly one of among is the leader, and returns it.
func (c *testCluster) waitLeader(among ...*member) *member {
	c.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var leaders []*member
		for _, m := range among {
			if m.raft.IsLeader() {
				leaders = append(leaders, m)
			}
		}
		if len(leaders) == 1 {
			return leaders[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("no single leader among %d members after 5s", len(among))
	return nil
}

// waitConverged waits until the members' FSMs persist identical snapshots
// at the same index.
func (c *testCluster) waitConverged(ms ...*member) {
	c.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		first := persist(c.t, ms[0].fsm)
		same := true
		for _, m := range ms[1:] {
			if !bytes.Equal(first, persist(c.t, m.fsm)) {
				same = false
			}
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			for _, m := range ms {
				c.t.Logf("member %s: index %d", m.id, m.fsm.State().Index())
			}
			c.t.Fatalf("members did not converge in 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustRaftApply(t testing.TB, m *member, cmds ...cluster.Command) {
	t.Helper()
	for _, c := range cmds {
		if _, err := m.raft.Apply(t.Context(), c); err != nil {
			t.Fatalf("member %s: Apply(%s) = %v", m.id, c.CommandType(), err)
		}
	}
}

func others(all []*member, not *member) []*member {
	var out []*member
	for _, m := range all {
		if m != not {
			out = append(out, m)
		}
	}
	return out
}

func TestClusterPartition(t *testing.T) {
	c := newTestCluster(t, 3)
	old := c.waitLeader(c.members...)
	mustRaftApply(t, old, running("s1", false)...)
	mustRaftApply(t, old, submit("s2", true), place("s2", "n1"))

	// A business error comes back as the FSM returned it.
	if _, err := old.raft.Apply(t.Context(), submit("s1", false)); !errors.Is(err, ErrExists) {
		t.Errorf("Apply(duplicate submit) = %v, want %v", err, ErrExists)
	}
	// A heartbeat's result comes back to the caller.
	res, err := old.raft.Apply(t.Context(), cluster.Heartbeat{Node: "n1", Health: cluster.Health{State: cluster.NodeReady},
		Running: []cluster.StepAttempt{{Step: "gone", Attempt: 1}}, At: at(5)})
	if want := (&cluster.HeartbeatResult{Unwanted: []cluster.StepAttempt{{Step: "gone", Attempt: 1}}}); err != nil || !cmp.Equal(res, any(want)) {
		t.Errorf("Apply(heartbeat) = %v, %v; want %v, nil", res, err, want)
	}
	c.waitConverged(c.members...)

	// A follower refuses writes and names the leader.
	follower := others(c.members, old)[0]
	_, err = follower.raft.Apply(t.Context(), submit("s3", false))
	var nl *NotLeaderError
	if !errors.As(err, &nl) || nl.LeaderID != old.id || nl.LeaderAddr != old.id {
		t.Errorf("follower Apply() = %v, want a NotLeaderError naming %s", err, old.id)
	}

	// Cut the leader off: the majority elects a new one and goes on.
	c.partition(old)
	rest := others(c.members, old)
	leader := c.waitLeader(rest...)
	mustRaftApply(t, leader, exit("s1", "n1", 1, cluster.StateExited, 0), submit("s3", false))

	// The old leader cannot commit.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := old.raft.Apply(ctx, submit("ghost", false)); err == nil {
		t.Errorf("Apply() on the partitioned old leader = nil, want an error")
	}
	if _, ok := leader.fsm.State().Step("ghost"); ok {
		t.Errorf("the majority applied a write of the partitioned old leader")
	}

	c.heal()
	leader = c.waitLeader(c.members...)
	mustRaftApply(t, leader, lose("n1", 40))
	c.waitConverged(c.members...)
	for _, m := range c.members {
		st := m.fsm.State()
		if _, ok := st.Step("ghost"); ok {
			t.Errorf("member %s has the uncommitted step ghost", m.id)
		}
		if s, ok := st.Step("s1"); !ok || s.State != cluster.StateExited {
			t.Errorf("member %s: step s1 = %+v, want exited", m.id, s)
		}
		if s, ok := st.Step("s2"); !ok || s.State != cluster.StateQueued || s.Attempts != 2 {
			t.Errorf("member %s: step s2 = %+v, want queued attempt 2", m.id, s)
		}
	}
}

func TestClusterMembership(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader(c.members...)
	members, err := leader.raft.Members(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []Member{{ID: "m0", Address: "m0", Voter: true}, {ID: "m1", Address: "m1", Voter: true}, {ID: "m2", Address: "m2", Voter: true}}
	for i := range want {
		want[i].Leader = want[i].ID == leader.id
	}
	if diff := cmp.Diff(want, members); diff != "" {
		t.Errorf("Members() (-want +got):\n%s", diff)
	}
	gone := others(c.members, leader)[0]
	if err := leader.raft.RemoveServer(t.Context(), gone.id); err != nil {
		t.Fatalf("RemoveServer(%s) = %v", gone.id, err)
	}
	members, err = leader.raft.Members(t.Context())
	if err != nil || len(members) != 2 || slices.ContainsFunc(members, func(m Member) bool { return m.ID == gone.id }) {
		t.Errorf("Members() after removing %s = %v, %v", gone.id, members, err)
	}
	mustRaftApply(t, leader, register("n1", 4, 8*gib))
	c.waitConverged(others(c.members, gone)...)
}

// checkNoRaftGoroutines fails t if goroutines of hashicorp/raft or of this
// package's Raft are still running once t's other cleanups are done.
func checkNoRaftGoroutines(t testing.TB) {
	t.Helper()
	testenv.NoGoroutinesAtCleanup(t, 3*time.Second, "hashicorp/raft", "scheduler.(*Raft)")
}
