package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/gateway/tools"
	"github.com/rodon-compute/rodon/internal/httpapi"
)

// Tool calls of agent runs (POST /v1/runs/{id}/steps; docs/design/agents.md
// §3, "Tool calls"). A call is appended to its run as a step by
// compare-and-set before anything runs; a file tool then runs in the
// gateway and its step is ended with its answer, a Bash step is a script
// step the Driver submits.

// Bounds of a tool call.
const (
	// maxToolName bounds the tool name a step keeps of an unknown tool.
	maxToolName = 64
	// maxBashCommand bounds a Bash command: the run record keeps it.
	maxBashCommand = 8 << 10
	// maxWait is the longest ?wait of a Bash call.
	maxWait = 10 * time.Minute
)

func (g *Gateway) handleRunSteps(c *call) error {
	id := c.r.PathValue("id")
	claims := c.p.grant
	if claims == nil || claims.Run != id {
		return forbidden("tool calls on run %s take that run's grant", truncateText(id, 80))
	}
	c.target = id
	var req api.ToolCall
	if err := c.decode(&req); err != nil {
		return err
	}
	var wait time.Duration
	if s := c.r.URL.Query().Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 || d > maxWait {
			return badRequest("query parameter wait %q: want how long to wait for a Bash step's end, such as 30s, at most %v", truncateText(s, 40), maxWait)
		}
		wait = d
	}
	sum := sha256.Sum256(req.Input)
	inputSHA := hex.EncodeToString(sum[:])
	in, spec, refusal := checkCall(claims, req)
	name := req.Tool
	if !slices.Contains(api.Tools, name) {
		name = truncateUTF8(strings.ToValidUTF8(name, "?"), maxToolName)
	}
	if spec != nil && c.grantRun != nil {
		// A script step queues as a fixed run's do: the quotas of queued
		// steps hold it back.
		q, run := g.cfg.Quotas, &c.grantRun.Value
		if err := g.checkQueued(c.ctx, wsQuotaID(run.Workspace), q.QueuedStepsPerWorkspace, "workspace "+run.Workspace); err != nil {
			return err
		}
		if err := g.checkQueued(c.ctx, byQuotaID(run.CreatedBy.ID), q.QueuedStepsPerPrincipal, run.CreatedBy.Kind+" "+run.CreatedBy.ID); err != nil {
			return err
		}
	}
	now := g.now()
	index := -1
	// The run as authorize read it is the first try.
	run, err := g.runCASFrom(c.ctx, id, c.grantRun, func(run *runRecord) ([]api.RunEvent, error) {
		if err := acceptsCalls(run); err != nil {
			return nil, err
		}
		index = len(run.Steps)
		s := runStepRecord{ID: stepID(run.ID, index), Index: index, Tool: &api.ToolStep{Name: name, InputSHA256: inputSHA, Input: inputAccount(in)}}
		ev := api.RunEvent{Step: s.ID, StepIndex: &s.Index, Tool: name, InputSHA256: inputSHA}
		var events []api.RunEvent
		switch {
		case refusal != nil:
			s.Status, s.EndedAt, s.Final = stepEnded, now, true
			s.View = &api.RunStep{State: api.StepRefused, Phases: api.Phases{Started: now, Exited: now}}
			s.Tool.Refusal = keptRefusal(refusal)
			run.Agent.Refusals++
			ev.Kind, ev.Refusal = api.RunEventRefusal, s.Tool.Refusal
			events = append(events, ev)
		case spec != nil:
			s.Spec, s.Status = *spec, stepPending
			s.Tool.Summary = truncateUTF8("run: "+spec.Args[2], maxSummary)
			ev.Kind, ev.Summary, ev.State = api.RunEventScript, s.Tool.Summary, api.StepPending
			events = append(events, ev)
		default:
			s.Status = stepCalling
			s.View = &api.RunStep{State: api.StepRunning, Phases: api.Phases{Started: now}}
		}
		run.Steps = append(run.Steps, s)
		if b, _ := json.Marshal(run); len(b) > maxRunRecord {
			return nil, conflict("run %s holds %d bytes of steps, at most %d: finish it and start another", run.ID, len(b), maxRunRecord)
		}
		return events, nil
	})
	if err != nil {
		return err
	}
	switch {
	case refusal != nil:
		return refusedError(refusal)
	case spec != nil:
		return g.bashCall(c, run, index, wait)
	}
	return g.fileCall(c, &run, claims, index, name, in)
}

// acceptsCalls refuses a call on a run that takes none now.
func acceptsCalls(run *runRecord) error {
	switch {
	case run.Agent == nil:
		return conflict("run %s is not an agent run: it takes no tool calls", run.ID)
	case run.State == api.RunAwaitingApproval:
		return conflict("run %s awaits a person's approval of proposal %s: it takes no call until they approve or reject it (POST /v1/runs/%s/approve or /reject)",
			run.ID, run.Agent.Awaiting, run.ID)
	case !run.live():
		return conflict("run %s ended (%s): it takes no more calls", run.ID, run.State)
	case run.Cancel != nil:
		return conflict("run %s is being cancelled: it takes no more calls", run.ID)
	case run.Agent.Ending != nil:
		return conflict("run %s is finishing: it takes no more calls", run.ID)
	case len(run.Steps) >= maxToolSteps:
		return conflict("the run has %d steps, at most %d: finish it and start another", len(run.Steps), maxToolSteps)
	}
	return nil
}

// checkCall decides what call req of a run with claims is before anything
// is recorded: the tool's decoded input (a Bash call also its step's
// request), or a refusal (a tool not granted or unknown, a bad input).
func checkCall(claims *grantClaims, req api.ToolCall) (in any, bash *api.StepRequest, refusal *api.Refusal) {
	if !slices.Contains(api.Tools, req.Tool) {
		return nil, nil, &api.Refusal{Reason: api.RefusedTool,
			Message: fmt.Sprintf("there is no tool %q: the tools are %s", truncateText(req.Tool, maxToolName), strings.Join(api.Tools, ", "))}
	}
	if !claims.has(req.Tool) {
		return nil, nil, &api.Refusal{Reason: api.RefusedTool,
			Message: fmt.Sprintf("%s is not in this run's grant: agent %s has %s (its file agents/%s.md lists its tools)",
				req.Tool, claims.Agent, strings.Join(claims.Tools, ", "), claims.Agent)}
	}
	var err error
	switch req.Tool {
	case api.ToolRead:
		in, err = decodeInput[api.ReadInput](req.Input)
	case api.ToolGlob:
		in, err = decodeInput[api.GlobInput](req.Input)
	case api.ToolGrep:
		in, err = decodeInput[api.GrepInput](req.Input)
	case api.ToolWrite:
		in, err = decodeInput[api.WriteInput](req.Input)
	case api.ToolEdit:
		in, err = decodeInput[api.EditInput](req.Input)
	case api.ToolProposeChange:
		in, err = decodeInput[api.ProposeChangeInput](req.Input)
	case api.ToolApplyChange:
		in, err = decodeInput[api.ApplyChangeInput](req.Input)
	case api.ToolBash:
		var b api.BashInput
		if b, err = decodeInput[api.BashInput](req.Input); err == nil {
			var spec api.StepRequest
			if spec, err = bashRequest(claims, b); err == nil {
				return b, &spec, nil
			}
		}
	}
	if err != nil {
		return nil, nil, &api.Refusal{Reason: api.RefusedInput, Message: truncateUTF8(fmt.Sprintf("%s input: %v", req.Tool, err), maxSummary)}
	}
	return in, nil, nil
}

// decodeInput decodes a tool's input strictly: one JSON object, no field
// the tool does not take.
func decodeInput[T any](raw json.RawMessage) (T, error) {
	var v T
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return v, errors.New("want an object (\"input\": {...})")
	}
	err := httpapi.DecodeReader(bytes.NewReader(raw), &v, false, "docs/GATEWAY.md")
	var he *httpError
	if errors.As(err, &he) {
		return v, errors.New(he.Message)
	}
	return v, err
}

// bashRequest is the script step of Bash call in (docs/design/agents.md
// §3.4): the grant's image, network and limits, the workspace read-only
// when the grant has no writing tool.
func bashRequest(claims *grantClaims, in api.BashInput) (api.StepRequest, error) {
	switch {
	case strings.TrimSpace(in.Command) == "":
		return api.StepRequest{}, errors.New("field \"command\": want the command to run, such as \"ls -l data\"")
	case len(in.Command) > maxBashCommand:
		return api.StepRequest{}, fmt.Errorf("field \"command\": %d bytes, at most %d: write a longer script to a file and run that", len(in.Command), maxBashCommand)
	case !utf8.ValidString(in.Command) || strings.ContainsRune(in.Command, 0):
		return api.StepRequest{}, errors.New("field \"command\": want UTF-8 text without NUL")
	case in.Timeout < 0:
		return api.StepRequest{}, errors.New("field \"timeout\": want a positive duration such as 5m")
	}
	lim := claims.Limits
	spec := api.StepSpec{Args: []string{"/bin/sh", "-c", in.Command}, Image: claims.Image, CPU: lim.CPU, Memory: lim.Memory,
		Timeout: lim.Timeout, Pids: lim.Pids, WorkspaceSize: lim.Workspace, NoInternet: claims.Network == "none"}
	if in.Timeout > 0 && (spec.Timeout == 0 || in.Timeout < spec.Timeout) {
		spec.Timeout = in.Timeout
	}
	req, err := stepRequest(0, spec)
	if err != nil {
		var he *httpError
		if errors.As(err, &he) {
			return req, fmt.Errorf("the grant's limits do not make a step: %s", he.Message)
		}
		return req, err
	}
	req.WorkspaceReadOnly = !slices.ContainsFunc(claims.Tools, func(t string) bool { return slices.Contains(api.WritingTools, t) })
	return req, nil
}

// maxInputAccount bounds ToolStep.Input.
const maxInputAccount = 200

// inputAccount is a short account of a tool's input for people (the run
// page shows it beside the tool): the path, the pattern, the command's
// first line, the proposal.
func inputAccount(in any) string {
	var s string
	switch in := in.(type) {
	case api.ReadInput:
		s = in.Path
		if in.Offset > 1 {
			s += fmt.Sprintf(" from line %d", in.Offset)
		}
	case api.WriteInput:
		s = in.Path
	case api.EditInput:
		s = in.Path
	case api.GlobInput:
		s = in.Pattern
		if in.Path != "" {
			s += " in " + in.Path
		}
	case api.GrepInput:
		s = in.Pattern
		if in.Path != "" {
			s += " in " + in.Path
		}
		if in.Glob != "" {
			s += " (" + in.Glob + ")"
		}
	case api.BashInput:
		s, _, _ = strings.Cut(strings.TrimSpace(in.Command), "\n")
	case api.ProposeChangeInput:
		s = fmt.Sprintf("%d files", len(in.Files))
		if in.Patch != "" {
			s = "a patch"
		}
		if in.Message != "" {
			s += ": " + in.Message
		}
	case api.ApplyChangeInput:
		s = in.Proposal
	}
	return truncateUTF8(strings.ToValidUTF8(s, "?"), maxInputAccount)
}

// keptRefusal is refusal as the run record keeps it: its message bounded.
func keptRefusal(r *api.Refusal) *api.Refusal {
	k := *r
	k.Message = truncateUTF8(k.Message, maxSummary)
	k.Path = truncateUTF8(k.Path, maxSummary)
	k.DidYouMean = truncateUTF8(k.DidYouMean, maxSummary)
	return &k
}

// refusedError is the 403 answer of a refused call.
func refusedError(r *api.Refusal) error {
	return &httpError{Status: http.StatusForbidden, Code: api.CodeRefused, Message: r.Message, Refusal: r}
}

// toolOutcome is what a file tool's call came to.
type toolOutcome struct {
	result  any
	summary string
	// read is the revision the tool read; revision the one it made.
	read, revision string
	proposal       string
	// failed: the tool ran and could not do what was asked (its result
	// says why).
	failed   bool
	refusal  *api.Refusal
	awaiting bool
	// files is what the revision made changed.
	files *api.FilesChanged
	// err is the gateway's own failure.
	err error
}

// fileCall runs the file tool of step index of run (appended, calling)
// and ends the step with its outcome.
func (g *Gateway) fileCall(c *call, run *runRecord, claims *grantClaims, index int, tool string, in any) error {
	s := run.Steps[index]
	t := &toolCall{run: run, claims: claims, index: index, stepID: s.ID, author: api.Author{Kind: api.AuthorStep, ID: s.ID}}
	var o toolOutcome
	env, err := g.toolEnv(c.ctx, run.Workspace, t.author)
	if err != nil {
		o.err = fmt.Errorf("tool %s of step %s: %w", tool, s.ID, err)
	} else {
		t.env = env
		o = g.runTool(c.ctx, t, tool, in)
	}
	if o.err != nil {
		o.failed, o.summary = true, "the gateway could not run the tool; retry the call"
	}
	var revEvents []api.RunEvent
	if o.revision != "" {
		evs, fc, err := revisionChanges(c.ctx, g.files, run.Workspace, o.revision, s.ID, index)
		if err != nil {
			g.log.Warn("read a tool's revision for its events", "run", run.ID, "step", s.ID, "revision", o.revision, "error", err)
		}
		revEvents, o.files = evs, fc
	}
	ended, err := g.endToolStep(c.ctx, run.ID, index, tool, o, revEvents)
	if err != nil {
		return errors.Join(o.err, err)
	}
	switch {
	case o.err != nil:
		return o.err
	case o.refusal != nil:
		return refusedError(o.refusal)
	}
	b, err := json.Marshal(o.result)
	if err != nil {
		return fmt.Errorf("encode the result of step %s: %w", s.ID, err)
	}
	view, _ := g.stepView(c.ctx, ended.Steps[index], false)
	status := http.StatusOK
	if o.awaiting {
		status = http.StatusAccepted
	}
	return c.json(status, api.ToolAnswer{Step: view, Result: b})
}

// endToolStep ends file tool step index of run id with outcome o, its
// events recorded (revEvents: those of the revision it made).
func (g *Gateway) endToolStep(ctx context.Context, id string, index int, tool string, o toolOutcome, revEvents []api.RunEvent) (runRecord, error) {
	// The step's end is recorded even when the caller went away.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), eventTimeout)
	defer cancel()
	return g.runCAS(ctx, id, func(run *runRecord) ([]api.RunEvent, error) {
		if index >= len(run.Steps) || run.Steps[index].Status != stepCalling {
			return nil, errRunUnchanged // ended already (the Driver gave it up)
		}
		now := g.now()
		s := &run.Steps[index]
		state := api.StepDone
		switch {
		case o.refusal != nil:
			state = api.StepRefused
		case o.awaiting:
			state = api.StepAwaitingApproval
		case o.failed:
			state = api.StepFailed
		}
		started := now
		if s.View != nil {
			started = s.View.Phases.Started
		}
		s.Status, s.EndedAt, s.Final = stepEnded, now, true
		s.View = &api.RunStep{State: state, Phases: api.Phases{Started: started, Exited: now}, Revision: o.revision, FilesChanged: o.files}
		s.Tool.Summary, s.Tool.Read, s.Tool.Proposal = truncateUTF8(o.summary, maxSummary), o.read, o.proposal
		ev := api.RunEvent{Step: s.ID, StepIndex: &s.Index, Tool: tool, InputSHA256: s.Tool.InputSHA256,
			Summary: s.Tool.Summary, Proposal: o.proposal, Revision: o.revision, State: state}
		switch {
		case o.refusal != nil:
			s.Tool.Refusal = keptRefusal(o.refusal)
			run.Agent.Refusals++
			ev.Kind, ev.Refusal = api.RunEventRefusal, s.Tool.Refusal
		case o.awaiting:
			ev.Kind = api.RunEventAwaiting
			if run.State == api.RunRunning && run.Cancel == nil && run.Agent.Ending == nil {
				run.State, run.Agent.Awaiting = api.RunAwaitingApproval, o.proposal
			}
		case tool == api.ToolProposeChange && !o.failed:
			ev.Kind = api.RunEventProposal
		default:
			ev.Kind = api.RunEventToolCall
		}
		return append([]api.RunEvent{ev}, revEvents...), nil
	})
}

// runTool runs tool on input in for call t.
func (g *Gateway) runTool(ctx context.Context, t *toolCall, tool string, in any) toolOutcome {
	var o toolOutcome
	var err error
	switch tool {
	case api.ToolRead:
		var res api.ReadResult
		res, err = tools.Read(ctx, t.env, in.(api.ReadInput))
		o.read = res.Revision
		o.set(res, res.Error, fmt.Sprintf("read %d of %d lines of %s", strings.Count(res.Content, "\n"), res.Lines, res.Path))
	case api.ToolGlob:
		var res api.GlobResult
		res, err = tools.Glob(ctx, t.env, in.(api.GlobInput))
		o.read = res.Revision
		o.set(res, res.Error, fmt.Sprintf("%d paths match %s", len(res.Paths), in.(api.GlobInput).Pattern))
	case api.ToolGrep:
		var res api.GrepResult
		res, err = tools.Grep(ctx, t.env, in.(api.GrepInput))
		o.read = res.Revision
		o.set(res, res.Error, fmt.Sprintf("%d matches in %d files", res.Count, res.Files))
	case api.ToolWrite:
		var res api.WriteResult
		res, err = tools.Write(ctx, t.env, in.(api.WriteInput))
		o.revision = res.Revision
		o.set(res, res.Error, fmt.Sprintf("wrote %d bytes to %s", res.Bytes, res.Path))
	case api.ToolEdit:
		var res api.EditResult
		res, err = tools.Edit(ctx, t.env, in.(api.EditInput))
		o.revision = res.Revision
		o.set(res, res.Error, fmt.Sprintf("%d replacements in %s", res.Replacements, res.Path))
	case api.ToolProposeChange:
		var res api.ProposeChangeResult
		res, err = g.toolPropose(ctx, t, in.(api.ProposeChangeInput))
		o.proposal, o.read = res.Proposal, res.Base
		o.set(res, res.Error, fmt.Sprintf("proposed %s from %s", res.Proposal, res.Base))
	case api.ToolApplyChange:
		var res api.ApplyChangeResult
		res, o.awaiting, err = g.toolApply(ctx, t, in.(api.ApplyChangeInput))
		o.proposal, o.revision = in.(api.ApplyChangeInput).Proposal, res.Revision
		summary := fmt.Sprintf("applied %s", o.proposal)
		if o.awaiting {
			summary = fmt.Sprintf("%s awaits a person's approval", o.proposal)
		}
		o.set(res, res.Error, summary)
	default:
		err = fmt.Errorf("tool %s is not a file tool", tool)
	}
	var r *tools.Refusal
	switch {
	case errors.As(err, &r):
		ref := r.Refusal
		o.refusal, o.result, o.revision, o.summary = &ref, nil, "", "refused: "+ref.Message
	case err != nil:
		o.err, o.result, o.revision = err, nil, ""
	}
	return o
}

// set records a file tool's result: its summary, or, when the tool
// could not do what was asked, its failure (errText) as the summary.
func (o *toolOutcome) set(res any, errText, summary string) {
	o.result, o.summary = res, summary
	if errText != "" {
		o.failed, o.summary = true, errText
	}
}
