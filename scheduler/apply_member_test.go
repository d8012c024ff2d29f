package scheduler

import (
	"bytes"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rodon-compute/rodon/cluster"
)

func TestApplyMembers(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t,
		cluster.SetMember{ID: "m1", RaftAddress: "10.0.0.1:7101", HTTPAddress: "10.0.0.1:7100", At: at(1)},
		cluster.SetMember{ID: "m2", RaftAddress: "10.0.0.2:7101", HTTPAddress: "10.0.0.2:7100", At: at(1)},
		cluster.SetMember{ID: "m1", RaftAddress: "10.0.0.1:7101", HTTPAddress: "10.0.0.9:7100", At: at(2)},
		cluster.RemoveMember{ID: "m2", At: at(3)},
		cluster.RemoveMember{ID: "never", At: at(3)},
	)
	want := []cluster.Member{{ID: "m1", RaftAddress: "10.0.0.1:7101", HTTPAddress: "10.0.0.9:7100", ModifyIndex: 3}}
	if diff := cmp.Diff(want, f.State().Members()); diff != "" {
		t.Errorf("Members() (-want +got):\n%s", diff)
	}
	checkErr(t, "Apply(SetMember without http address)",
		f.applyErr(t, cluster.SetMember{ID: "m3", RaftAddress: "10.0.0.3:7101"}), ErrInvalid)

	// Members survive a snapshot.
	g := newTestFSM(t)
	if err := g.Restore(io.NopCloser(bytes.NewReader(persist(t, f.FSM)))); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, g.State().Members()); diff != "" {
		t.Errorf("Members() after a snapshot restore (-want +got):\n%s", diff)
	}
}

func TestApplyRestore(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, mixedHistory()...)
	f.mustApply(t, cluster.SetMember{ID: "m1", RaftAddress: "a:1", HTTPAddress: "a:2", At: at(1)})
	doc := f.FSM.document()
	saved := cluster.Restore{At: at(100)}
	for _, n := range doc.Nodes {
		saved.Nodes = append(saved.Nodes, n.Clone())
	}
	for _, s := range doc.Steps {
		saved.Steps = append(saved.Steps, s.Clone())
	}
	wantSteps, wantNodes, wantUsage := f.State().Steps(StepFilter{}), f.State().Nodes(), f.State().Usage()

	// Change everything, then restore.
	f.mustApply(t, submit("s9", false), exit("s2", "n1", 1, cluster.StateExited, 0), register("n7", 1, gib))
	before := f.State().AssignmentsIndex("n2")
	f.mustApply(t, saved)

	st := f.State()
	ignoreIndex := cmpopts.IgnoreFields(cluster.Step{}, "ModifyIndex")
	if diff := cmp.Diff(wantSteps, st.Steps(StepFilter{}), ignoreIndex); diff != "" {
		t.Errorf("steps after Restore (-saved +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantUsage, st.Usage()); diff != "" {
		t.Errorf("usage after Restore (-saved +got):\n%s", diff)
	}
	nodes := st.Nodes()
	if diff := cmp.Diff(wantNodes, nodes, equateAddr, cmpopts.IgnoreFields(cluster.Node{}, "ModifyIndex", "LastHeartbeat")); diff != "" {
		t.Errorf("nodes after Restore (-saved +got):\n%s", diff)
	}
	for _, n := range nodes {
		if n.State != cluster.NodeDown && !n.LastHeartbeat.Equal(at(100)) {
			t.Errorf("node %s after Restore: last heartbeat %v, want the restore's time (a fresh TTL)", n.ID, n.LastHeartbeat)
		}
	}
	if got := st.AssignmentsIndex("n2"); got != f.idx || got <= before {
		t.Errorf("AssignmentsIndex(n2) after Restore = %d, want the restore's index %d", got, f.idx)
	}
	if _, ok := st.Member("m1"); !ok {
		t.Errorf("Restore dropped the member records")
	}

	// A bad document changes nothing.
	bad := saved
	bad.Steps = append(bad.Steps[:len(bad.Steps):len(bad.Steps)], saved.Steps[0])
	idx := st.Index()
	checkErr(t, "Apply(Restore with a duplicate step)", f.applyErr(t, bad), ErrInvalid)
	if diff := cmp.Diff(wantSteps, st.Steps(StepFilter{}), ignoreIndex); diff != "" || st.Index() != idx+1 {
		t.Errorf("a refused Restore changed the steps (-saved +got):\n%s", diff)
	}
}

func TestAssignmentsIndex(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, register("n1", 4, 8*gib), register("n2", 4, 8*gib), submit("s1", false))
	st := f.State()
	if got := st.AssignmentsIndex("n1"); got != 0 {
		t.Errorf("AssignmentsIndex(n1) with nothing placed = %d, want 0", got)
	}
	f.mustApply(t, place("s1", "n1"))
	placed := f.idx
	f.mustApply(t, cluster.Heartbeat{Node: "n1", Health: cluster.Health{State: cluster.NodeReady}, At: at(3)}, submit("s2", false))
	if got := st.AssignmentsIndex("n1"); got != placed {
		t.Errorf("AssignmentsIndex(n1) after unrelated entries = %d, want %d", got, placed)
	}
	f.mustApply(t, cancel("s1", 4))
	if got := st.AssignmentsIndex("n1"); got != f.idx {
		t.Errorf("AssignmentsIndex(n1) after a cancel = %d, want %d", got, f.idx)
	}
	f.mustApply(t, exit("s1", "n1", 1, cluster.StateCancelled, 143))
	if got := st.AssignmentsIndex("n1"); got != f.idx {
		t.Errorf("AssignmentsIndex(n1) after the exit = %d, want %d", got, f.idx)
	}
	if got := st.AssignmentsIndex("n2"); got != 0 {
		t.Errorf("AssignmentsIndex(n2) = %d, want 0", got)
	}
}
