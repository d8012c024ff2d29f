package agentd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/scheduler"
	"github.com/rodon-compute/rodon/scheduler/client"
	"github.com/rodon-compute/rodon/scheduler/schedulertest"
)

// recordingScheduler is the agent's Scheduler on the real scheduler
// (schedulertest): each call goes to it through the real client, and is
// recorded in order on its way (what the agent reported, what it was
// told), as the tests check them.
type recordingScheduler struct {
	t  *testing.T
	c  *schedulertest.Cluster
	cl *client.Client

	mu      sync.Mutex
	steps   map[cluster.StepID]cluster.Step
	reports []string
	exits   map[cluster.StepID]cluster.ExitRecord
	events  map[cluster.StepID][]cluster.Event
	// onExit, if set, runs (without mu) when an exit is reported, before
	// it is sent.
	onExit func(cluster.StepExit)
	// registered is the last registration.
	registered cluster.RegisterNode

	// store plays the blob store and the scheduler's side of workspaces
	// (assignments' access, uploads, the head a result becomes), which
	// another helper is building in the scheduler: heads are the
	// workspaces' trees by manifest digest, library the account
	// library's, and uploads what the agent asked to upload.
	store   *testStore
	heads   map[string]string
	library string
	uploads []cluster.UploadsRequest
	// refuseUploads answers every Uploads with a 403.
	refuseUploads bool
}

func newRecordingScheduler(t *testing.T) *recordingScheduler {
	c := schedulertest.New(t, schedulertest.Options{})
	return &recordingScheduler{t: t, c: c, cl: c.Client(), steps: map[cluster.StepID]cluster.Step{},
		exits: map[cluster.StepID]cluster.ExitRecord{}, events: map[cluster.StepID][]cluster.Event{},
		store: newTestStore(t), heads: map[string]string{}}
}

// assign submits st's spec as step st.ID, for node st.Node only: the
// scheduler places it there.
func (f *recordingScheduler) assign(st cluster.Step) {
	f.t.Helper()
	f.waitNode(st.Node)
	sp := st.Spec
	req := api.StepRequest{ID: string(st.ID), Image: sp.Image, Args: sp.Args, Env: sp.Env, CPU: sp.CPU, MemoryBytes: sp.MemoryBytes,
		Pids: sp.Pids, Timeout: api.Duration(sp.Timeout), WorkspaceBytes: sp.WorkspaceBytes, OutputBytes: sp.OutputBytes,
		Workspace: sp.Workspace, NoInternet: sp.NoInternet, TTY: sp.TTY, Idempotent: sp.Idempotent, Node: string(st.Node)}
	if _, err := f.cl.SubmitStep(context.Background(), req); err != nil {
		f.t.Fatalf("submit %s: %v", st.ID, err)
	}
}

// place puts st, placed on its node as attempt 1, into the scheduler's
// state by a restore: a placement the scheduler would not make itself
// (past the node's maxima, an environment that did not open), to show
// what the agent does with it.
func (f *recordingScheduler) place(st cluster.Step) {
	f.t.Helper()
	f.waitNode(st.Node)
	cur := f.c.State()
	st.State, st.Attempts = cluster.StatePlaced, 1
	st.Phases = cluster.Phases{Queued: time.Now().UTC(), Placed: time.Now().UTC()}
	f.c.Restore(cur.Nodes(), append(cur.Steps(scheduler.StepFilter{}), st))
}

// waitNode waits until node id registered.
func (f *recordingScheduler) waitNode(id cluster.NodeID) {
	f.t.Helper()
	schedulertest.Eventually(f.t, "node "+string(id)+" to register", func() bool {
		_, ok := f.c.State().Node(id)
		return ok
	})
}

// cancel asks the scheduler to cancel step id.
func (f *recordingScheduler) cancel(id cluster.StepID) {
	f.t.Helper()
	f.record("cancel requested")
	if _, err := f.cl.CancelStep(context.Background(), string(id), ""); err != nil {
		f.t.Fatalf("cancel %s: %v", id, err)
	}
}

func (f *recordingScheduler) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reports = append(f.reports, s)
}

// refused marks 4xx answers as the agent's Scheduler does
// (cmd/agentd/wiring.go): the scheduler will not accept the report
// however often it is sent.
func refused(err error) error {
	var e *client.Error
	if errors.As(err, &e) && e.Status >= 400 && e.Status < 500 {
		return errors.Join(ErrReportRefused, err)
	}
	return err
}

func (f *recordingScheduler) Register(ctx context.Context, req cluster.RegisterNode) (cluster.Node, error) {
	f.record("register " + string(req.Health.State))
	f.mu.Lock()
	f.registered = req
	f.mu.Unlock()
	return f.cl.Register(ctx, req)
}

func (f *recordingScheduler) Heartbeat(ctx context.Context, req cluster.Heartbeat) (cluster.HeartbeatResult, error) {
	res, err := f.cl.Heartbeat(ctx, req)
	return cluster.HeartbeatResult{Unwanted: res.Unwanted}, err
}

func (f *recordingScheduler) Assignments(ctx context.Context, node cluster.NodeID, index uint64, wait time.Duration) (uint64, []cluster.Step, error) {
	a, err := f.cl.Assignments(ctx, node, index, wait)
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, st := range a.Steps {
		if ws := st.Spec.Workspace; ws != "" {
			a.Steps[i].Spec.WorkspaceAccess = f.store.access(ws, f.heads[ws], false)
		}
		if f.library != "" {
			a.Steps[i].Spec.LibraryAccess = f.store.access("library", f.library, true)
		}
	}
	return a.Index, a.Steps, err
}

func (f *recordingScheduler) Uploads(ctx context.Context, req cluster.UploadsRequest) (cluster.UploadsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.uploads = append(f.uploads, req)
	if f.refuseUploads {
		return cluster.UploadsResponse{}, refused(&client.Error{Status: 403, Code: api.CodeForbidden, Message: "refused by the test"})
	}
	return f.store.uploads(req), nil
}

// file is the content of path in workspace ws's head, and whether it is
// there.
func (f *recordingScheduler) file(ws, path string) (string, bool) {
	f.mu.Lock()
	head := f.heads[ws]
	f.mu.Unlock()
	return f.store.file(head, path)
}

func (f *recordingScheduler) StepPhase(ctx context.Context, req cluster.StepPhase) error {
	f.mu.Lock()
	st := f.steps[req.Step]
	if req.State != "" {
		st.State = req.State
		f.reports = append(f.reports, "phase "+string(req.State))
	}
	if !req.Phases.CleanedUp.IsZero() {
		f.reports = append(f.reports, "cleaned up")
	}
	f.steps[req.Step] = st
	f.mu.Unlock()
	return refused(f.cl.ReportPhase(ctx, req))
}

func (f *recordingScheduler) StepEvents(ctx context.Context, req cluster.StepEvents) error {
	f.mu.Lock()
	f.events[req.Step] = append(f.events[req.Step], req.Events...)
	for _, e := range req.Events {
		if e.Kind == cluster.EventOutputTruncated {
			f.reports = append(f.reports, "event "+e.Kind)
		}
	}
	f.mu.Unlock()
	return refused(f.cl.ReportEvents(ctx, req))
}

func (f *recordingScheduler) StepExit(ctx context.Context, req cluster.StepExit) error {
	if f.onExit != nil {
		f.onExit(req)
	}
	err := refused(f.cl.ReportExit(ctx, req))
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.steps[req.Record.Step]
	st.State = req.Record.State
	f.steps[req.Record.Step] = st
	f.exits[req.Record.Step] = req.Record
	f.reports = append(f.reports, fmt.Sprintf("exit %d %s", req.Record.ExitCode, req.Record.TerminatedBy))
	if res := req.Record.Workspace; res != nil {
		// The commit: the result becomes the head (no rebase here).
		if s, ok := f.c.State().Step(req.Record.Step); ok {
			f.heads[s.Spec.Workspace] = res.Manifest
		}
	}
	return err
}

func (f *recordingScheduler) ConfirmCancel(ctx context.Context, req cluster.ConfirmCancel) error {
	f.record("cancel confirmed")
	return refused(f.cl.ConfirmCancel(ctx, req))
}

func (f *recordingScheduler) waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	waitLong(t, f, 30*time.Second, what, ok)
}
