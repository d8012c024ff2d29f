package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/browsertest"
)

// The run page of an agent run, driven in Chromium against agentAPI, a
// stand-in for the gateway's run routes (SPEC.md, "Agents, grants, tools
// and gates") answering package api's shapes. The real stack is driven by
// internal/e2e's TestBrowserAgent.

const testAgentRun = "run-agent-1"

// agentAPI holds one agent run and its events in memory.
type agentAPI struct {
	mu     sync.Mutex
	role   api.Role
	key    bool // GET /v1/me answers an API key, not a person
	run    api.Operation
	events []api.RunEvent
	// decisions are the approve and reject requests, in order, as
	// "approve PROPOSAL" or "reject PROPOSAL REASON".
	decisions []string
	proposal  api.Proposal
}

const testProposalDiff = "--- a/report.md\n+++ b/report.md\n@@ -1 +1,2 @@\n # Sales\n+north leads with 120\n"

func newAgentAPI(role api.Role) *agentAPI {
	f := &agentAPI{role: role}
	created := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	f.proposal = api.Proposal{ID: "prop-1", Run: testAgentRun, Step: testAgentRun + "-s1", Base: "rev-0002", State: api.ProposalProposed,
		SHA256: strings.Repeat("ef", 32), Message: "Add the leader to the report",
		Files: []api.ProposedFile{{Path: "report.md", Content: "# Sales\nnorth leads with 120\n"}}, Diff: testProposalDiff}
	idx := func(i int) *int { return &i }
	f.run = api.Operation{ID: testAgentRun, Workspace: testWS, State: api.RunAwaitingApproval, CreatedAt: created,
		CreatedBy: api.Actor{Kind: "key", ID: "key-1"},
		Agent: &api.RunAgent{Name: "analyst", Path: "agents/analyst.md", Revision: "rev-0002", SHA256: strings.Repeat("ab", 32),
			Tools: []string{api.ToolRead, api.ToolWrite, api.ToolProposeChange, api.ToolApplyChange}, Secrets: []string{},
			Network: "none", Image: "base", Gates: []string{api.ToolApplyChange}, GrantExpires: created.Add(time.Hour),
			Limits: api.AgentLimits{CPU: 1, Memory: "512Mi", Timeout: api.Duration(10 * time.Minute), Pids: 256, Workspace: "1Gi", Run: api.Duration(time.Hour)}},
		Refusals: 1,
		Awaiting: &f.proposal,
		Steps: []api.RunStep{
			{ID: testAgentRun + "-s0", Index: 0, State: api.StepRefused, Tool: &api.ToolStep{Name: api.ToolRead, InputSHA256: strings.Repeat("01", 32), Input: "/data/sales.csv",
				Refusal: &api.Refusal{Reason: api.RefusedPath, Message: "path /data/sales.csv is outside the workspace; did you mean /workspace/data/sales.csv?", Path: "/data/sales.csv", DidYouMean: "/workspace/data/sales.csv"}}},
			{ID: testAgentRun + "-s1", Index: 1, State: api.StepDone, Tool: &api.ToolStep{Name: api.ToolProposeChange, InputSHA256: strings.Repeat("02", 32),
				Input: "report.md", Summary: "proposed 1 file", Proposal: "prop-1"}},
			{ID: testAgentRun + "-s2", Index: 2, State: api.StepAwaitingApproval, Tool: &api.ToolStep{Name: api.ToolApplyChange, InputSHA256: strings.Repeat("03", 32),
				Input: "prop-1", Proposal: "prop-1"}},
		}}
	// More events than a page holds: the page reads on with "more".
	f.add(api.RunEvent{Kind: api.RunEventCreated})
	for i := range 110 {
		f.add(api.RunEvent{Kind: api.RunEventToolCall, Tool: api.ToolRead, StepIndex: idx(0), Summary: fmt.Sprintf("filler %d", i)})
	}
	f.add(api.RunEvent{Kind: api.RunEventRefusal, Tool: api.ToolRead, StepIndex: idx(0), Refusal: f.run.Steps[0].Tool.Refusal})
	f.add(api.RunEvent{Kind: api.RunEventProposal, Tool: api.ToolProposeChange, StepIndex: idx(1), Proposal: "prop-1"})
	f.add(api.RunEvent{Kind: api.RunEventAwaiting, Tool: api.ToolApplyChange, StepIndex: idx(2), Proposal: "prop-1"})
	return f
}

// add appends a run event; f.mu is held or f is not shared yet.
func (f *agentAPI) add(e api.RunEvent) {
	e.Seq = len(f.events) + 1
	e.Time = f.run.CreatedAt.Add(time.Duration(e.Seq) * time.Second)
	f.events = append(f.events, e)
}

func (f *agentAPI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(FS()))
	mux.HandleFunc("GET /v1/me", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.key {
			writeJSON(w, 200, api.Me{Key: &api.Key{ID: "key-1", Name: "ci", Role: f.role}, Role: f.role})
			return
		}
		writeJSON(w, 200, api.Me{Account: &api.Account{ID: "acct-me", Email: "me@example.com", Role: f.role}, Role: f.role, CSRFToken: "csrf-1"})
	})
	mux.HandleFunc("GET /v1/runs/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		writeJSON(w, 200, f.run)
	})
	mux.HandleFunc("GET /v1/runs/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		from, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
		if limit <= 0 || limit > 100 {
			limit = 100
		}
		to := min(from+limit, len(f.events))
		if to < len(f.events) {
			w.Header().Set("X-Next-Cursor", strconv.Itoa(to))
		}
		writeJSON(w, 200, f.events[from:to])
	})
	mux.HandleFunc("GET /v1/runs/{id}/proposals/{p}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		writeJSON(w, 200, f.proposal)
	})
	decide := func(verb string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var req api.ApproveRequest
			if json.NewDecoder(r.Body).Decode(&req) != nil || r.Header.Get("X-CSRF-Token") != "csrf-1" {
				writeJSON(w, 400, api.NewError(api.CodeBadRequest, "bad "+verb))
				return
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			f.decisions = append(f.decisions, strings.TrimSpace(verb+" "+req.Proposal+" "+req.Reason))
			if verb == "approve" {
				f.proposal.State, f.proposal.ForStep = api.ProposalApproved, 3
				f.proposal.ApprovedBy = &api.Actor{Kind: "account", ID: "acct-me"}
				f.add(api.RunEvent{Kind: api.RunEventApproval, Proposal: req.Proposal, By: f.proposal.ApprovedBy})
			}
			f.run.State, f.run.Awaiting = api.RunRunning, nil
			writeJSON(w, 200, f.proposal)
		}
	}
	mux.HandleFunc("POST /v1/runs/{id}/approve", decide("approve"))
	mux.HandleFunc("POST /v1/runs/{id}/reject", decide("reject"))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self'")
		mux.ServeHTTP(w, r)
	})
}

func TestRunAgentPage(t *testing.T) {
	requireBuilt(t)
	f := newAgentAPI(api.RoleEditor)
	srv := httptest.NewServer(f.handler())
	t.Cleanup(srv.Close)
	ctx := browsertest.Start(t, 2*time.Minute)
	do := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		browsertest.Do(t, ctx, what, actions...)
	}
	eval := func(js string) string {
		t.Helper()
		return browsertest.Eval(t, ctx, js)
	}
	wait := func(what, js string) {
		t.Helper()
		browsertest.Wait(t, ctx, 15*time.Second, what, js)
	}
	shot := func(name string) {
		t.Helper()
		if dir := os.Getenv("RODON_PAGE_SCREENSHOTS"); dir != "" {
			browsertest.Screenshot(t, ctx, filepath.Join(dir, name+".png"))
		}
	}
	page := srv.URL + "/#/runs/" + testAgentRun

	do("open the run", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#gate-approve")))
	wait("the steps and the events", `document.querySelectorAll('.tool-step').length === 3 && document.querySelectorAll('#run-events li').length === 100`)
	shot("agent-awaiting")

	// The agent, linked to its file at the revision it was read at, and
	// what its grant holds.
	if got := eval(`document.querySelector('#agent-link').getAttribute('href')`); got != "#/workspaces/"+testWS+"/rev-0002/agents/analyst.md" {
		t.Errorf("#agent-link = %q, want the agent file at rev-0002", got)
	}
	if got := eval(`[...document.querySelectorAll('#agent-tools .tool')].map(e => e.dataset.tool + (e.classList.contains('gated') ? '*' : '')).join(' ')`); got != "Read Write ProposeChange ApplyChange*" {
		t.Errorf("#agent-tools = %q, want the grant's four tools with ApplyChange gated", got)
	}
	if got := eval(`document.querySelector('#run-state').textContent`); got != api.RunAwaitingApproval {
		t.Errorf("#run-state = %q, want %s", got, api.RunAwaitingApproval)
	}

	// The refusal: counted on the run and on its step, its message and
	// the path it probably meant, linked into the workspace.
	if got := eval(`document.querySelector('#run-refusals').dataset.count + ' ' + document.querySelector('#run-refusals').textContent`); got != "1 1 refused call" {
		t.Errorf("#run-refusals = %q, want 1 refused call", got)
	}
	if got := eval(`[0, 1, 2].map(i => document.querySelector('#tool-' + i).dataset.refusals).join(',')`); got != "1,0,0" {
		t.Errorf("refusals per step = %s, want 1,0,0", got)
	}
	if got := eval(`document.querySelector('#refusal-0 .refusal-message').textContent`); got != "refused (path outside): path /data/sales.csv is outside the workspace" {
		t.Errorf("#refusal-0's message = %q, want the refusal's message (its did you mean on a line of its own)", got)
	}
	if got := eval(`document.querySelector('#did-you-mean-0 a').getAttribute('href') + ' ' + document.querySelector('#did-you-mean-0').textContent`); got != "#/workspaces/"+testWS+"/head/data/sales.csv did you mean /workspace/data/sales.csv?" {
		t.Errorf("#did-you-mean-0 = %q, want the meant path linked", got)
	}
	if got := eval(`document.querySelector('#tool-input-0').textContent + '|' + document.querySelector('#tool-summary-1').textContent`); got != "/data/sales.csv|proposed 1 file" {
		t.Errorf("inputs and summaries = %q", got)
	}

	// The proposal awaited: its message, files and diff.
	if got := eval(`document.querySelector('#gate-message').textContent + '|' + [...document.querySelectorAll('#gate-files li')].map(l => l.dataset.path).join(',')`); got != "Add the leader to the report|report.md" {
		t.Errorf("the gate's proposal = %q", got)
	}
	if got := eval(`[...document.querySelectorAll('#gate-diff .diff-add')].map(s => s.textContent).join('')`); got != "+north leads with 120\n" {
		t.Errorf("the gate's added lines = %q", got)
	}

	// The events: a page, then "more".
	do("read more events", chromedp.Click(chromedp.CSS("#run-events-more")))
	wait("every event", `document.querySelectorAll('#run-events li').length === 114 && document.querySelector('#run-events-more').hidden`)
	if got := eval(`document.querySelector('#run-events li[data-kind=refusal]').dataset.reason`); got != api.RefusedPath {
		t.Errorf("the refusal event's reason = %q, want %s", got, api.RefusedPath)
	}

	// Approve: one POST with the CSRF token; the run goes on and the new
	// event appears.
	do("approve", chromedp.Click(chromedp.CSS("#gate-approve")))
	wait("the gate gone, the run running", `document.querySelector('#gate').hidden && document.querySelector('#run-state').textContent === 'running'`)
	wait("the approval event", `!!document.querySelector('#run-events li[data-kind=approval]')`)
	f.mu.Lock()
	decisions := f.decisions
	f.mu.Unlock()
	if len(decisions) != 1 || decisions[0] != "approve prop-1" {
		t.Errorf("decisions = %q, want [approve prop-1]", decisions)
	}

	// The applying step, then the end.
	f.mu.Lock()
	f.run.Steps[2].State = api.StepDone
	f.run.Steps[2].Revision = "rev-0003"
	f.run.Steps[2].Tool.Summary = "applied prop-1"
	f.run.State = api.RunSucceeded
	f.run.EndedAt = time.Now()
	f.proposal.State = api.ProposalApplied
	// A Bash call the grant does not hold: a script step's card, refused.
	f.run.Steps = append(f.run.Steps, api.RunStep{ID: testAgentRun + "-s3", Index: 3, State: api.StepRefused,
		Tool: &api.ToolStep{Name: api.ToolBash, InputSHA256: strings.Repeat("04", 32), Input: "rm -rf data",
			Refusal: &api.Refusal{Reason: api.RefusedTool, Message: "the grant of run " + testAgentRun + " holds no Bash"}}})
	f.run.Refusals = 2
	f.mu.Unlock()
	wait("the run succeeded", `document.querySelector('#run-state').textContent === 'succeeded' && document.querySelector('#step-state-2').textContent === 'done'`)
	wait("the refused Bash step", `!!document.querySelector('#step-3 #refusal-3') && !document.querySelector('#refusal-3').hidden`)
	if got := eval(`[document.querySelector('#run-refusals').textContent, document.querySelector('#tool-3').dataset.refusals, document.querySelector('#refusal-3').dataset.reason,` +
		` String(!!document.querySelector('#terminal-step-3')), String(document.querySelector('#phases-card').hidden)].join('|')`); got != "2 refused calls|1|tool_not_granted|true|false" {
		t.Errorf("after a refused Bash: %q, want 2 refused calls, the step's refusal in a script step's card, and the phases shown", got)
	}
	if got := eval(`document.querySelector('#step-revision-2').getAttribute('href')`); got != "#/workspaces/"+testWS+"/rev-0003" {
		t.Errorf("#step-revision-2 = %q, want the revision the apply made", got)
	}
	do("show step 1's proposal", chromedp.Click(chromedp.CSS("#show-proposal-1")))
	wait("step 1's proposal", `!!document.querySelector('#proposal-1-diff .diff-add')`)
	shot("agent-done")

	// A viewer and an API key see the proposal, never the buttons.
	for _, c := range []struct {
		name string
		role api.Role
		key  bool
	}{{"viewer", api.RoleViewer, false}, {"editor key", api.RoleEditor, true}} {
		f.mu.Lock()
		f.role, f.key = c.role, c.key
		f.run.State, f.run.Awaiting = api.RunAwaitingApproval, &f.proposal
		f.proposal.State = api.ProposalProposed
		f.mu.Unlock()
		do("reload as "+c.name, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#gate-viewer")))
		if got := eval(`String(document.querySelectorAll('#gate-approve, #gate-reject').length) + ' ' + document.querySelectorAll('#gate-diff .diff-add').length`); got != "0 1" {
			t.Errorf("%s: %s approve/reject buttons and diff lines, want none and the diff", c.name, got)
		}
	}
}
