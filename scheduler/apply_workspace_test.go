package scheduler

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

const testManifest = "0000000000000000000000000000000000000000000000000000000000000000"

// commit is a CommitRevision of revision id in workspace ws-a by an
// account, expecting head.
func commit(id, head string) cluster.CommitRevision {
	return cluster.CommitRevision{ExpectHead: head, Revision: cluster.Revision{ID: id, Workspace: "ws-a", Parent: head,
		Author: api.Author{Kind: api.AuthorAccount, ID: "acct-1"}, CreatedAt: at(5), Manifest: testManifest,
		Changes: api.FilesChanged{Added: []string{"f-" + id}, Modified: []string{}, Removed: []string{}}}}
}

func detached(id, parent string, paths ...string) cluster.CommitRevision {
	c := commit(id, "")
	c.Revision.Parent, c.Revision.Detached, c.Revision.Conflict = parent, true, paths
	return c
}

func TestApplyCommitRevision(t *testing.T) {
	f := newTestFSM(t)
	res := f.apply(t, commit("rev-1", ""))
	r1, ok := res.(*cluster.Revision)
	if !ok || r1.Number != 1 || r1.Parent != "" {
		t.Fatalf("commit rev-1 = %#v, want revision number 1 without a parent", res)
	}
	f.mustApply(t, commit("rev-2", "rev-1"))
	for _, tc := range []struct {
		name string
		c    cluster.CommitRevision
		want error
	}{
		{"stale head", commit("rev-3", "rev-1"), ErrHeadMoved},
		{"empty expected head", commit("rev-3", ""), ErrHeadMoved},
		{"same id twice", commit("rev-2", "rev-2"), ErrExists},
		{"bad id", commit("r3", "rev-2"), ErrInvalid},
		{"bad workspace", func() cluster.CommitRevision { c := commit("rev-3", "rev-2"); c.Revision.Workspace = "a"; return c }(), ErrInvalid},
		{"bad manifest", func() cluster.CommitRevision { c := commit("rev-3", "rev-2"); c.Revision.Manifest = "x"; return c }(), ErrInvalid},
		{"no author", func() cluster.CommitRevision {
			c := commit("rev-3", "rev-2")
			c.Revision.Author = api.Author{}
			return c
		}(), ErrInvalid},
		{"detached without paths", detached("rev-3", "rev-1"), ErrInvalid},
		{"parent of another workspace", detached("rev-3", "rev-9", "f"), ErrInvalid},
		{"a step's revision with no step", func() cluster.CommitRevision { c := commit("rev-3", "rev-2"); c.Revision.Step = "s1"; return c }(), ErrNotFound},
	} {
		checkErr(t, tc.name, f.applyErr(t, tc.c), tc.want)
	}
	d := f.apply(t, detached("rev-d", "rev-1", "f-rev-2"))
	if r, ok := d.(*cluster.Revision); !ok || r.Number != 0 || !r.Detached {
		t.Fatalf("detached commit = %#v, want a detached revision numbered 0", d)
	}
	w, ok := f.State().Workspace("ws-a")
	if !ok || w.Head != "rev-2" || w.Number != 2 {
		t.Errorf("Workspace(ws-a) = %+v, %v; want head rev-2, number 2", w, ok)
	}
	if r, ok := f.State().Revision("rev-2"); !ok || r.Parent != "rev-1" || r.Number != 2 {
		t.Errorf("Revision(rev-2) = %+v, %v; want number 2 after rev-1", r, ok)
	}
	if r, ok := f.State().Revision("rev-d"); !ok || !r.Detached {
		t.Errorf("Revision(rev-d) = %+v, %v; want it kept, detached", r, ok)
	}
}

// wsStep is the commands that get step id with workspace ws-a running
// on n1.
func wsStep(id cluster.StepID, base string) []cluster.Command {
	s := submit(id, false)
	s.Spec.Workspace, s.Spec.BaseRevision = "ws-a", base
	return []cluster.Command{s, place(id, "n1"), phase(id, "n1", 1, cluster.StateStarting), phase(id, "n1", 1, cluster.StateRunning)}
}

// stepCommit is the commit of a step's result.
func stepCommit(id, head string, step cluster.StepID) *cluster.CommitRevision {
	c := commit(id, head)
	c.Revision.Author, c.Revision.Step = api.Author{Kind: api.AuthorStep, ID: string(step)}, string(step)
	return &c
}

func TestApplyExitCommits(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, register("n1", 4, 8*gib))
	f.mustApply(t, wsStep("s1", "")...)
	f.mustApply(t, cluster.StepEvents{Step: "s1", Node: "n1", Attempt: 1, Events: []cluster.Event{
		{Time: at(8), Kind: api.EventFilesChanged, Message: "1 file changed", Files: &api.FilesChanged{Added: []string{"other"}}}}})
	e := exit("s1", "n1", 1, cluster.StateExited, 0)
	e.Commit = stepCommit("rev-1", "", "s1")
	if res := f.apply(t, e); res != nil {
		t.Fatalf("exit with its commit = %#v, want nil", res)
	}
	s := f.step(t, "s1")
	if s.State != cluster.StateExited || s.Revision != "rev-1" {
		t.Fatalf("step after its exit: %s, revision %q; want exited with rev-1", s.State, s.Revision)
	}
	r, _ := f.State().Revision("rev-1")
	for _, ev := range s.Events {
		if ev.Kind == api.EventFilesChanged {
			if diff := cmp.Diff(r.Changes, *ev.Files); diff != "" {
				t.Errorf("files_changed event against the revision's changes (-revision +event):\n%s", diff)
			}
		}
	}

	// A duplicated report commits nothing more.
	dup := exit("s1", "n1", 1, cluster.StateExited, 0)
	dup.Commit = stepCommit("rev-2", "rev-1", "s1")
	if err := f.applyErr(t, dup); err != nil {
		t.Fatalf("repeated exit = %v, want nil", err)
	}
	if _, ok := f.State().Revision("rev-2"); ok {
		t.Errorf("a repeated exit report committed a second revision")
	}

	// The head moved: the exit applies, the revision does not, and the
	// result says so.
	f.mustApply(t, wsStep("s2", "")...)
	e2 := exit("s2", "n1", 1, cluster.StateExited, 0)
	e2.Commit = stepCommit("rev-3", "", "s2")
	er, ok := f.apply(t, e2).(*ExitResult)
	if !ok || !errors.Is(er.Refused, ErrHeadMoved) {
		t.Fatalf("exit with a stale commit = %#v, want an ExitResult refused with ErrHeadMoved", er)
	}
	if s := f.step(t, "s2"); s.State != cluster.StateExited || s.Revision != "" {
		t.Fatalf("step s2: %s, revision %q; want exited without a revision", s.State, s.Revision)
	}
	// The leader commits it again, alone: the step gets it, once.
	f.mustApply(t, *stepCommit("rev-3", "rev-1", "s2"))
	if s := f.step(t, "s2"); s.Revision != "rev-3" {
		t.Fatalf("step s2's revision after the second commit = %q, want rev-3", s.Revision)
	}
	checkErr(t, "a second revision for s2", f.applyErr(t, *stepCommit("rev-4", "rev-3", "s2")), ErrTransition)
}

func TestRevisionsPage(t *testing.T) {
	f := newTestFSM(t)
	head := ""
	for i := 1; i <= 7; i++ {
		id := fmt.Sprintf("rev-%d", i)
		f.mustApply(t, commit(id, head))
		head = id
	}
	f.mustApply(t, detached("rev-d", "rev-1", "f"))
	var got []string
	var before int64
	for pages := 0; ; pages++ {
		revs, next, more := f.State().RevisionsPage("ws-a", before, 3)
		for _, r := range revs {
			got = append(got, r.ID)
		}
		if !more {
			break
		}
		if pages > 5 {
			t.Fatal("RevisionsPage does not end")
		}
		before = next
	}
	want := []string{"rev-7", "rev-6", "rev-5", "rev-4", "rev-3", "rev-2", "rev-1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("revisions by pages (-want +got):\n%s", diff)
	}
}

func TestSnapshotKeepsRevisions(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, commit("rev-1", ""), commit("rev-2", "rev-1"), detached("rev-d", "rev-1", "f-rev-2"))
	data := persist(t, f.FSM)
	g := newTestFSM(t)
	if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	for _, id := range []string{"rev-1", "rev-2", "rev-d"} {
		a, _ := f.State().Revision(id)
		b, ok := g.State().Revision(id)
		if !ok {
			t.Errorf("revision %s lost by a snapshot", id)
		}
		if diff := cmp.Diff(a, b); diff != "" {
			t.Errorf("revision %s after restore (-orig +restored):\n%s", id, diff)
		}
	}
	if w, _ := g.State().Workspace("ws-a"); w.Head != "rev-2" || w.Number != 2 {
		t.Errorf("workspace after restore = %+v, want head rev-2 number 2", w)
	}
	revs, _, _ := g.State().RevisionsPage("ws-a", 0, 10)
	if len(revs) != 2 {
		t.Errorf("history after restore: %d revisions, want 2", len(revs))
	}
	// The compare-and-set goes on from the restored head.
	g.idx = f.idx
	g.mustApply(t, commit("rev-3", "rev-2"))
	if !bytes.Contains(data, []byte(`"revisions"`)) {
		t.Errorf("the snapshot has no revisions: %s", data)
	}
}

// TestStateHoldsNoURLs: a submission with workspace URLs is refused, and
// what an assignment carries never reaches the log or a snapshot.
func TestStateHoldsNoURLs(t *testing.T) {
	f := newTestFSM(t)
	s := submit("s1", false)
	s.Spec.Workspace = "ws-a"
	s.Spec.WorkspaceAccess = &cluster.WorkspaceAccess{Workspace: "ws-a", URLs: map[string]string{"d": "https://x/?sig=1"}}
	checkErr(t, "a submission with URLs", f.applyErr(t, s), ErrInvalid)
	f.mustApply(t, register("n1", 4, 8*gib))
	f.mustApply(t, wsStep("s2", "")...)
	if data := persist(t, f.FSM); strings.Contains(string(data), "urls") || strings.Contains(string(data), "sig=") {
		t.Errorf("the snapshot holds URLs: %s", data)
	}
}

// TestApplyReadOnlyStepCommitsNothing: a step whose workspace is
// read-only gets no revision, neither with its exit nor after it.
func TestApplyReadOnlyStepCommitsNothing(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, register("n1", 4, 8*gib))
	cmds := wsStep("s1", "")
	sub := cmds[0].(cluster.SubmitStep)
	sub.Spec.WorkspaceReadOnly = true
	cmds[0] = sub
	f.mustApply(t, cmds...)
	e := exit("s1", "n1", 1, cluster.StateExited, 0)
	e.Commit = stepCommit("rev-1", "", "s1")
	er, ok := f.apply(t, e).(*ExitResult)
	if !ok || !errors.Is(er.Refused, ErrInvalid) {
		t.Fatalf("exit of a read-only step with a commit = %#v, want an ExitResult refused with ErrInvalid", er)
	}
	if s := f.step(t, "s1"); s.State != cluster.StateExited || s.Revision != "" {
		t.Fatalf("step s1: %s, revision %q; want exited without a revision", s.State, s.Revision)
	}
	checkErr(t, "a revision for a read-only step after its exit", f.applyErr(t, *stepCommit("rev-1", "", "s1")), ErrInvalid)
	if w, ok := f.State().Workspace("ws-a"); ok && w.Number != 0 {
		t.Errorf("Workspace(ws-a) = %+v, want no revision", w)
	}
}
