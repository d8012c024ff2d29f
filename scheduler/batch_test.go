package scheduler

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"

	"github.com/rodon-compute/rodon/cluster"
)

// applyBatch applies cmds as one CmdBatch entry and returns its results.
func (f *testFSM) applyBatch(t testing.TB, cmds ...cluster.Command) []any {
	t.Helper()
	b, err := cluster.NewBatch(cmds...)
	if err != nil {
		t.Fatal(err)
	}
	f.idx++
	res, ok := f.Apply(&raft.Log{Index: f.idx, Type: raft.LogCommand, Data: cluster.EncodeBatch(b.Items)}).(*BatchResult)
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
	history := mixedHistory()
	one := newTestFSM(t)
	one.mustApply(t, history...)

	batched := newTestFSM(t)
	var run []cluster.Command
	flush := func() {
		if len(run) > 0 {
			for i, r := range batched.applyBatch(t, run...) {
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

// TestBatchGate: members record their version when they join or lead, and
// the leader batches only while every member of the configuration has
// recorded one that knows batches (a rolling upgrade batches once the last
// member runs the new version).
func TestBatchGate(t *testing.T) {
	c := newServerCluster(t, 3, nil)
	leader := c.waitLeader()
	srv := leader.srv
	deadline := time.Now().Add(5 * time.Second)
	for !srv.batchesAllowed(t.Context()) {
		if time.Now().After(deadline) {
			t.Fatalf("batchesAllowed() = false with every member at version %d; records %v", cluster.MemberVersion, srv.fsm.State().Members())
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
}
