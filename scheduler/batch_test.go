package scheduler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// applyBatch applies cmds as one CmdBatch entry and returns its results.
func (f *testFSM) applyBatch(t testing.TB, cmds ...cluster.Command) []any {
	t.Helper()
	return f.applyBatchAs(t, batchJSON, cmds...)
}

// applyBatchAs applies cmds as one batch entry of format bf (CmdBatch or
// CmdBinaryBatch) and returns its results.
func (f *testFSM) applyBatchAs(t testing.TB, bf batchFormat, cmds ...cluster.Command) []any {
	t.Helper()
	items := make([]cluster.BatchItem, len(cmds))
	for i, c := range cmds {
		var err error
		if items[i], err = newBatchItem(bf, c); err != nil {
			t.Fatal(err)
		}
	}
	_, entry := encodeBatch(bf, items)
	f.idx++
	res, ok := f.Apply(&raft.Log{Index: f.idx, Type: raft.LogCommand, Data: entry}).(*BatchResult)
	if !ok {
		t.Fatalf("Apply(batch) is not a *BatchResult")
	}
	return res.Results
}

func TestApplyBatch(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, register("n1", 4, 8*gib))
	res := f.applyBatch(t, submit("s1", false), submit("s1", false), place("s1", "n1"), place("nope", "n1"), submit("s2", false))
	if len(res) != 5 {
		t.Fatalf("batch of 5 answered %d results", len(res))
	}
	for i, want := range []error{nil, ErrExists, nil, ErrNotFound, nil} {
		got, _ := res[i].(error)
		checkErr(t, fmt.Sprintf("item %d", i), got, want)
	}
	// Each item sees the earlier ones, and all share the entry's index.
	if s := f.step(t, "s1"); s.State != cluster.StatePlaced || s.ModifyIndex != f.idx {
		t.Errorf("s1 = %s at index %d, want placed at %d", s.State, s.ModifyIndex, f.idx)
	}
	if got := f.State().Index(); got != f.idx {
		t.Errorf("Index() = %d, want %d", got, f.idx)
	}
	entries, items := f.Applied()
	if entries[cluster.CmdBatch] != 1 || items[cluster.CmdSubmitStep] != 3 || items[cluster.CmdPlaceStep] != 2 {
		t.Errorf("Applied() = %v, %v; want 1 batch entry, 3 submit and 2 place items", entries, items)
	}
}

// TestBatchSameStateAsEntries: a batch leaves the state its items would
// leave as entries of their own (indexes apart), and its snapshot
// restores as any other.
func TestBatchSameStateAsEntries(t *testing.T) {
	for _, bf := range []batchFormat{batchJSON, batchBinary} {
		t.Run(fmt.Sprint(bf), func(t *testing.T) { testBatchSameStateAsEntries(t, bf) })
	}
}

func testBatchSameStateAsEntries(t *testing.T, bf batchFormat) {
	history := mixedHistory()
	one := newTestFSM(t)
	one.mustApply(t, history...)

	batched := newTestFSM(t)
	var run []cluster.Command
	flush := func() {
		if len(run) > 0 {
			for i, r := range batched.applyBatchAs(t, bf, run...) {
				if err, ok := r.(error); ok {
					t.Fatalf("item %d (%s): %v", i, run[i].CommandType(), err)
				}
			}
			run = nil
		}
	}
	for _, c := range history {
		if cluster.Batchable(c.CommandType()) {
			run = append(run, c)
			continue
		}
		flush()
		batched.mustApply(t, c)
	}
	flush()
	ignoreIndex := cmp.FilterPath(func(p cmp.Path) bool {
		n := p.Last().String()
		return n == ".ModifyIndex" || n == ".CreateIndex"
	}, cmp.Ignore())
	if diff := cmp.Diff(one.State().Steps(StepFilter{}), batched.State().Steps(StepFilter{}), ignoreIndex); diff != "" {
		t.Errorf("steps, batched (-entries +batched):\n%s", diff)
	}
	if diff := cmp.Diff(one.State().Nodes(), batched.State().Nodes(), ignoreIndex, equateAddr); diff != "" {
		t.Errorf("nodes, batched (-entries +batched):\n%s", diff)
	}
	data := persist(t, batched.FSM)
	g := newTestFSM(t)
	if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	if got := persist(t, g.FSM); !bytes.Equal(got, data) {
		t.Errorf("snapshot of the restored state differs:\n%s\n%s", got, data)
	}
}

func TestApplyBatchCorrupt(t *testing.T) {
	item := func(typ cluster.CommandType, data string) cluster.BatchItem {
		return cluster.BatchItem{Type: typ, Data: []byte(data)}
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"nested batch", cluster.EncodeBatch([]cluster.BatchItem{item(cluster.CmdBatch, `{"items":[]}`)})},
		{"not batchable", cluster.EncodeBatch([]cluster.BatchItem{item(cluster.CmdSetMember, `{"id":"m1"}`)})},
		{"unknown type", cluster.EncodeBatch([]cluster.BatchItem{item(99, `{}`)})},
		{"ignorable unknown type", cluster.EncodeBatch([]cluster.BatchItem{item(cluster.IgnorableFlag|99, `{}`)})},
		{"corrupt item", cluster.EncodeBatch([]cluster.BatchItem{item(cluster.CmdSubmitStep, `[1]`)})},
		{"corrupt batch", append([]byte{byte(cluster.CmdBatch)}, "{nope"...)},
		{"binary: nested batch", binaryBatch(t, item(cluster.CmdBatch, "\x80"))},
		{"binary: not batchable", binaryBatch(t, item(cluster.CmdSetMember, "\x81\xa2id\xa2m1"))},
		{"binary: corrupt item", binaryBatch(t, item(cluster.CmdSubmitStep, "\x91\x01"))},
		{"binary: item of the wrong type", binaryBatch(t, item(cluster.CmdPlaceStep, "\x81\xa4step\x01"))},
		{"binary: odd envelope", append([]byte{byte(cluster.CmdBinaryBatch)}, 0x91, 0x05)},
		{"binary: JSON envelope", append([]byte{byte(cluster.CmdBinaryBatch)}, `{"items":[]}`...)},
		{"binary: trailing bytes", append(binaryBatch(t), 0x00)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFSM(t)
			defer func() {
				if recover() == nil {
					t.Errorf("Apply(%q) did not panic", tc.data)
				}
			}()
			f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: tc.data})
		})
	}
	if _, err := cluster.NewBatch(cluster.SetMember{ID: "m1"}); err == nil {
		t.Errorf("NewBatch(SetMember) = nil error, want one")
	}
}

// binaryBatch returns a CmdBinaryBatch entry of items as they are.
func binaryBatch(t *testing.T, items ...cluster.BatchItem) []byte {
	t.Helper()
	return cluster.EncodeBinaryBatch(items)
}

func (f batchFormat) String() string {
	return [...]string{"none", "json", "binary"}[f]
}

// TestBatcher commits many concurrent commands through the leader's
// batcher on a real 3-member cluster, in fewer entries than commands, each
// caller getting its own result; after its context ends, every caller is
// refused as by a follower and no goroutine is left.
func TestBatcher(t *testing.T) {
	testenv.NoGoroutinesAtCleanup(t, 3*time.Second, "scheduler.(*batcher)")
	c := newTestCluster(t, 3)
	leader := c.waitLeader(c.members...)
	mustRaftApply(t, leader, register("n1", 1000, 1<<42))
	ctx, stop := context.WithCancel(t.Context())
	b := newBatcher(leader.raft, func(context.Context) batchFormat { return batchJSON })
	var wg sync.WaitGroup
	wg.Go(func() { b.run(ctx) })
	t.Cleanup(func() { stop(); wg.Wait() })

	const n = 300
	errs := make([]error, n)
	var callers sync.WaitGroup
	for i := range n {
		callers.Go(func() {
			id := cluster.StepID(fmt.Sprintf("s%03d", i%(n-10))) // 10 duplicates
			_, errs[i] = b.Apply(t.Context(), cluster.SubmitStep{Step: id, Spec: spec(0.01, 16<<20, false), At: at(1)})
		})
	}
	callers.Wait()
	var exists int
	for i, err := range errs {
		switch {
		case errors.Is(err, ErrExists):
			exists++
		case err != nil:
			t.Errorf("Apply(s%03d) = %v", i, err)
		}
	}
	if exists != 10 {
		t.Errorf("%d submissions answered ErrExists, want 10", exists)
	}
	if got := len(leader.fsm.State().Steps(StepFilter{})); got != n-10 {
		t.Errorf("%d steps, want %d", got, n-10)
	}
	entries, items := leader.fsm.Applied()
	if items[cluster.CmdSubmitStep] != n || entries[cluster.CmdBatch] == 0 || entries[cluster.CmdBatch]+entries[cluster.CmdSubmitStep] >= n {
		t.Errorf("Applied() = %v, %v; want %d submissions in fewer entries, some batches", entries, items, n)
	}
	c.waitConverged(c.members...)

	stop()
	wg.Wait()
	if _, err := b.Apply(t.Context(), submit("late", false)); !errors.Is(err, ErrNotLeader) {
		t.Errorf("Apply after stop = %v, want ErrNotLeader", err)
	}
}

// TestBatcherNotAllowed: while a member has not recorded a version that
// knows batches, the batcher logs each command as an entry of its own.
func TestBatcherNotAllowed(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader(c.members...)
	ctx, stop := context.WithCancel(t.Context())
	b := newBatcher(leader.raft, func(context.Context) batchFormat { return batchNone })
	var wg sync.WaitGroup
	wg.Go(func() { b.run(ctx) })
	t.Cleanup(func() { stop(); wg.Wait() })
	var callers sync.WaitGroup
	for i := range 50 {
		callers.Go(func() {
			if _, err := b.Apply(t.Context(), submit(cluster.StepID(fmt.Sprintf("s%02d", i)), false)); err != nil {
				t.Errorf("Apply(s%02d) = %v", i, err)
			}
		})
	}
	callers.Wait()
	if entries, _ := leader.fsm.Applied(); entries[cluster.CmdBatch] != 0 || entries[cluster.CmdSubmitStep] != 50 {
		t.Errorf("Applied() entries = %v, want 50 submit_step and no batch", entries)
	}
}

// TestBatchGate: members record their version when they join or lead, and
// the leader batches only while every member of the configuration has
// recorded one that knows batches (a rolling upgrade batches once the last
// member runs the new version).
func TestBatchGate(t *testing.T) {
	c := newServerCluster(t, 3, nil)
	leader := c.waitLeader()
	srv := leader.srv
	deadline := time.Now().Add(5 * time.Second)
	for srv.batchFormat(t.Context()) != batchBinary {
		if time.Now().After(deadline) {
			t.Fatalf("batchFormat() = %v with every member at version %d; records %v", srv.batchFormat(t.Context()), cluster.MemberVersion, srv.fsm.State().Members())
		}
		time.Sleep(10 * time.Millisecond)
	}
	var old cluster.Member
	for _, m := range srv.fsm.State().Members() {
		if m.ID != leader.id {
			old = m
		}
	}
	// The record of a member older than versions.
	if _, err := srv.raft.Apply(t.Context(), cluster.SetMember{ID: old.ID, RaftAddress: old.RaftAddress, HTTPAddress: old.HTTPAddress, At: at(1)}); err != nil {
		t.Fatal(err)
	}
	if srv.batchesAllowed(t.Context()) {
		t.Errorf("batchesAllowed() = true with member %s at version 0", old.ID)
	}
	// Its steps still commit, one entry each.
	before, _ := srv.fsm.Applied()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if _, err := srv.apply(t.Context(), submit(cluster.StepID(fmt.Sprintf("g%02d", i)), false)); err != nil {
				t.Errorf("apply(g%02d) = %v", i, err)
			}
		})
	}
	wg.Wait()
	if after, _ := srv.fsm.Applied(); after[cluster.CmdBatch] != before[cluster.CmdBatch] || after[cluster.CmdBinaryBatch] != before[cluster.CmdBinaryBatch] {
		t.Errorf("batch entries %d -> %d, binary %d -> %d with a member at version 0, want none",
			before[cluster.CmdBatch], after[cluster.CmdBatch], before[cluster.CmdBinaryBatch], after[cluster.CmdBinaryBatch])
	}

	// A member at version 1 (batches, not binary ones): the leader logs
	// JSON batches and no CmdBinaryBatch, which that member would stop at.
	if _, err := srv.raft.Apply(t.Context(), cluster.SetMember{ID: old.ID, RaftAddress: old.RaftAddress, HTTPAddress: old.HTTPAddress,
		Version: cluster.BatchVersion, At: at(2)}); err != nil {
		t.Fatal(err)
	}
	if got := srv.batchFormat(t.Context()); got != batchJSON {
		t.Fatalf("batchFormat() = %v with member %s at version %d, want json", got, old.ID, cluster.BatchVersion)
	}
	before, _ = srv.fsm.Applied()
	b := srv.batcher.Load()
	if b == nil {
		t.Fatal("the leader has no batcher")
	}
	cmds := make([]cluster.Command, 20)
	for i := range cmds {
		cmds[i] = submit(cluster.StepID(fmt.Sprintf("j%02d", i)), false)
	}
	if _, err := b.ApplyAll(t.Context(), cmds); err != nil {
		t.Fatalf("ApplyAll() = %v", err)
	}
	if _, err := srv.applyAll(t.Context(), []cluster.Command{submit("k1", false), submit("k2", false)}); err != nil {
		t.Fatalf("applyAll() = %v", err)
	}
	after, _ := srv.fsm.Applied()
	if after[cluster.CmdBinaryBatch] != before[cluster.CmdBinaryBatch] || after[cluster.CmdBatch] == before[cluster.CmdBatch] {
		t.Errorf("batch entries %d -> %d, binary %d -> %d with a member at version %d, want JSON batches only",
			before[cluster.CmdBatch], after[cluster.CmdBatch], before[cluster.CmdBinaryBatch], after[cluster.CmdBinaryBatch], cluster.BatchVersion)
	}
	for _, id := range []cluster.StepID{"j00", "j19", "k2"} {
		if _, ok := srv.fsm.State().Step(id); !ok {
			t.Errorf("step %s not recorded", id)
		}
	}
}

// TestPlacementBatched: a placement pass places every queued step that
// fits in one read of the state, its own decisions counted, in batches
// rather than an entry per step, and never over the node's capacity.
func TestPlacementBatched(t *testing.T) {
	c := newServerCluster(t, 3, nil)
	cl := c.client(c.follower())
	const n = 40
	var ids []string
	for range n {
		s, err := cl.SubmitStep(t.Context(), api.StepRequest{Image: "base", Args: []string{"true"}, CPU: 0.1, MemoryBytes: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	leader := c.waitLeader().srv
	before, beforeItems := leader.fsm.Applied()
	// Room for 30 of them (CPU 3 cores at 0.1 each), starting 100 at once.
	if _, err := cl.Register(t.Context(), cluster.RegisterNode{Node: "n1", Address: netip.MustParseAddrPort("127.0.0.1:7200"),
		Capacity: cluster.Resources{CPU: 3, MemoryBytes: 64 * gib}, Health: cluster.Health{State: cluster.NodeReady}, MaxStarting: 100}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		placed := 0
		for _, id := range ids {
			if s, _ := leader.fsm.State().Step(cluster.StepID(id)); s.State == cluster.StatePlaced {
				placed++
			}
		}
		if placed == 30 {
			break
		}
		if placed > 30 || time.Now().After(deadline) {
			t.Fatalf("%d steps placed, want 30 (the node's capacity)", placed)
		}
		time.Sleep(10 * time.Millisecond)
	}
	after, afterItems := leader.fsm.Applied()
	entries := after[cluster.CmdPlaceStep] - before[cluster.CmdPlaceStep] + after[cluster.CmdBatch] - before[cluster.CmdBatch]
	if items := afterItems[cluster.CmdPlaceStep] - beforeItems[cluster.CmdPlaceStep]; items != 30 || entries > 5 {
		t.Errorf("30 placements in %d entries (%d place items), want a few batches", entries, items)
	}
}
