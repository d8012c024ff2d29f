package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
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

	// uploads are the agent's upload requests, in order.
	uploads []cluster.UploadsRequest
}

func newRecordingScheduler(t *testing.T) *recordingScheduler {
	c := schedulertest.New(t, schedulertest.Options{})
	return &recordingScheduler{t: t, c: c, cl: c.Client(), steps: map[cluster.StepID]cluster.Step{},
		exits: map[cluster.StepID]cluster.ExitRecord{}, events: map[cluster.StepID][]cluster.Event{}}
}

// assign submits st's spec as step st.ID, for node st.Node only: the
// scheduler places it there.
func (f *recordingScheduler) assign(st cluster.Step) {
	f.t.Helper()
	f.waitNode(st.Node)
	sp := st.Spec
	req := api.StepRequest{ID: string(st.ID), Image: sp.Image, Args: sp.Args, Env: sp.Env, CPU: sp.CPU, MemoryBytes: sp.MemoryBytes,
		Pids: sp.Pids, Timeout: api.Duration(sp.Timeout), WorkspaceBytes: sp.WorkspaceBytes, OutputBytes: sp.OutputBytes,
		Workspace: sp.Workspace, BaseRevision: sp.BaseRevision, Library: sp.Library, NoInternet: sp.NoInternet, TTY: sp.TTY, Idempotent: sp.Idempotent, Node: string(st.Node),
		WorkspaceReadOnly: sp.WorkspaceReadOnly}
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
	return a.Index, a.Steps, err
}

func (f *recordingScheduler) Uploads(ctx context.Context, req cluster.UploadsRequest) (cluster.UploadsResponse, error) {
	f.mu.Lock()
	f.uploads = append(f.uploads, req)
	f.mu.Unlock()
	res, err := f.cl.AgentUploads(ctx, req)
	return res, refused(err)
}

// seed writes files (path -> content; a path ending in "*" is written
// 0755) into workspace ws through the scheduler's workspace API, one
// revision each, and returns the last.
func (f *recordingScheduler) seed(ws string, files map[string]string) api.Revision {
	f.t.Helper()
	var rev api.Revision
	for p, c := range files {
		var opts client.WriteOptions
		if q, ok := strings.CutSuffix(p, "*"); ok {
			p, opts.Mode = q, 0o755
		}
		var err error
		if rev, err = f.cl.PutFile(context.Background(), ws, p, strings.NewReader(c), int64(len(c)), opts); err != nil {
			f.t.Fatalf("seed %s/%s: %v", ws, p, err)
		}
	}
	return rev
}

// file is the content of path in workspace ws's head, and whether it is
// there.
func (f *recordingScheduler) file(ws, path string) (string, bool) {
	r, err := f.cl.File(context.Background(), ws, path, client.FileOptions{})
	if err != nil {
		return "", false
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	return string(b), err == nil
}

// tree is workspace ws's tree at revision rev, by path.
func (f *recordingScheduler) tree(ws, rev string) map[string]api.TreeEntry {
	f.t.Helper()
	es, err := f.cl.Tree(context.Background(), ws, rev, "")
	if err != nil {
		f.t.Fatalf("tree of %s at %s: %v", ws, rev, err)
	}
	out := map[string]api.TreeEntry{}
	for _, e := range es {
		out[e.Path] = e
	}
	return out
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
