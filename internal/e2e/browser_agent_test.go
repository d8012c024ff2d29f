package e2e

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/browsertest"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// browserAgentFile is the agent TestBrowserAgent plants: it reads and
// writes, proposes, and applies only after a person approves.
const browserAgentFile = `---
name: analyst
description: Reads the sales and proposes a report
tools: [Read, Write, ProposeChange, ApplyChange]
network: none
gates:
  - tool: ApplyChange
---
Read data/sales.csv and propose a report of it in report.md.
`

const (
	browserAgentReport    = "# Sales\n"
	browserAgentProposed  = "# Sales\n\nwest leads with 143; south trails with 75.\n"
	browserAgentProposal  = "Name the leader and the last region"
	browserAgentWorkspace = "agent-demo"
)

// TestBrowserAgent drives the run page of an agent run in headless
// Chromium against a real gateway and scheduler (issue 13, Done 6): an
// editor key starts a run of agents/analyst.md (ApplyChange gated), the
// run's grant makes a refused Read (/data/sales.csv, did you mean
// /workspace/data/sales.csv), a ProposeChange and a gated ApplyChange;
// an editor signed in sees the refusal count and the proposal's diff on
// the page and clicks Approve; the grant applies and finishes the run,
// and the page shows it succeeded. It saves docs/screenshots/agent-run.png.
func TestBrowserAgent(t *testing.T) {
	requireBrowser(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	f := &fleet{}
	startSchedulers(t, f, 1)
	g, owner, ws := ownerWithWorkspace(t, f, browserAgentWorkspace)

	// The workspace: the data, the report and the agent file, by the owner.
	for _, file := range [][2]string{{"data/sales.csv", workspaceSales}, {"report.md", browserAgentReport}, {"agents/analyst.md", browserAgentFile}} {
		if code, _, b := owner.putFile(ws, file[0], []byte(file[1]), ""); code != http.StatusCreated && code != http.StatusOK {
			t.Fatalf("PUT %s = %d %s, want a revision", file[0], code, b)
		}
	}
	// An editor (a person, who approves) and an editor key (which starts
	// the run and may not approve).
	const editorEmail, editorPassword = "editor@example.com", "a long editor password"
	owner.must(http.StatusCreated, http.MethodPost, "/v1/members", map[string]any{"email": editorEmail, "password": editorPassword, "role": "editor"}, nil)
	var key struct {
		Secret string `json:"secret"`
	}
	owner.must(http.StatusCreated, http.MethodPost, "/v1/keys", map[string]any{"name": "agent-ci", "role": "editor"}, &key)
	keyC := owner.withKey(key.Secret)

	var created api.RunCreated
	keyC.must(http.StatusCreated, http.MethodPost, "/v1/runs", map[string]any{"workspace": ws, "agent": "analyst"}, &created)
	if !strings.HasPrefix(created.Grant, "rg_") || created.Agent == nil || created.Agent.Path != "agents/analyst.md" {
		t.Fatalf("POST /v1/runs with an agent = %+v, want the run with its agent and an rg_ grant", created)
	}
	runID := created.ID
	grant := owner.withKey(created.Grant)
	// toolCall sends one tool call with the grant and answers its status and body.
	toolCall := func(tool string, input any) (int, []byte) {
		t.Helper()
		in, err := json.Marshal(input)
		if err != nil {
			t.Fatal(err)
		}
		return grant.do(http.MethodPost, "/v1/runs/"+runID+"/steps", api.ToolCall{Tool: tool, Input: in}, nil)
	}
	readRun := func() api.Operation {
		t.Helper()
		var op api.Operation
		keyC.must(http.StatusOK, http.MethodGet, "/v1/runs/"+runID, nil, &op)
		return op
	}

	// A refused Read: outside the workspace, with the path it meant.
	code, b := toolCall(api.ToolRead, api.ReadInput{Path: "/data/sales.csv"})
	var refused struct {
		Error struct {
			Code       string `json:"code"`
			Message    string `json:"message"`
			DidYouMean string `json:"did_you_mean"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &refused); code != http.StatusForbidden || err != nil || refused.Error.Code != api.CodeRefused || refused.Error.DidYouMean != "/workspace/data/sales.csv" {
		t.Fatalf("Read /data/sales.csv = %d %s, want 403 refused, did you mean /workspace/data/sales.csv", code, b)
	}

	// A proposal, and its gated apply: the run awaits a person.
	code, b = toolCall(api.ToolProposeChange, api.ProposeChangeInput{Files: []api.ProposedFile{{Path: "report.md", Content: browserAgentProposed}}, Message: browserAgentProposal})
	var proposed struct {
		Result api.ProposeChangeResult `json:"result"`
	}
	if err := json.Unmarshal(b, &proposed); code != http.StatusOK || err != nil || proposed.Result.Proposal == "" {
		t.Fatalf("ProposeChange = %d %s, want 200 with a proposal", code, b)
	}
	proposal := proposed.Result.Proposal
	if code, b = toolCall(api.ToolApplyChange, api.ApplyChangeInput{Proposal: proposal}); code != http.StatusAccepted {
		t.Fatalf("the gated ApplyChange = %d %s, want 202 (awaiting approval)", code, b)
	}
	if op := readRun(); op.State != api.RunAwaitingApproval || op.Awaiting == nil || op.Awaiting.ID != proposal || op.Refusals != 1 {
		t.Fatalf("the run after the gated apply: state %s, awaiting %+v, %d refusals; want awaiting_approval on %s with 1 refusal", op.State, op.Awaiting, op.Refusals, proposal)
	}
	// The key that started the run may not approve it.
	if code, b := keyC.do(http.MethodPost, "/v1/runs/"+runID+"/approve", api.ApproveRequest{Proposal: proposal}, nil); code != http.StatusForbidden {
		t.Errorf("approve with the editor key = %d %s, want 403 (a person approves)", code, b)
	}

	// The page, as the editor signed in: the refusal counted and shown,
	// the proposal's diff, Approve.
	ctx := browsertest.Start(t, 5*time.Minute)
	do := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		browsertest.Do(t, ctx, what, actions...)
	}
	eval := func(js string) string {
		t.Helper()
		return browsertest.Eval(t, ctx, js)
	}
	wait := func(d time.Duration, what, js string) {
		t.Helper()
		browsertest.Wait(t, ctx, d, what, js)
	}
	browserSignIn(t, ctx, g.site, editorEmail, editorPassword, ws)
	do("open the run", chromedp.Navigate(g.site+"/#/runs/"+runID))
	wait(30*time.Second, "the gate with its diff and the refusal counted",
		`!!document.querySelector('#gate-approve') && !document.querySelector('#gate').hidden && document.querySelectorAll('#gate-diff .diff-add').length > 0`+
			` && document.querySelector('#run-refusals')?.dataset.count === '1'`)
	if got := eval(`document.querySelector('#run-state').textContent`); got != api.RunAwaitingApproval {
		t.Errorf("#run-state = %q, want %s", got, api.RunAwaitingApproval)
	}
	if got := eval(`document.querySelector('#run-refusals').textContent`); got != "1 refused call" {
		t.Errorf("#run-refusals = %q, want 1 refused call", got)
	}
	if got := eval(`document.querySelector('#tool-0').dataset.refusals + ' ' + document.querySelector('#refusal-0').dataset.didYouMean`); got != "1 /workspace/data/sales.csv" {
		t.Errorf("step 0's refusal = %q, want 1 refusal meaning /workspace/data/sales.csv", got)
	}
	if got := eval(`[...document.querySelectorAll('#gate-diff .diff-add')].map(s => s.textContent).join('')`); !strings.Contains(got, "+west leads with 143; south trails with 75.\n") {
		t.Errorf("the proposal's added lines = %q, want the new report line", got)
	}
	if got := eval(`document.querySelector('#gate').dataset.proposal + '|' + (document.querySelector('#gate-message')?.textContent ?? '')`); got != proposal+"|"+browserAgentProposal {
		t.Errorf("the gate shows %q, want %s with its message", got, proposal)
	}
	if got := eval(`document.querySelector('#agent-link').getAttribute('href')`); got != "#/workspaces/"+ws+"/"+created.Agent.Revision+"/agents/analyst.md" {
		t.Errorf("#agent-link = %q, want the agent file at %s", got, created.Agent.Revision)
	}
	wait(30*time.Second, "the run's events", `!!document.querySelector('#run-events li[data-kind=refusal]') && !!document.querySelector('#run-events li[data-kind=awaiting_approval]')`)
	browsertest.Screenshot(t, ctx, filepath.Join("..", "..", "docs", "screenshots", "agent-gate.png"))

	do("approve", chromedp.Click(chromedp.CSS("#gate-approve")))
	wait(30*time.Second, "the run running again", `document.querySelector('#gate').hidden && document.querySelector('#run-state').textContent === 'running'`)
	if errText := eval(`document.querySelector('#gate-error').textContent`); errText != "" {
		t.Fatalf("#gate-error = %q after Approve", errText)
	}
	var p api.Proposal
	keyC.must(http.StatusOK, http.MethodGet, "/v1/runs/"+runID+"/proposals/"+proposal, nil, &p)
	if p.State != api.ProposalApproved || p.ApprovedBy == nil || p.ApprovedBy.Kind != api.AuthorAccount {
		t.Fatalf("the proposal after Approve = %+v, want approved by the editor's account", p)
	}

	// The next step applies exactly the proposal; the grant finishes the run.
	code, b = toolCall(api.ToolApplyChange, api.ApplyChangeInput{Proposal: proposal})
	var applied struct {
		Result api.ApplyChangeResult `json:"result"`
	}
	if err := json.Unmarshal(b, &applied); code != http.StatusOK || err != nil || applied.Result.Revision == "" {
		t.Fatalf("ApplyChange after the approval = %d %s, want 200 with a revision", code, b)
	}
	grant.must(http.StatusOK, http.MethodPost, "/v1/runs/"+runID+"/finish", api.FinishRequest{Reason: "report proposed and applied"}, nil)
	wait(30*time.Second, "the run succeeded on the page", `document.querySelector('#run-state').textContent === 'succeeded'`)
	if code, got, _ := owner.getFile(ws, "report.md", ""); code != http.StatusOK || string(got) != browserAgentProposed {
		t.Errorf("report.md at the head = %d %q, want the proposal's content", code, got)
	}
	applyStep := eval(`String([...document.querySelectorAll('.tool-step')].length - 1)`)
	wait(15*time.Second, "the apply's revision linked", `document.querySelector('#step-revision-`+applyStep+`')?.dataset.rev === '`+applied.Result.Revision+`'`)
	if op := readRun(); op.State != api.RunSucceeded || op.Refusals != 1 {
		t.Errorf("the run at the end: %s with %d refusals, want succeeded with 1", op.State, op.Refusals)
	}

	// The screenshot: the refusal, the proposal's diff (opened on its
	// step), the applied step and the run succeeded.
	proposeStep := eval(`[...document.querySelectorAll('.tool-step .tool-name')].find(e => e.dataset.tool === 'ProposeChange').closest('.tool-step').id.replace('step-', '')`)
	do("open the proposal", chromedp.Click(chromedp.CSS("#show-proposal-"+proposeStep)))
	wait(15*time.Second, "the proposal's diff", `document.querySelectorAll('#proposal-`+proposeStep+`-diff .diff-add').length > 0`)
	do("back to the top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`), chromedp.Sleep(500*time.Millisecond))
	browsertest.Screenshot(t, ctx, filepath.Join("..", "..", "docs", "screenshots", "agent-run.png"))
	for _, p := range f.schedulers {
		p.stop(30 * time.Second)
	}
}
