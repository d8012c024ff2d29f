package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/gateway/agentfile"
	"github.com/rodon-compute/rodon/gateway/tools"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// Agent runs (docs/design/agents.md, §3): creation, tool calls, events,
// finish. The runs helper owns this file; the tool calls are in
// agentcalls.go, the Driver's part in driver_agent.go.

// Bounds of an agent run.
const (
	// maxToolSteps is how many steps a live run may have: its record
	// holds them all.
	maxToolSteps = 256
	// maxSummary bounds a tool step's summary and a refusal's message as
	// the run record keeps them.
	maxSummary = 300
	// eventChanges is how many paths one revision event names at most: a
	// revision that changed more has several events (each a record).
	eventChanges = 400
)

// prefixGrant starts a grant's id (its jti).
const prefixGrant = "grant-"

// toolCall is one tool call on its way: the run as read when the call's
// step was appended, the grant, the step, and what the tools act on.
type toolCall struct {
	run    *runRecord
	claims *grantClaims
	index  int    // the step's index in the run
	stepID string // its id (stepID(run.ID, index))
	env    tools.Env
	// author is the step, the author of every revision the call makes.
	author api.Author
}

// errRunUnchanged, returned by a runCAS change, leaves the run as it was
// read: runCAS answers it without writing.
var errRunUnchanged = errors.New("run unchanged")

// runCAS reads run id, lets change modify it and return the events the
// change records, reserves their seqs (agentRunRecord.Events) and writes
// the run back by compare-and-set (trying again on a conflict, change
// called again on a fresh read), then writes the events. It answers the
// run as written. A change that returns errRunUnchanged writes nothing
// (runCAS answers the run as read, and a nil error); any other error is
// returned as it is.
func (g *Gateway) runCAS(ctx context.Context, id string, change func(*runRecord) ([]api.RunEvent, error)) (runRecord, error) {
	return g.runCASFrom(ctx, id, nil, change)
}

// runCASFrom is runCAS starting from first, the run as just read (nil:
// read it); a conflict reads it again.
func (g *Gateway) runCASFrom(ctx context.Context, id string, first *versioned[runRecord], change func(*runRecord) ([]api.RunEvent, error)) (runRecord, error) {
	for try := range runCASTries {
		if try > 0 {
			if err := casPause(ctx, try); err != nil {
				return runRecord{}, err
			}
		}
		var run runRecord
		var version uint64
		var err error
		if first != nil && first.ID == id {
			// A copy: change may modify it, and a retry must not see that.
			b, _ := json.Marshal(first.Value)
			err = json.Unmarshal(b, &run)
			version, first = first.Version, nil
		} else {
			version, err = getRecord(ctx, g.store, kindRun, id, &run)
		}
		if err != nil {
			return run, err
		}
		events, err := change(&run)
		if errors.Is(err, errRunUnchanged) {
			return run, nil
		}
		if err != nil {
			return run, err
		}
		reserveEvents(&run, events, g.now())
		fitRecord(&run)
		if _, err := putRecord(ctx, g.store, kindRun, id, version, &run); err != nil {
			if IsConflict(err) {
				continue
			}
			return run, err
		}
		writeEvents(ctx, g.store, g.log, id, events)
		return run, nil
	}
	return runRecord{}, &httpError{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, RetryAfter: time.Second,
		Message: fmt.Sprintf("run %s kept changing under other calls at once; retry", id)}
}

// runCASTries bounds runCAS's compare-and-set tries: a live run's calls
// may come at once, and each try after a collision waits a little
// (casPause).
const runCASTries = quotaCASTries

// reserveEvents numbers events as the next of run (an agent run) and
// stamps those without a time.
func reserveEvents(run *runRecord, events []api.RunEvent, now time.Time) {
	if run.Agent == nil {
		return
	}
	for i := range events {
		run.Agent.Events++
		events[i].Seq = run.Agent.Events
		if events[i].Time.IsZero() {
			events[i].Time = now
		}
	}
}

// eventID is the record id of run's event seq: ids sort as the seqs.
func eventID(run string, seq int) string { return fmt.Sprintf("%s.%08d", run, seq) }

// eventTimeout bounds writing a change's events once the change is in
// the run record, whether or not the caller is still there.
const eventTimeout = 10 * time.Second

// writeEvents writes events, reserved already, as records. A failure
// leaves a gap in the seqs (never a duplicate): it is logged.
func writeEvents(ctx context.Context, s Store, log *slog.Logger, run string, events []api.RunEvent) {
	if len(events) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), eventTimeout)
	defer cancel()
	for _, e := range events {
		if _, err := putRecord(ctx, s, kindRunEvent, eventID(run, e.Seq), 0, &e); err != nil && !IsConflict(err) {
			log.Warn("write run event", "run", run, "seq", e.Seq, "kind", e.Kind, "error", err)
		}
	}
}

// createAgentRun makes the agent run of req (req.Agent set, no steps):
// it reads agents/NAME.md at the workspace head, parses it, issues the
// run's grant and answers it once with the run.
func (g *Gateway) createAgentRun(c *call, req api.RunRequest) error {
	f, err := g.filesAPI()
	if err != nil {
		return err
	}
	if g.grants == nil {
		return &httpError{Status: http.StatusNotImplemented, Code: "not_implemented", Message: "this gateway issues no grants: agent runs are not available"}
	}
	if err := cluster.ValidateAgentName(truncateText(req.Agent, 80)); err != nil {
		return badRequest("field \"agent\": %v (the agent of agents/NAME.md in the workspace)", err)
	}
	file, data, err := g.readAgentFile(c.ctx, f, req.Workspace, req.Agent)
	if err != nil {
		return err
	}
	af, err := agentfile.Parse(req.Agent, data)
	if err != nil {
		var ae *agentfile.Error
		if errors.As(err, &ae) {
			return badRequest("%s (revision %s): %v", file.Path, file.Revision, ae)
		}
		return err
	}
	now := g.now()
	run := runRecord{ID: newTimeID(prefixRun, now), Workspace: req.Workspace, Session: req.Session, State: api.RunRunning,
		CreatedBy: c.p.actor, CreatedAt: now, Steps: []runStepRecord{}}
	c.target = run.ID
	expires := now.Add(time.Duration(af.Limits.Run))
	agent := api.RunAgent{Name: af.Name, Path: file.Path, Revision: file.Revision, SHA256: file.SHA256,
		Tools: slices.Clone(orEmpty(af.Tools)), Secrets: slices.Clone(orEmpty(af.Secrets)), Network: af.Network, Image: af.Image,
		Limits: af.Limits, Gates: slices.Clone(orEmpty(af.Gates)), GrantExpires: expires}
	claims := grantClaims{ID: newID(prefixGrant), Run: run.ID, Workspace: run.Workspace, Tenant: tenantFrom(c.ctx),
		Agent: af.Name, AgentRevision: file.Revision, AgentSHA256: file.SHA256,
		Tools: agent.Tools, Secrets: agent.Secrets, Network: agent.Network, Image: agent.Image,
		Limits: agent.Limits, Gates: agent.Gates, IssuedAt: now, Expires: expires}
	token, err := g.grants.issue(c.ctx, claims)
	if err != nil {
		return fmt.Errorf("issue the grant of run %s: %w", run.ID, err)
	}
	created := api.RunEvent{Kind: api.RunEventCreated, Time: now, Revision: file.Revision,
		Summary: truncateUTF8(fmt.Sprintf("agent %s (%s, revision %s) with %s; its grant expires at %s",
			af.Name, file.Path, file.Revision, strings.Join(agent.Tools, ", "), expires.Format(time.RFC3339)), maxSummary)}
	run.Agent = &agentRunRecord{RunAgent: agent, Grant: claims.ID}
	events := []api.RunEvent{created}
	reserveEvents(&run, events, now)
	if err := g.startRun(c, &run, nil); err != nil {
		return err
	}
	writeEvents(c.ctx, g.store, g.log, run.ID, events)
	return c.json(http.StatusCreated, api.RunCreated{Operation: g.operation(c.ctx, &run, true), Grant: token})
}

// agentFile is an agent file as read: where, at which revision, and its
// digest.
type agentFile struct {
	Path, Revision, SHA256 string
}

// readAgentFile reads agent name's file at workspace ws's head. A missing
// one is a 404 naming the agents the workspace has.
func (g *Gateway) readAgentFile(ctx context.Context, f Files, ws, name string) (agentFile, []byte, error) {
	out := agentFile{Path: agentfile.Path(name)}
	file, err := f.File(ctx, ws, out.Path, client.FileOptions{})
	if IsNotFound(err) {
		return out, nil, g.noAgent(ctx, f, ws, name)
	}
	if err != nil {
		return out, nil, g.fromScheduler(ctx, err)
	}
	defer file.Body.Close()
	if file.Header.Get(symlinkHeader) != "" {
		return out, nil, badRequest("%s in workspace %s is a symbolic link: an agent file must be a file", out.Path, ws)
	}
	data, err := io.ReadAll(io.LimitReader(file.Body, agentfile.MaxBytes+1))
	if err != nil {
		return out, nil, fmt.Errorf("read %s of workspace %s: %w", out.Path, ws, err)
	}
	if len(data) > agentfile.MaxBytes {
		return out, nil, badRequest("%s in workspace %s is larger than %d bytes, the most an agent file may be", out.Path, ws, agentfile.MaxBytes)
	}
	sum := sha256.Sum256(data)
	out.Revision, out.SHA256 = file.Header.Get(RevisionHeader), hex.EncodeToString(sum[:])
	return out, data, nil
}

// symlinkHeader marks the scheduler's answer for a symbolic link (the
// link's tree entry, not a file).
const symlinkHeader = "X-Rodon-Symlink"

// noAgent is the answer for an agent without a file: 404 naming the path
// and the agents the workspace has.
func (g *Gateway) noAgent(ctx context.Context, f Files, ws, name string) error {
	p := agentfile.Path(name)
	entries, err := f.Tree(ctx, ws, "", "agents")
	if err != nil && !IsNotFound(err) {
		return g.fromScheduler(ctx, err)
	}
	var names []string
	for _, e := range entries {
		if dir, base := path.Split(e.Path); dir == "agents/" && e.Type != "dir" && strings.HasSuffix(base, ".md") {
			if n := strings.TrimSuffix(base, ".md"); cluster.ValidateAgentName(n) == nil {
				names = append(names, n)
			}
		}
	}
	if len(names) == 0 {
		return notFound("no agent %s in workspace %s: %s does not exist, and the workspace has no agents (write one to agents/NAME.md)", name, ws, p)
	}
	return notFound("no agent %s in workspace %s: %s does not exist; its agents are %s", name, ws, p, strings.Join(names, ", "))
}

// agentOperation adds what an agent run shows besides a run's to op.
func (g *Gateway) agentOperation(ctx context.Context, run *runRecord, op *api.Operation) {
	a := run.Agent.RunAgent
	a.Tools, a.Secrets, a.Gates = slices.Clone(orEmpty(a.Tools)), slices.Clone(orEmpty(a.Secrets)), slices.Clone(orEmpty(a.Gates))
	op.Agent, op.Refusals = &a, run.Agent.Refusals
	if run.State != api.RunAwaitingApproval || run.Agent.Awaiting == "" {
		return
	}
	var p api.Proposal
	if _, err := getRecord(ctx, g.store, kindProposal, run.Agent.Awaiting, &p); err != nil {
		op.Errors = append(op.Errors, fmt.Sprintf("the proposal %s the run awaits could not be read; reload", run.Agent.Awaiting))
		if !IsNotFound(err) {
			g.log.Warn("read awaited proposal", "run", run.ID, "proposal", run.Agent.Awaiting, "error", err)
		}
		return
	}
	op.Awaiting = &p
}

func (g *Gateway) handleRunEvents(c *call) error {
	run, _, err := g.getRun(c, c.r.PathValue("id"))
	if err != nil {
		return err
	}
	list := "events/" + run.ID
	pg, err := parsePage(c.r.URL.Query(), list)
	if err != nil {
		return err
	}
	out := []api.RunEvent{}
	if run.Agent == nil {
		return c.page(list, out, position{}) // a fixed run records no events
	}
	recs, next, err := scanPage[api.RunEvent](c.ctx, g.store, kindRunEvent, run.ID+".", pg, nil)
	if err != nil {
		return err
	}
	for _, r := range recs {
		out = append(out, r.Value)
	}
	return c.page(list, out, next)
}

func (g *Gateway) handleFinishRun(c *call) error {
	var req api.FinishRequest
	if err := decodeBody(c.w, c.r, &req, true); err != nil {
		return err
	}
	if len(req.Reason) > maxViewText {
		return badRequest("field \"reason\": %d bytes, at most %d", len(req.Reason), maxViewText)
	}
	id := c.r.PathValue("id")
	if _, _, err := g.getRun(c, id); err != nil {
		return err
	}
	if _, err := g.runCAS(c.ctx, id, func(run *runRecord) ([]api.RunEvent, error) {
		switch {
		case run.Agent == nil:
			return nil, conflict("run %s is not an agent run: it ends with its last step (cancel it to stop it)", run.ID)
		case !run.live():
			return nil, conflict("run %s ended already (%s)", run.ID, run.State)
		case run.Agent.Ending != nil || run.Cancel != nil:
			return nil, errRunUnchanged // a repeated finish is a no-op
		}
		end := req
		run.Agent.Ending = &end
		return nil, nil
	}); err != nil {
		return err
	}
	// End it now rather than at the next pass; the Driver retries.
	run, err := g.driver.advance(c.ctx, id)
	if err != nil {
		g.log.Warn("advance finished run", "run", id, "error", err)
		if run, _, err = g.getRun(c, id); err != nil {
			return err
		}
	}
	g.driver.Wake()
	return c.json(http.StatusOK, g.operation(c.ctx, &run, true))
}

// notImplemented is the answer of a part not built yet.
func notImplemented(what string) error {
	return &httpError{Status: 501, Code: "not_implemented", Message: what + " are not implemented yet"}
}
