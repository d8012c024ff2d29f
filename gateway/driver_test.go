package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// newRun creates a run of n steps ("true" each) as the editor key and
// returns it.
func (f *fixture) newRun(n int) api.Operation {
	f.t.Helper()
	steps := strings.TrimSuffix(strings.Repeat(`{"args":["true"]},`, n), ",")
	var op api.Operation
	f.do("key-editor", "POST", "/v1/runs", `{"workspace":"ws-main","steps":[`+steps+`]}`, 201, &op)
	return op
}

func (f *fixture) getRun(id string) api.Operation {
	f.t.Helper()
	var op api.Operation
	f.do("viewer", "GET", "/v1/runs/"+id, "", 200, &op)
	return op
}

func stepStates(op api.Operation) string {
	var s []string
	for _, st := range op.Steps {
		s = append(s, st.State)
	}
	return strings.Join(s, " ")
}

func TestDriverSequencesSteps(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	op := f.newRun(3)
	// The scheduler places a step as soon as it can: queued or placed,
	// nothing started.
	if got, want := stepStates(op), "queued pending pending"; got != want && got != "placed pending pending" {
		t.Fatalf("new run's steps = %s, want %s (or placed)", got, want)
	}
	for i := range 3 {
		id := stepID(op.ID, i)
		if f.sched.Accepted(id) != 1 {
			t.Fatalf("step %d not submitted once: %d", i, f.sched.Accepted(id))
		}
		if i+1 < 3 && f.sched.Accepted(stepID(op.ID, i+1)) != 0 {
			t.Fatalf("step %d submitted before step %d ended", i+1, i)
		}
		f.g.Driver().Pass(ctx) // nothing changed: nothing happens
		if i+1 < 3 && f.sched.Accepted(stepID(op.ID, i+1)) != 0 {
			t.Fatalf("step %d submitted while step %d runs", i+1, i)
		}
		f.sched.Start(id)
		f.sched.Exit(id, 0)
		f.g.Driver().Pass(ctx)
	}
	got := f.getRun(op.ID)
	if got.State != api.RunSucceeded || got.EndedAt.IsZero() || stepStates(got) != "exited exited exited" {
		t.Errorf("run = %s %v [%s], want succeeded with every step exited", got.State, got.EndedAt, stepStates(got))
	}
	if _, err := f.store.GetRecord(ctx, kindRunLive, op.ID); !IsNotFound(err) {
		t.Errorf("live marker of a settled run = %v, want it deleted", err)
	}
	// The workspace and the library travel with every step, and no step
	// is bound to a node.
	var lib api.Workspace
	f.do("viewer", "GET", "/v1/library", "", 200, &lib)
	for i := range 3 {
		st, _ := f.sched.Step(ctx, stepID(op.ID, i))
		if st.Spec.Workspace != wsMain || st.Spec.Library != lib.ID || st.Spec.Node != "" {
			t.Errorf("step %d workspace %q, library %q, node %q, want %q, %q and none", i, st.Spec.Workspace, st.Spec.Library, st.Spec.Node, wsMain, lib.ID)
		}
	}
}

// TestDriverChainsRevisions: the first step starts from the head, each
// next one from the revision the one before made (or, when it made none,
// from the one it started from); the run shows each step's revision. A
// step whose changes conflicted ends the run failed, saying so. The
// revisions are the scheduler's, made by the steps' results.
func TestDriverChainsRevisions(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	op := f.newRun(3)
	s0, s1, s2 := stepID(op.ID, 0), stepID(op.ID, 1), stepID(op.ID, 2)
	f.sched.Start(s0)
	made := f.sched.ExitWithFiles(s0, 0, map[string]string{"out/0.txt": "step 0\n"}).Revision
	if made == "" {
		t.Fatalf("step 0's changes made no revision")
	}
	f.g.Driver().Pass(ctx)
	f.sched.Start(s1) // makes no revision
	f.sched.Exit(s1, 0)
	f.g.Driver().Pass(ctx)
	// The scheduler fixed step 0's base at submission: the head.
	for i, want := range []string{f.rev, made, made} {
		if st := f.sched.step(t, stepID(op.ID, i)); st.Spec.BaseRevision != want {
			t.Errorf("step %d base revision = %q, want %q", i, st.Spec.BaseRevision, want)
		}
	}
	// data/a.txt changes after step 2 started from made; step 2 changes
	// it too: its tree is kept as a detached revision, the step fails.
	var meanwhile api.Revision
	f.do("editor", "PUT", "/v1/workspaces/ws-main/files/data/a.txt", "edited meanwhile\n", 201, &meanwhile)
	f.sched.Start(s2)
	lost := f.sched.ExitWithFiles(s2, 0, map[string]string{"data/a.txt": "step 2\n"})
	if d, ok := f.sched.c.State().Revision(lost.Revision); !ok || !d.Detached {
		t.Fatalf("step 2's revision %q = %+v, want a detached one", lost.Revision, d)
	}
	f.g.Driver().Pass(ctx)
	got := f.getRun(op.ID)
	if got.Steps[0].Revision != made || got.Steps[1].Revision != "" || got.Steps[2].Revision != lost.Revision {
		t.Errorf("steps' revisions = %q %q %q, want %s, none, %s", got.Steps[0].Revision, got.Steps[1].Revision, got.Steps[2].Revision, made, lost.Revision)
	}
	if got.State != api.RunFailed || got.Steps[2].State != api.StepFailed || !strings.Contains(got.Steps[2].Reason, "workspace conflict: data/a.txt") ||
		len(got.Errors) != 1 || !strings.Contains(got.Errors[0], "workspace conflict") {
		t.Errorf("run = %s, step 2 %s %q, errors %q, want failed with the conflict named", got.State, got.Steps[2].State, got.Steps[2].Reason, got.Errors)
	}
	if !strings.Contains(got.Steps[2].Reason, "changed by "+meanwhile.ID+" since "+made) {
		t.Errorf("step 2's reason %q, want it to name %s and %s", got.Steps[2].Reason, meanwhile.ID, made)
	}
}

func TestDriverFailureEndsRun(t *testing.T) {
	f := newFixture(t)
	op := f.newRun(3)
	s0 := stepID(op.ID, 0)
	f.sched.Start(s0)
	f.sched.Exit(s0, 3)
	f.g.Driver().Pass(t.Context())
	got := f.getRun(op.ID)
	if got.State != api.RunFailed || stepStates(got) != "exited cancelled cancelled" {
		t.Errorf("run = %s [%s], want failed [exited cancelled cancelled]", got.State, stepStates(got))
	}
	if len(got.Errors) != 1 || !strings.Contains(got.Errors[0], "exited with code 3") {
		t.Errorf("errors = %q, want step 0's exit code", got.Errors)
	}
	for i := 1; i < 3; i++ {
		if n := f.sched.Accepted(stepID(op.ID, i)); n != 0 {
			t.Errorf("step %d of a failed run was submitted %d times", i, n)
		}
	}
	// A platform failure ends it too, its reason scrubbed.
	op = f.newRun(2)
	f.sched.Fail(stepID(op.ID, 0), "image pull on "+testNode+" (10.0.0.9:7200) failed")
	f.g.Driver().Pass(t.Context())
	got = f.getRun(op.ID)
	if got.State != api.RunFailed || strings.Contains(fmt.Sprint(got), testNode) || strings.Contains(fmt.Sprint(got), "10.0.0.9") {
		t.Errorf("run = %+v, want failed without the node's name or address", got)
	}
}

// TestDriverCancelLostStep: a cancel that found its step lost (the node
// stopped answering before the cancel reached it) is unverified, never
// confirmed: nobody saw the process go.
func TestDriverCancelLostStep(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	op := f.newRun(1)
	s0 := stepID(op.ID, 0)
	f.sched.Start(s0)
	f.sched.Lose()
	f.do("editor", "POST", "/v1/runs/"+op.ID+"/cancel", "", 200, nil)
	f.g.Driver().Pass(ctx)
	f.g.Driver().Pass(ctx)
	got := f.getRun(op.ID)
	if got.Cancel == nil || !got.Cancel.ConfirmedAt.IsZero() || got.Cancel.Unverified == "" {
		t.Fatalf("cancel of a run whose step was lost = %+v, want unverified and not confirmed", got.Cancel)
	}
}

// TestDriverCancel: a run's cancel shows requested_at at once, and
// confirmed_at only once the scheduler confirmed its step's cancel.
func TestDriverCancel(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	op := f.newRun(3)
	s0 := stepID(op.ID, 0)
	f.sched.Start(s0)
	var got api.Operation
	f.do("editor", "POST", "/v1/runs/"+op.ID+"/cancel", "", 200, &got)
	if got.Cancel == nil || got.Cancel.RequestedAt.IsZero() || !got.Cancel.ConfirmedAt.IsZero() {
		t.Fatalf("cancel = %+v, want requested and not confirmed", got.Cancel)
	}
	if st, _ := f.sched.Step(ctx, s0); st.Cancel == nil {
		t.Fatalf("the live step's cancel was not requested in the scheduler")
	}
	if stepStates(got) != "running cancelled cancelled" {
		t.Errorf("steps = %s, want the rest cancelled at once", stepStates(got))
	}
	// The process exits; its cancel is not confirmed yet.
	f.sched.Exit(s0, 137)
	f.g.Driver().Pass(ctx)
	got = f.getRun(op.ID)
	if got.State != api.RunCancelled || !got.Cancel.ConfirmedAt.IsZero() {
		t.Fatalf("after the exit: run %s cancel %+v, want cancelled and not confirmed", got.State, got.Cancel)
	}
	f.sched.ConfirmCancel(s0)
	f.g.Driver().Pass(ctx)
	var rec runRecord
	getRecord(ctx, f.store, kindRun, op.ID, &rec)
	if rec.Cancel.ConfirmedAt.IsZero() {
		t.Fatalf("after the confirmation: cancel %+v, want confirmed", rec.Cancel)
	}
	if got = f.getRun(op.ID); got.Cancel.ConfirmedAt.IsZero() {
		t.Errorf("operation cancel %+v, want confirmed", got.Cancel)
	}
	for i := 1; i < 3; i++ {
		if n := f.sched.Accepted(stepID(op.ID, i)); n != 0 {
			t.Errorf("step %d of a cancelled run was submitted", i)
		}
	}
	// Cancelling again is a no-op; an ended run without cancel refuses.
	f.do("editor", "POST", "/v1/runs/"+op.ID+"/cancel", "", 200, nil)
	done := f.newRun(1)
	f.sched.Start(stepID(done.ID, 0))
	f.sched.Exit(stepID(done.ID, 0), 0)
	f.g.Driver().Pass(ctx)
	f.do("editor", "POST", "/v1/runs/"+done.ID+"/cancel", "", 409, nil)

	// A cancel that kills the last step ends the run cancelled, not
	// succeeded (nothing was left to skip).
	last := f.newRun(1)
	sl := stepID(last.ID, 0)
	f.sched.Start(sl)
	f.do("editor", "POST", "/v1/runs/"+last.ID+"/cancel", "", 200, nil)
	f.sched.Exit(sl, 137)
	f.g.Driver().Pass(ctx)
	if got = f.getRun(last.ID); got.State != api.RunCancelled {
		t.Errorf("one-step run whose step the cancel killed = %s, want cancelled", got.State)
	}
}

// TestDriversConcurrently runs two gateways' drivers on one store and
// scheduler: every step is submitted exactly once, in order.
func TestDriversConcurrently(t *testing.T) {
	f := newFixture(t)
	cfg := DefaultConfig()
	cfg.Site, cfg.OwnerEmail, cfg.DriverInterval = testSite, "", 5*time.Millisecond
	var drivers []*Driver
	for range 2 {
		g, err := New(cfg, f.raw, f.sched, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		drivers = append(drivers, g.Driver())
	}
	var runs []string
	for range 4 {
		runs = append(runs, f.newRun(3).ID)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, d := range drivers {
		wg.Go(func() { d.Run(ctx) })
	}
	// The node: run every step not started yet to a 0 exit.
	wg.Go(func() {
		for ctx.Err() == nil {
			for _, id := range f.sched.StepIDs() {
				if st, _ := f.sched.Step(ctx, id); st.State == "queued" || st.State == "placed" {
					f.sched.Start(id)
					f.sched.Exit(id, 0)
				}
			}
			time.Sleep(time.Millisecond)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		all := true
		for _, id := range runs {
			var rec runRecord
			getRecord(t.Context(), f.store, kindRun, id, &rec)
			all = all && rec.State == api.RunSucceeded
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			wg.Wait()
			t.Fatalf("runs did not all succeed in 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	for _, id := range runs {
		for i := range 3 {
			if n := f.sched.Accepted(stepID(id, i)); n != 1 {
				t.Errorf("step %s accepted %d times, want 1", stepID(id, i), n)
			}
		}
		for i := 1; i < 3; i++ {
			prev, _ := f.sched.Step(t.Context(), stepID(id, i-1))
			cur, _ := f.sched.Step(t.Context(), stepID(id, i))
			if cur.CreateIndex < prev.ModifyIndex {
				t.Errorf("step %s submitted before step %s ended", cur.ID, prev.ID)
			}
		}
	}
}

// TestDriverRunStops: Run returns nil once its context ends, its
// watchers stopped.
func TestDriverRunStops(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.g.Driver().Run(ctx) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// TestDriverRetriesStoreFailure: a failed write of the run record is
// retried at the next pass, and the step is not submitted twice.
func TestDriverRetriesStoreFailure(t *testing.T) {
	f := newFixture(t)
	op := f.newRun(2)
	s0 := stepID(op.ID, 0)
	f.sched.Start(s0)
	f.sched.Exit(s0, 0)
	f.store.FailPuts(1)
	f.g.Driver().Pass(t.Context()) // submits step 1, fails to record it
	f.g.Driver().Pass(t.Context()) // conflict on the submission: records it
	if n := f.sched.Accepted(stepID(op.ID, 1)); n != 1 {
		t.Errorf("step 1 accepted %d times, want 1", n)
	}
	var rec runRecord
	getRecord(t.Context(), f.store, kindRun, op.ID, &rec)
	if rec.Steps[1].Status != stepSubmitted {
		t.Errorf("step 1 status = %s, want submitted", rec.Steps[1].Status)
	}
}
