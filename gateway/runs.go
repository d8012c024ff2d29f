package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/gateway/agentfile"
	"github.com/rodon-compute/rodon/gateway/relay"
	"github.com/rodon-compute/rodon/internal/size"
)

// Limits of a run request.
const (
	maxSteps     = 20
	maxArgs      = 256
	maxEnv       = 128
	maxRunRecord = 200 << 10
)

// images are the step images a run may ask for (defined in agentfile).
var images = agentfile.Images

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// stepRequest checks spec (step i of a run) and returns the scheduler's
// request for it, without id and workspace.
func stepRequest(i int, spec api.StepSpec) (api.StepRequest, error) {
	field := func(name string) string { return fmt.Sprintf("steps[%d].%s", i, name) }
	req := api.StepRequest{Image: spec.Image, Args: spec.Args, Env: spec.Env, CPU: spec.CPU,
		Timeout: spec.Timeout, NoInternet: spec.NoInternet, TTY: spec.TTY}
	if req.Image == "" {
		req.Image = "base"
	}
	if !slices.Contains(images, req.Image) {
		return req, badRequest("field %q: image %q: want %s", field("image"), spec.Image, strings.Join(images, " or "))
	}
	if len(spec.Args) == 0 || spec.Args[0] == "" {
		return req, badRequest("field %q: want the command and its arguments, such as [\"python\", \"analyse.py\"]", field("args"))
	}
	if len(spec.Args) > maxArgs {
		return req, badRequest("field %q: %d arguments, at most %d", field("args"), len(spec.Args), maxArgs)
	}
	for j, a := range spec.Args {
		if !utf8.ValidString(a) || strings.ContainsRune(a, 0) {
			return req, badRequest("field \"%s[%d]\": want UTF-8 text without NUL", field("args"), j)
		}
	}
	if len(spec.Env) > maxEnv {
		return req, badRequest("field %q: %d entries, at most %d", field("env"), len(spec.Env), maxEnv)
	}
	for j, e := range spec.Env {
		// Never quote the entry: its value is a secret.
		name, _, ok := strings.Cut(e, "=")
		if !ok || !envNameRE.MatchString(name) || strings.ContainsRune(e, 0) {
			return req, badRequest("field \"%s[%d]\": want NAME=VALUE with NAME of letters, digits and _ and no NUL", field("env"), j)
		}
	}
	switch {
	case spec.CPU == 0:
		req.CPU = cluster.DefaultRequest.CPU
	case cluster.CheckCPU(spec.CPU, cluster.MaxRequest.CPU) != nil:
		return req, badRequest("field %q: %v: want %v to %v cores", field("cpu"), spec.CPU, cluster.MinRequest.CPU, cluster.MaxRequest.CPU)
	}
	req.MemoryBytes = cluster.DefaultRequest.MemoryBytes
	if spec.Memory != "" {
		n, err := size.Parse(spec.Memory)
		if err != nil {
			return req, badRequest("field %q: %v", field("memory"), err)
		}
		if cluster.CheckMemory(n, cluster.MaxRequest.MemoryBytes) != nil {
			return req, badRequest("field %q: %s: want %s to %s", field("memory"), spec.Memory,
				size.Format(cluster.MinRequest.MemoryBytes), size.Format(cluster.MaxRequest.MemoryBytes))
		}
		req.MemoryBytes = n
	}
	req.Pids = spec.Pids
	for _, sz := range []struct {
		name, value string
		dst         *int64
	}{{"workspace_size", spec.WorkspaceSize, &req.WorkspaceBytes}, {"output_cap", spec.OutputCap, &req.OutputBytes}} {
		if sz.value == "" {
			continue
		}
		n, err := size.Parse(sz.value)
		if err != nil {
			return req, badRequest("field %q: %v", field(sz.name), err)
		}
		if n == 0 {
			// Zero would be the default: a size given must be one.
			lo, hi := cluster.MinLimits, cluster.MaxLimits
			bounds := map[string][2]int64{"workspace_size": {lo.WorkspaceBytes, hi.WorkspaceBytes}, "output_cap": {lo.OutputBytes, hi.OutputBytes}}[sz.name]
			return req, badRequest("field %q: %s: want %d to %d (absent: the default)", field(sz.name), sz.value, bounds[0], bounds[1])
		}
		*sz.dst = n
	}
	// The one table of limits decides; zeros are its defaults.
	lim := cluster.Limits{Pids: req.Pids, Timeout: time.Duration(req.Timeout), WorkspaceBytes: req.WorkspaceBytes, OutputBytes: req.OutputBytes}
	var le *cluster.LimitError
	if err := lim.WithDefaults().Check(cluster.MaxLimits); errors.As(err, &le) {
		name := map[string]string{"pids": "pids", "timeout": "timeout", "workspace_bytes": "workspace_size", "output_bytes": "output_cap"}[le.Field]
		return req, badRequest("field %q: %s: want %s to %s (absent: the default)", field(name), le.Value, le.Min, le.Max)
	}
	return req, nil
}

// sealEnv replaces the values of req.Env by entries the scheduler sealed
// for step id, which the Driver submits with the step: a run record never
// holds an environment value (SPEC.md, "The trust boundary").
func (g *Gateway) sealEnv(ctx context.Context, id string, req *api.StepRequest) error {
	if len(req.Env) == 0 {
		return nil
	}
	sealed, err := g.steps.SealEnv(ctx, id, req.Env)
	if err != nil {
		return fmt.Errorf("seal the environment of step %s: %w", id, err)
	}
	req.Env, req.SealedEnv = nil, sealed
	return nil
}

func (g *Gateway) handleCreateRun(c *call) error {
	var req api.RunRequest
	if err := c.decode(&req); err != nil {
		return err
	}
	if err := g.checkWorkspace(c, "field \"workspace\"", req.Workspace); err != nil {
		return err
	}
	if req.Session != "" {
		if !validID(req.Session, prefixSession) {
			return badRequest("field \"session\" %q: want a session id such as sess-%s", req.Session, strings.Repeat("a", idLen))
		}
		var s api.Session
		if _, err := getRecord(c.ctx, g.store, kindSession, req.Session, &s); err != nil || s.Workspace != req.Workspace {
			if err == nil || IsNotFound(err) {
				return notFound("no session %s in workspace %s", req.Session, req.Workspace)
			}
			return err
		}
	}
	if req.Agent != "" {
		if len(req.Steps) > 0 {
			return badRequest("fields \"agent\" and \"steps\": an agent run has no steps to begin with (its steps are the tool calls it makes, POST /v1/runs/{id}/steps): give one or the other")
		}
		return g.createAgentRun(c, req)
	}
	if len(req.Steps) == 0 || len(req.Steps) > maxSteps {
		return badRequest("field \"steps\": want 1 to %d steps, got %d", maxSteps, len(req.Steps))
	}
	now := g.now()
	run := runRecord{ID: newTimeID(prefixRun, now), Workspace: req.Workspace, Session: req.Session, State: api.RunRunning,
		CreatedBy: c.p.actor, CreatedAt: now}
	for i, spec := range req.Steps {
		sr, err := stepRequest(i, spec)
		if err != nil {
			return err
		}
		run.Steps = append(run.Steps, runStepRecord{ID: stepID(run.ID, i), Index: i, Spec: sr, Status: stepPending})
	}
	if b, _ := json.Marshal(run); len(b) > maxRunRecord {
		return badRequest("run too large: %d bytes of steps, at most %d: pass data through the workspace, not arguments", len(b), maxRunRecord)
	}
	c.target = run.ID
	if err := g.startRun(c, &run, func() error {
		for i := range run.Steps {
			if err := g.sealEnv(c.ctx, run.Steps[i].ID, &run.Steps[i].Spec); err != nil {
				return err
			}
		}
		if b, _ := json.Marshal(run); len(b) > maxRunRecord {
			return badRequest("run too large: %d bytes of steps once sealed, at most %d: pass data through the workspace, not arguments", len(b), maxRunRecord)
		}
		return nil
	}); err != nil {
		return err
	}
	return c.json(http.StatusCreated, g.operation(c.ctx, &run, true))
}

// startRun admits run to its quotas, calls prepare (nil: nothing), then
// writes its live marker, its index entries and the run record, and
// hands it to the Driver (run is then as the Driver left it).
func (g *Gateway) startRun(c *call, run *runRecord, prepare func() error) error {
	release, err := g.admit(c.ctx, run)
	if err != nil {
		return err
	}
	created := false
	defer func() {
		if !created {
			release()
		}
	}()
	if prepare != nil {
		if err := prepare(); err != nil {
			return err
		}
	}
	now := run.CreatedAt
	// The marker first: a run without one would never be driven (nor
	// uncounted from its quotas). Then the indexes, so that a run record
	// is never missing from them; an index entry without its run is
	// skipped by lists and removed by retention.
	live := liveRecord{CreatedAt: now, Workspace: run.Workspace, By: run.CreatedBy.ID}
	if _, err := putRecord(c.ctx, g.store, kindRunLive, run.ID, 0, &live); err != nil {
		return err
	}
	created = true // the Driver uncounts a marked run that was never made
	idx := runIndexRecord{Workspace: run.Workspace, CreatedAt: now}
	if _, err := putRecord(c.ctx, g.store, kindRunExpiry, expiryID(run.ID, now), 0, &idx); err != nil {
		return err
	}
	if _, err := putRecord(c.ctx, g.store, kindRunWS, wsIndexID(run.Workspace, run.ID), 0, &idx); err != nil {
		return err
	}
	if _, err := putRecord(c.ctx, g.store, kindRun, run.ID, 0, run); err != nil {
		return err
	}
	// Submit the first step now rather than at the next pass; a failure
	// here is the Driver's to retry.
	if adv, err := g.driver.advance(c.ctx, run.ID); err == nil {
		*run = adv
	} else {
		g.log.Warn("advance new run", "run", run.ID, "error", err)
	}
	g.driver.Wake()
	return nil
}

// getRun reads run id for the caller: 404 when it does not exist or is in
// a workspace the caller is not in (the answer does not tell which).
func (g *Gateway) getRun(c *call, id string) (runRecord, uint64, error) {
	var run runRecord
	if !validID(id, prefixRun) {
		return run, 0, badRequest("run id %q: want run- and letters or digits, such as run-%s", id, strings.Repeat("a", idLen))
	}
	c.target = id
	version, err := getRecord(c.ctx, g.store, kindRun, id, &run)
	if IsNotFound(err) || err == nil && !c.p.canSee(run.Workspace) {
		return run, 0, notFound("no run %s", id)
	}
	return run, version, err
}

func (g *Gateway) handleRun(c *call) error {
	run, _, err := g.getRun(c, c.r.PathValue("id"))
	if err != nil {
		return err
	}
	return c.json(http.StatusOK, g.operation(c.ctx, &run, true))
}

func (g *Gateway) handleRuns(c *call) error {
	q := c.r.URL.Query()
	ws, state, session := q.Get("workspace"), q.Get("state"), q.Get("session")
	if ws != "" {
		if err := g.checkWorkspace(c, "query parameter workspace", ws); err != nil {
			return err
		}
	}
	if state != "" && !slices.Contains([]string{api.RunRunning, api.RunAwaitingApproval, api.RunSucceeded, api.RunFailed, api.RunCancelled}, state) {
		return badRequest("query parameter state %q: want running, awaiting_approval, succeeded, failed or cancelled", truncateText(state, 40))
	}
	if session != "" {
		if !validID(session, prefixSession) {
			return badRequest("query parameter session %q: want a session id", truncateText(session, 40))
		}
		var s api.Session
		if _, err := getRecord(c.ctx, g.store, kindSession, session, &s); err != nil || !c.p.canSee(s.Workspace) || ws != "" && s.Workspace != ws {
			if err == nil || IsNotFound(err) {
				return c.page("runs", []api.Operation{}, position{})
			}
			return err
		}
		ws = s.Workspace
	}
	// One workspace's runs are read through its index; a caller limited
	// to one workspace lists it the same way.
	if ws == "" && len(c.p.Workspaces) == 1 {
		ws = c.p.Workspaces[0]
	}
	list := "runs"
	if ws != "" {
		list = "runs/" + ws
	}
	pg, err := parsePage(q, list)
	if err != nil {
		return err
	}
	keep := func(run *runRecord) bool {
		return c.p.canSee(run.Workspace) && (ws == "" || run.Workspace == ws) &&
			(state == "" || run.State == state) && (session == "" || run.Session == session)
	}
	runs, next, err := g.runsPage(c.ctx, pg, ws, keep)
	if err != nil {
		return err
	}
	out := make([]api.Operation, len(runs))
	// Each run on the page reads at most its live step from the
	// scheduler; ended steps are in the run record.
	forEachLimit(c.ctx, indexes(len(runs)), 8, func(ctx context.Context, i int) error {
		out[i] = g.operation(ctx, &runs[i], false)
		return nil
	})
	return c.page(list, out, next)
}

func indexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// wsIndexID is a run's id in its workspace's index (kind run_ws), and
// expiryID its id in the retention index (kind run_expiry).
func wsIndexID(ws, run string) string               { return ws + "." + run }
func expiryID(run string, created time.Time) string { return forwardTime(created) + "." + run }

// runsPage reads one page of runs newest first, keeping those keep
// accepts: from the run records themselves, or, for one workspace, from
// its index and then each run (in parallel). Either way a page reads at
// most scanBudget records.
func (g *Gateway) runsPage(ctx context.Context, pg pageReq, ws string, keep func(*runRecord) bool) ([]runRecord, position, error) {
	var out []runRecord
	if ws == "" {
		recs, next, err := scanPage(ctx, g.store, kindRun, "", pg, func(r *versioned[runRecord]) bool { return keep(&r.Value) })
		for _, r := range recs {
			out = append(out, r.Value)
		}
		return out, next, err
	}
	next, err := scanRecords(ctx, g.store, kindRunWS, ws+".", pg, func(recs []api.Record) (int, bool, error) {
		// Read the runs a batch at a time, no more than the page may
		// still take.
		for done := 0; done < len(recs); {
			batch := recs[done:min(len(recs), done+pg.limit-len(out))]
			runs := make([]*runRecord, len(batch))
			err := forEachLimit(ctx, indexes(len(batch)), 8, func(ctx context.Context, i int) error {
				var run runRecord
				_, err := getRecord(ctx, g.store, kindRun, strings.TrimPrefix(batch[i].ID, ws+"."), &run)
				if IsNotFound(err) {
					return nil // being created, or being dropped by retention
				}
				runs[i] = &run
				return err
			})
			if err != nil {
				return 0, false, err
			}
			for i, run := range runs {
				if run != nil && keep(run) {
					out = append(out, *run)
					if len(out) == pg.limit {
						return done + i + 1, true, nil
					}
				}
			}
			done += len(batch)
		}
		return len(recs), false, nil
	})
	return out, next, err
}

func (g *Gateway) handleCancelRun(c *call) error {
	id := c.r.PathValue("id")
	for range casTries {
		run, version, err := g.getRun(c, id)
		if err != nil {
			return err
		}
		if run.Cancel != nil {
			break // a repeated cancel is a no-op
		}
		if !run.live() {
			return conflict("run %s ended already (%s)", id, run.State)
		}
		run.Cancel = &api.Cancel{RequestedAt: g.now()}
		if _, err := putRecord(c.ctx, g.store, kindRun, id, version, &run); err != nil {
			if IsConflict(err) {
				continue
			}
			return err
		}
		break
	}
	// Cancel the live step now; the Driver retries what fails.
	run, err := g.driver.advance(c.ctx, id)
	if err != nil {
		g.log.Warn("advance cancelled run", "run", id, "error", err)
		if run, _, err = g.getRun(c, id); err != nil {
			return err
		}
	}
	g.driver.Wake()
	return c.json(http.StatusOK, g.operation(c.ctx, &run, true))
}

// operation is run as the API shows it. Ended steps are shown from the
// run record; each step the scheduler still has live is read from it.
// full is for a run's own page: its steps' events, and ended steps whose
// view is not final yet read again from the scheduler. Lists leave events
// out (the run's page has them).
func (g *Gateway) operation(ctx context.Context, run *runRecord, full bool) api.Operation {
	op := api.Operation{ID: run.ID, Workspace: run.Workspace, Session: run.Session, State: run.State,
		CreatedBy: run.CreatedBy, CreatedAt: run.CreatedAt, EndedAt: run.EndedAt,
		Steps: make([]api.RunStep, 0, len(run.Steps)), Errors: slices.Clone(orEmpty(run.Errors))}
	if run.Cancel != nil {
		cc := *run.Cancel
		op.Cancel = &cc
	}
	for _, rs := range run.Steps {
		view, err := g.stepView(ctx, rs, full)
		if err != nil {
			op.Errors = append(op.Errors, fmt.Sprintf("step %d: the scheduler did not answer; its state is not shown", rs.Index))
		}
		if !full {
			view.Events, view.EventsOmitted = []api.Event{}, 0
		}
		op.Steps = append(op.Steps, view)
		// The run's cancel is confirmed when its step's is, even before
		// the Driver recorded it.
		if op.Cancel != nil && rs.ID == run.CancelStep && view.Cancel != nil &&
			op.Cancel.ConfirmedAt.IsZero() && op.Cancel.Unverified == "" {
			op.Cancel.ConfirmedAt, op.Cancel.Unverified = view.Cancel.ConfirmedAt, view.Cancel.Unverified
		}
	}
	op.FilesChanged = unionFilesChanged(op.Steps)
	if run.Agent != nil {
		g.agentOperation(ctx, run, &op)
	}
	return op
}

// stepView returns step rs's view: from the run record once it ended (or
// was never submitted), else from the scheduler. fresh reads an ended
// step whose view is not final again (falling back on the record's when
// the scheduler no longer has it).
func (g *Gateway) stepView(ctx context.Context, rs runStepRecord, fresh bool) (api.RunStep, error) {
	switch {
	case rs.Status == stepCalling && rs.View != nil:
		return withRecord(rs, rs.View), nil // a file tool the gateway is answering
	case rs.Status != stepSubmitted && rs.Status != stepEnded:
		return runStepView(rs, nil), nil
	case rs.View != nil && (rs.Final || !fresh):
		return withRecord(rs, rs.View), nil
	}
	st, err := g.steps.Step(ctx, rs.ID)
	if err != nil {
		if rs.View != nil {
			return withRecord(rs, rs.View), nil
		}
		v := runStepView(rs, nil)
		v.State = api.StepUnknown
		if !IsNotFound(err) {
			g.log.Warn("read step", "step", rs.ID, "error", err)
		}
		return v, err
	}
	return runStepView(rs, &st, g.nodes.known(ctx, st.Node)...), nil
}

// getStep finds step id's run for the caller (404 across workspaces).
func (g *Gateway) getStep(c *call, id string) (runRecord, runStepRecord, error) {
	runID, index, err := parseStepID(id)
	if err != nil {
		return runRecord{}, runStepRecord{}, badRequest("%v", err)
	}
	run, _, err := g.getRun(c, runID)
	c.target = id
	if he, ok := err.(*httpError); ok && he.Code == api.CodeNotFound || err == nil && index >= len(run.Steps) {
		return run, runStepRecord{}, notFound("no step %s", id)
	}
	if err != nil {
		return run, runStepRecord{}, err
	}
	return run, run.Steps[index], nil
}

func (g *Gateway) handleStep(c *call) error {
	_, rs, err := g.getStep(c, c.r.PathValue("id"))
	if err != nil {
		return err
	}
	view, err := g.stepView(c.ctx, rs, true)
	if err != nil && !IsNotFound(err) {
		return err
	}
	return c.json(http.StatusOK, view)
}

func (g *Gateway) handleStream(c *call) error {
	run, rs, err := g.getStep(c, c.r.PathValue("id"))
	if err != nil {
		return err
	}
	var from uint64
	if s := c.r.URL.Query().Get("from"); s != "" {
		if from, err = strconv.ParseUint(s, 10, 64); err != nil {
			return badRequest("query parameter from %q: want the seq of the last frame received", s)
		}
	}
	if rs.Tool != nil && rs.Tool.Name != api.ToolBash {
		return conflict("step %s is a %s call the gateway answered: it has no stream (its answer is in the run's events)", rs.ID, rs.Tool.Name)
	}
	if rs.Status != stepSubmitted && rs.Status != stepEnded {
		return conflict("step %s has not started (%s): its stream opens once it is submitted", rs.ID, runStepView(rs, nil).State)
	}
	if g.cfg.Stream == nil {
		return &httpError{Status: http.StatusNotImplemented, Code: "not_implemented",
			Message: "this gateway has no stream relay; read the step with GET /v1/steps/{id}"}
	}
	if err := g.awaitNode(c.r.Context(), rs.ID); err != nil {
		return err
	}
	interactive := rs.Spec.TTY && c.p.Role >= api.RoleEditor
	st := relay.Stream{StepID: rs.ID, From: from, Interactive: interactive,
		Check: func(ctx context.Context) error { return g.recheck(ctx, c.r, c.p.tenant, run.Workspace, interactive) }}
	if interactive {
		// Terminal input is audited per stream, not per keystroke: when
		// it opens, and when it closes with what it sent.
		st.Opened = func() { g.audit(c, "terminal.open", "ok") }
		st.Closed = func(in relay.Input) {
			e := g.auditDoc(c, "terminal.close", "ok")
			e.Input = &api.TerminalInput{Bytes: in.Bytes, Messages: in.Messages, Resizes: in.Resizes, Seconds: in.Open.Round(time.Millisecond).Seconds()}
			g.appendAudit(c, e)
		}
	}
	g.cfg.Stream.ServeStream(c.w, c.r, st)
	return nil
}

// recheck authenticates the caller of an open stream again and checks it
// may still read workspace ws (and write, for an interactive stream): a
// signed-out, deleted or changed member, or a deleted key, is refused
// (*relay.Revoked); a store that does not answer is an error the stream
// outlives.
func (g *Gateway) recheck(ctx context.Context, r *http.Request, tenant, ws string, interactive bool) error {
	p, err := g.authenticate(ctx, r)
	var he *httpError
	switch {
	case errors.As(err, &he) && he.Status == http.StatusUnauthorized:
		g.metrics.streamsRevoked.Inc()
		return &relay.Revoked{Code: api.CloseUnauthorized, Reason: he.Message}
	case err != nil:
		return err
	case p == nil:
		g.metrics.streamsRevoked.Inc()
		return &relay.Revoked{Code: api.CloseUnauthorized, Reason: "no credential: sign in again"}
	case p.tenant != tenant:
		g.metrics.streamsRevoked.Inc()
		return &relay.Revoked{Code: api.CloseForbidden, Reason: "you switched to another account"}
	case !p.canSee(ws):
		g.metrics.streamsRevoked.Inc()
		return &relay.Revoked{Code: api.CloseForbidden, Reason: "you may no longer read this workspace"}
	case interactive && p.Role < api.RoleEditor:
		g.metrics.streamsRevoked.Inc()
		return &relay.Revoked{Code: api.CloseForbidden, Reason: "you may no longer write to this terminal"}
	}
	return nil
}

// streamStartWait is how long a stream request waits for its step to be
// started by a node (its output log exists from then on) before it is
// answered 409.
const streamStartWait = 10 * time.Second

// awaitNode waits until a node has started the step (or it ended), so that
// the relay does not ask a node for a log it has not made yet.
func (g *Gateway) awaitNode(ctx context.Context, id string) error {
	st, err := g.steps.Step(ctx, id)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(streamStartWait)
	for st.State == api.StepQueued || st.State == api.StepPlaced {
		left := time.Until(deadline)
		if left <= 0 {
			return conflict("step %s is %s: its stream opens once a node starts it; retry", id, st.State)
		}
		if st, err = g.steps.WaitStep(ctx, id, st.ModifyIndex, left); err != nil {
			return err
		}
	}
	return nil
}
