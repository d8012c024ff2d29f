package scheduler

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"

	"github.com/rodon-compute/rodon/cluster"
)

func TestApplyEntryFraming(t *testing.T) {
	for _, tc := range []struct {
		name      string
		data      []byte
		wantPanic bool
	}{
		{name: "unknown type", data: []byte{99, '{', '}'}, wantPanic: true},
		{name: "unknown ignorable type", data: []byte{byte(cluster.IgnorableFlag | 99), '{', '}'}},
		{name: "corrupt payload", data: append([]byte{byte(cluster.CmdSubmitStep)}, "{not json"...), wantPanic: true},
		{name: "empty entry", data: nil, wantPanic: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFSM(t)
			var resp any
			panicked := func() (p bool) {
				defer func() { p = recover() != nil }()
				resp = f.Apply(&raft.Log{Index: 7, Type: raft.LogCommand, Data: tc.data})
				return false
			}()
			if panicked != tc.wantPanic {
				t.Fatalf("Apply(%q) panicked = %v, want %v", tc.data, panicked, tc.wantPanic)
			}
			if !panicked && (resp != nil || f.State().Index() != 7) {
				t.Errorf("Apply(%q) = %v, index %d; want nil, index 7", tc.data, resp, f.State().Index())
			}
		})
	}
}

// memSink is a raft.SnapshotSink writing to a buffer.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }

// persist snapshots f and returns the persisted bytes.
func persist(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var sink memSink
	if err := snap.Persist(&sink); err != nil || !sink.closed {
		t.Fatalf("Persist() = %v, closed %v; want nil, closed", err, sink.closed)
	}
	return sink.Bytes()
}

// mixedHistory leaves nodes and steps in most states.
func mixedHistory() []cluster.Command {
	n2 := register("n2", 2, 4*gib)
	n2.Labels = map[string]string{"zone": "b"}
	return concat(
		running("s1", false),
		cmds(n2, register("n3", 8, 16*gib), cluster.SetNodeState{Node: "n3", State: cluster.NodeDraining, At: at(2)}),
		running("s2", true)[1:],
		cmds(submit("s3", false), place("s3", "n2"), cancel("s3", 5)),
		cmds(submit("s4", false), submit("s5", false), cancel("s5", 5)),
		cmds(exit("s1", "n1", 1, cluster.StateExited, 0), lose("n1", 30)),
	)
}

func TestSnapshotRestore(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, mixedHistory()...)
	data := persist(t, f.FSM)
	// Applying after the snapshot must not change what it persists.
	f.mustApply(t, submit("s6", false))

	g := newTestFSM(t)
	if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	g.idx = f.idx - 1
	g.mustApply(t, submit("s6", false))

	fs, gs := f.State(), g.State()
	if diff := cmp.Diff(fs.Nodes(), gs.Nodes(), equateAddr); diff != "" {
		t.Errorf("nodes after restore (-orig +restored):\n%s", diff)
	}
	if diff := cmp.Diff(fs.Steps(StepFilter{}), gs.Steps(StepFilter{})); diff != "" {
		t.Errorf("steps after restore (-orig +restored):\n%s", diff)
	}
	if diff := cmp.Diff(fs.Usage(), gs.Usage()); diff != "" {
		t.Errorf("usage after restore (-orig +restored):\n%s", diff)
	}
	if diff := cmp.Diff(fs.Steps(StepFilter{State: cluster.StateQueued}), gs.Steps(StepFilter{State: cluster.StateQueued})); diff != "" {
		t.Errorf("queued after restore (-orig +restored):\n%s", diff)
	}
	if fs.Index() != gs.Index() {
		t.Errorf("Index() after restore = %d, want %d", gs.Index(), fs.Index())
	}
	if a, b := persist(t, f.FSM), persist(t, g.FSM); !bytes.Equal(a, b) {
		t.Errorf("snapshots differ after the same entries:\n%s\n%s", a, b)
	}
}

func TestRestoreRejectsGarbage(t *testing.T) {
	f := newTestFSM(t)
	for _, data := range []string{"nope", `{"version": 99}`} {
		if err := f.Restore(io.NopCloser(bytes.NewReader([]byte(data)))); err == nil {
			t.Errorf("Restore(%q) = nil, want an error", data)
		}
	}
}

func TestReadsReturnCopies(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, running("s1", false)...)
	s := f.step(t, "s1")
	s.Spec.Args[0] = "rm"
	s.Events[0].Kind = "tampered"
	n := f.node(t, "n1")
	n.Health.Reasons = append(n.Health.Reasons, "tampered")
	if got := f.step(t, "s1"); got.Spec.Args[0] != "true" || got.Events[0].Kind != "queued" {
		t.Errorf("Step() shares memory with the state: %+v", got)
	}
	if got := f.node(t, "n1"); len(got.Health.Reasons) != 0 {
		t.Errorf("Node() shares memory with the state: %+v", got)
	}
}

func TestStepsFilter(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, mixedHistory()...)
	ids := func(steps []cluster.Step) []cluster.StepID {
		var out []cluster.StepID
		for _, s := range steps {
			out = append(out, s.ID)
		}
		return out
	}
	for _, tc := range []struct {
		filter StepFilter
		want   []cluster.StepID
	}{
		{StepFilter{}, []cluster.StepID{"s1", "s2", "s3", "s4", "s5"}},
		{StepFilter{State: cluster.StateQueued}, []cluster.StepID{"s2", "s4"}},
		{StepFilter{Node: "n1"}, []cluster.StepID{"s1"}},
		{StepFilter{State: cluster.StatePlaced, Node: "n2"}, []cluster.StepID{"s3"}},
		{StepFilter{State: cluster.StateCancelled}, []cluster.StepID{"s5"}},
	} {
		if got := ids(f.State().Steps(tc.filter)); !cmp.Equal(got, tc.want) {
			t.Errorf("Steps(%+v) = %v, want %v", tc.filter, got, tc.want)
		}
	}
	if got := ids(f.State().Assignments("n2")); !cmp.Equal(got, []cluster.StepID{"s3"}) {
		t.Errorf("Assignments(n2) = %v, want [s3]", got)
	}
}

func TestWaitIndex(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, register("n1", 4, 8*gib))
	st := f.State()

	if got, err := st.WaitIndex(t.Context(), 0); got != 1 || err != nil {
		t.Fatalf("WaitIndex(0) = %d, %v; want 1, nil", got, err)
	}
	done := make(chan uint64)
	go func() {
		idx, _ := st.WaitIndex(t.Context(), 1)
		done <- idx
	}()
	select {
	case idx := <-done:
		t.Fatalf("WaitIndex(1) returned %d before anything was applied", idx)
	case <-time.After(20 * time.Millisecond):
	}
	f.mustApply(t, submit("s1", false))
	if got := <-done; got != 2 {
		t.Errorf("WaitIndex(1) = %d, want 2", got)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if _, err := st.WaitIndex(ctx, 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitIndex(2) with nothing applied = %v, want %v", err, context.DeadlineExceeded)
	}
}
