package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// TestRunPageSurvivesCompaction: each step's view is kept in the run
// record when it ends, so that once the scheduler compacts its terminal
// steps away the run page shows what it showed: state, exit code,
// terminated_by, phases, events, denied packets, files changed, errors,
// cancel. A step whose sandbox is not cleaned up yet keeps the run live
// until it is.
func TestRunPageSurvivesCompaction(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	op := f.newRun(2)
	s0, s1 := op.Steps[0].ID, op.Steps[1].ID
	f.sched.Start(s0)
	f.sched.AddTypedEvent(s0, api.Event{Kind: api.EventEgressDenied, Message: "egress denied: 169.254.169.254:80, metadata, 3 packets",
		Egress: &api.Egress{Reason: "metadata", Destination: "169.254.169.254:80", Protocol: "tcp", Packets: 3}})
	f.sched.AddTypedEvent(s0, api.Event{Kind: api.EventFilesChanged, Message: "2 files changed: +chart.png, ~summary.csv",
		Files: &api.FilesChanged{Added: []string{"chart.png"}, Modified: []string{"summary.csv"}, Removed: []string{}}})
	f.sched.Exit(s0, 0)
	live := map[string]api.RunStep{}
	var step0, step1 api.RunStep
	f.do("viewer", "GET", "/v1/steps/"+s0, "", 200, &step0)
	live[s0] = step0
	f.g.Driver().Pass(ctx)

	// Step 1 exits 3, its sandbox not cleaned up yet.
	f.sched.Start(s1)
	f.sched.AddEvent(s1, "progress", "half way")
	f.sched.agent.ExitWith(s1, cluster.ExitRecord{State: cluster.StateExited, TerminatedBy: cluster.ByExit, ExitCode: 3,
		Phases: cluster.Phases{Exited: time.Now().UTC()}})
	f.g.Driver().Pass(ctx)
	if _, err := f.store.GetRecord(ctx, kindRunLive, op.ID); err != nil {
		t.Fatalf("run whose last step is not cleaned up: marker %v, want it still live", err)
	}
	f.sched.agent.Phase(s1, "", cluster.Phases{CleanedUp: time.Now().UTC()})
	f.do("viewer", "GET", "/v1/steps/"+s1, "", 200, &step1)
	live[s1] = step1
	f.g.Driver().Pass(ctx)
	if _, err := f.store.GetRecord(ctx, kindRunLive, op.ID); !IsNotFound(err) {
		t.Fatalf("settled run's marker = %v, want it deleted", err)
	}
	before := f.getRun(op.ID)
	if before.State != api.RunFailed || len(before.Errors) != 1 || before.FilesChanged == nil || before.Steps[1].Cleanup != "done" {
		t.Fatalf("run = %+v, want failed with one error, files changed, step 1 cleaned up", before)
	}
	for _, id := range []string{s0, s1} {
		f.sched.Compact(id)
	}
	f.sched.ResetReads()
	after := f.getRun(op.ID)
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("run page after compaction (-before +after):\n%s", diff)
	}
	for i, id := range []string{s0, s1} {
		var got api.RunStep
		f.do("viewer", "GET", "/v1/steps/"+id, "", 200, &got)
		if diff := cmp.Diff(live[id], got); diff != "" {
			t.Errorf("step %d after compaction, against what the scheduler showed (-live +kept):\n%s", i, diff)
		}
	}
	if n, _ := f.sched.Reads(); n != 0 {
		t.Errorf("reading a settled run asked the scheduler %d times, want none", n)
	}

	// A cancelled run keeps its confirmed cancel.
	op = f.newRun(1)
	f.sched.Start(op.Steps[0].ID)
	f.do("editor", "POST", "/v1/runs/"+op.ID+"/cancel", "", 200, nil)
	f.sched.Exit(op.Steps[0].ID, 137)
	f.sched.ConfirmCancel(op.Steps[0].ID)
	f.g.Driver().Pass(ctx)
	before = f.getRun(op.ID)
	f.sched.Compact(op.Steps[0].ID)
	after = f.getRun(op.ID)
	if before.State != api.RunCancelled || before.Cancel == nil || before.Cancel.ConfirmedAt.IsZero() || !cmp.Equal(before, after) {
		t.Errorf("cancelled run before %+v and after compaction %+v: want cancelled, confirmed, the same", before, after)
	}
}

// TestViewBounds: a kept view holds the latest 64 events, each message at
// most 1 KiB, and a run record with its views stays under the store's
// 256 KiB however much its steps said.
func TestViewBounds(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	var steps []string
	for range maxSteps {
		steps = append(steps, `{"args":["true"]}`)
	}
	var op api.Operation
	f.do("key-editor", "POST", "/v1/runs", `{"workspace":"ws-main","steps":[`+join(steps)+`]}`, 201, &op)
	for _, s := range op.Steps {
		f.sched.Start(s.ID)
		// The scheduler keeps a step's latest cluster.MaxEvents events;
		// each of these is as large as a node may make one (20 long paths).
		for i := range 70 {
			var paths []string
			for j := range 20 {
				paths = append(paths, fmt.Sprintf("%0150d/%c%d", j, 'a'+i%26, i))
			}
			f.sched.AddTypedEvent(s.ID, api.Event{Kind: api.EventFilesChanged, Message: "files changed",
				Files: &api.FilesChanged{Added: paths, Modified: []string{}, Removed: []string{}}})
		}
		f.sched.Exit(s.ID, 0)
		f.g.Driver().Pass(ctx)
	}
	rec, err := f.store.GetRecord(ctx, kindRun, op.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Value) > maxStoredRun {
		t.Errorf("run record is %d bytes, want at most %d", len(rec.Value), maxStoredRun)
	}
	var run runRecord
	json.Unmarshal(rec.Value, &run)
	if run.State != api.RunSucceeded {
		t.Fatalf("run = %s, want succeeded", run.State)
	}
	first := run.Steps[0].View
	if len(first.Events) > maxViewEvents || first.EventsOmitted == 0 || len(first.Events[0].Message) > maxViewText {
		t.Errorf("kept view: %d events, %d omitted, first message %d bytes; want at most %d, the rest counted, at most %d bytes",
			len(first.Events), first.EventsOmitted, len(first.Events[0].Message), maxViewEvents, maxViewText)
	}
}

func join(s []string) string { return strings.Join(s, ",") }

// TestRetention: run records past --run-retention are deleted with their
// index entries by the maintenance pass, oldest first; a live run is kept
// until it settles; gateways racing delete each once; expired sign-ins
// go too.
func TestRetention(t *testing.T) {
	var mu sync.Mutex
	clock := time.Now().UTC()
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	f := newFixtureWith(t, func(c *Config) { c.RunRetention = time.Hour; c.Now = now })
	ctx := t.Context()
	var ended []string
	for range 3 {
		op := f.newRun(1)
		f.sched.Start(op.Steps[0].ID)
		f.sched.Exit(op.Steps[0].ID, 0)
		f.g.Driver().Pass(ctx)
		ended = append(ended, op.ID)
	}
	advance(30 * time.Minute)
	young := f.newRun(1)
	f.sched.Start(young.Steps[0].ID)
	f.sched.Exit(young.Steps[0].ID, 0)
	f.g.Driver().Pass(ctx)
	expired := f.session(accountID("viewer@example.com"))
	var s signinRecord
	v, _ := getRecord(ctx, f.store, kindSignin, digest(expired.cookie), &s)
	s.ExpiresAt = now().Add(-time.Second)
	putRecord(ctx, f.store, kindSignin, digest(expired.cookie), v, &s)

	if res, err := f.g.Maintain(ctx); err != nil || res.Runs != 0 || res.Signins != 1 {
		t.Fatalf("first pass = %+v, %v; want no run deleted (none past retention), one expired sign-in", res, err)
	}
	advance(45 * time.Minute) // the first runs are 75 minutes old, the young one 45
	peer, err := New(f.g.cfg, f.raw, f.sched, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]MaintainResult, 2)
	for i, g := range []*Gateway{f.g, peer} {
		wg.Go(func() {
			r, err := g.Maintain(ctx)
			if err != nil {
				t.Errorf("maintain: %v", err)
			}
			results[i] = r
		})
	}
	wg.Wait()
	if got := results[0].Runs + results[1].Runs; got != 3 {
		t.Errorf("two racing passes deleted %d runs, want the 3 past retention once", got)
	}
	for _, id := range ended {
		f.do("key-viewer", "GET", "/v1/runs/"+id, "", 404, nil)
		for _, k := range []string{kindRun, kindRunLive} {
			if _, err := f.store.GetRecord(ctx, k, id); !IsNotFound(err) {
				t.Errorf("%s/%s after retention: %v, want gone", k, id, err)
			}
		}
		if _, err := f.store.GetRecord(ctx, kindRunWS, wsIndexID(wsMain, id)); !IsNotFound(err) {
			t.Errorf("workspace index entry of %s after retention: %v, want gone", id, err)
		}
	}
	// The fixture's run is as old, but live: kept, and so is the young.
	f.do("key-viewer", "GET", "/v1/runs/"+f.run, "", 200, nil)
	f.do("key-viewer", "GET", "/v1/runs/"+young.ID, "", 200, nil)
	if n := f.store.Count(kindRunExpiry); n != 2 {
		t.Errorf("%d retention entries left, want 2 (the live run's and the young one's)", n)
	}
	var runs []api.Operation
	f.do("key-viewer", "GET", "/v1/runs", "", 200, &runs)
	if len(runs) != 2 {
		t.Errorf("list after retention has %d runs, want 2", len(runs))
	}
	// The live run goes once it settled and is past retention.
	f.sched.Exit(stepID(f.run, 0), 1)
	f.g.Driver().Pass(ctx)
	if res, _ := f.g.Maintain(ctx); res.Runs != 1 {
		t.Errorf("pass after the old run settled deleted %d runs, want 1", res.Runs)
	}
	if DefaultConfig().RunRetention != 90*24*time.Hour {
		t.Errorf("default run retention %v, want 90 days", DefaultConfig().RunRetention)
	}
}
