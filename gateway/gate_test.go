package gateway

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// TestGate is Done means 3 at the gateway: only the step after a
// person's approval applies exactly the approved proposal, once, before
// the approval expires, re-checked against the workspace.
func TestGate(t *testing.T) {
	t.Run("who approves", func(t *testing.T) {
		f, _ := gateFixture(t)
		r := f.newGateRun(true)
		p1 := r.propose(api.ProposedFile{Path: "data/a.txt", Content: gateContent}).Proposal
		if _, awaiting, err := r.apply(p1); err != nil || !awaiting {
			t.Fatalf("ApplyChange before approval: awaiting %v, %v; want awaiting", awaiting, err)
		}
		r.pause(p1)
		body := `{"proposal":"` + p1 + `"}`
		for _, who := range []string{"key-owner", "key-editor"} {
			w := f.do(who, "POST", "/v1/runs/"+r.id+"/approve", body, 403, nil)
			if !strings.Contains(w.Body.String(), "API keys cannot") {
				t.Errorf("approve as %s: %s, want API keys refused", who, w.Body)
			}
		}
		f.do("viewer", "POST", "/v1/runs/"+r.id+"/approve", body, 403, nil)
		f.do("other", "POST", "/v1/runs/"+r.id+"/approve", body, 404, nil)
		if got := r.proposal(p1); got.State != api.ProposalProposed {
			t.Fatalf("proposal after refused approvals: %s, want proposed", got.State)
		}
		// The wrong proposal, then the right one.
		p2 := r.propose(api.ProposedFile{Path: "data/b.txt", Content: "b"}).Proposal
		w := f.do("editor", "POST", "/v1/runs/"+r.id+"/approve", `{"proposal":"`+p2+`"}`, 409, nil)
		if !strings.Contains(w.Body.String(), "awaits the approval of proposal "+p1) {
			t.Errorf("approve of another proposal: %s, want a 409 naming %s", w.Body, p1)
		}
		var op api.Operation
		f.do("editor", "POST", "/v1/runs/"+r.id+"/approve", body, 200, &op)
		run := r.record()
		got := r.proposal(p1)
		switch {
		case run.State != api.RunRunning || run.Agent.Awaiting != "" || run.Agent.Approved != p1:
			t.Errorf("run after approval: %s awaiting %q approved %q, want running, approved %s", run.State, run.Agent.Awaiting, run.Agent.Approved, p1)
		case got.State != api.ProposalApproved || got.ApprovedBy == nil || got.ApprovedBy.ID != accountID("editor@example.com"):
			t.Errorf("proposal after approval: %+v, want approved by the editor", got)
		case got.ForStep != len(run.Steps) || !got.Expires.Equal(got.ApprovedAt.Add(DefaultApprovalTTL)):
			t.Errorf("approval for step %d until %v (approved %v), want step %d for %v", got.ForStep, got.Expires, got.ApprovedAt, len(run.Steps), DefaultApprovalTTL)
		}
		// Once decided, no second decision.
		f.do("admin", "POST", "/v1/runs/"+r.id+"/reject", body, 409, nil)
		// Every decision and refusal is audited with the proposal as
		// its target; the run's events have the approval and who gave it.
		entries, err := f.store.Audit(t.Context(), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var results []string
		for _, e := range entries {
			var a api.AuditDocument
			json.Unmarshal(e.Entry, &a)
			if a.Action == "run.approve" || a.Action == "run.reject" {
				results = append(results, a.Action+" "+a.Who+" "+a.Target+" "+a.Result)
			}
		}
		approvals := 0
		for _, s := range results {
			if strings.HasPrefix(s, "run.approve "+accountID("editor@example.com")+" "+p1+" ok") {
				approvals++
			}
		}
		if approvals != 1 || len(results) != 7 {
			t.Errorf("audit of approvals and rejections:\n%s\nwant 7 entries, one approval of %s by the editor", strings.Join(results, "\n"), p1)
		}
		var kinds []string
		for _, e := range r.events() {
			if e.Kind == api.RunEventApproval && (e.By == nil || e.By.ID != accountID("editor@example.com") || e.Proposal != p1) {
				t.Errorf("approval event %+v, want by the editor for %s", e, p1)
			}
			kinds = append(kinds, e.Kind)
		}
		if !slices.Contains(kinds, api.RunEventApproval) {
			t.Errorf("run events %v, want an approval", kinds)
		}
	})

	t.Run("one decision", func(t *testing.T) {
		f, _ := gateFixture(t)
		r := f.newGateRun(true)
		p1 := r.propose(api.ProposedFile{Path: "data/a.txt", Content: gateContent}).Proposal
		r.apply(p1)
		r.pause(p1)
		// People deciding at once: one decision wins, the others are told.
		codes := make(chan int, 8)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				verb, who := "approve", "editor"
				if i%2 == 1 {
					verb, who = "reject", "admin"
				}
				codes <- f.serve(f.request(f.creds[who], "POST", "/v1/runs/"+r.id+"/"+verb, `{"proposal":"`+p1+`"}`)).Code
			}()
		}
		wg.Wait()
		close(codes)
		var got []int
		for c := range codes {
			got = append(got, c)
		}
		slices.Sort(got)
		if want := []int{200, 409, 409, 409, 409, 409, 409, 409}; !slices.Equal(got, want) {
			t.Errorf("8 decisions at once answered %v, want %v", got, want)
		}
		decided := 0
		for _, e := range r.events() {
			if e.Kind == api.RunEventApproval || e.Kind == api.RunEventRejection {
				decided++
			}
		}
		if run := r.record(); decided != 1 || run.State != api.RunRunning {
			t.Errorf("%d decisions in the run's events, run %s; want 1, running", decided, run.State)
		}
	})

	t.Run("applies once", func(t *testing.T) {
		f, _ := gateFixture(t)
		r, p1, _ := approvedRun(t, f)
		res, awaiting, err := r.apply(p1)
		if err != nil || awaiting || res.Revision == "" || res.Error != "" {
			t.Fatalf("ApplyChange %s after approval = %+v, awaiting %v, %v; want a revision", p1, res, awaiting, err)
		}
		for p, want := range map[string]string{"data/a.txt": gateContent, "data/new.txt": "new\n"} {
			if got, _ := f.wsFile(p); got != want {
				t.Errorf("%s after apply = %q, want %q", p, got, want)
			}
		}
		got := r.proposal(p1)
		if got.State != api.ProposalApplied || got.Applied != res.Revision || got.AppliedBy != stepID(r.id, got.ForStep) {
			t.Errorf("proposal after apply: %s applied %q by %q, want applied %s by step %d", got.State, got.Applied, got.AppliedBy, res.Revision, got.ForStep)
		}
		_, _, err = r.apply(p1)
		wantRefusal(t, "a second ApplyChange", err, api.RefusedGate, "applied already", res.Revision)
		if n := f.wsRevisions(); n != 2 {
			t.Errorf("%d revisions, want 2: exactly one apply", n)
		}
	})

	t.Run("another proposal", func(t *testing.T) {
		f, _ := gateFixture(t)
		r, p1, p2 := approvedRun(t, f)
		_, _, err := r.apply(p2)
		wantRefusal(t, "ApplyChange of a changed proposal under the approval of another", err, api.RefusedGate, "only proposal "+p1, p2)
		if n := f.wsRevisions(); n != 1 {
			t.Errorf("%d revisions, want 1", n)
		}
	})

	t.Run("another step", func(t *testing.T) {
		f, _ := gateFixture(t)
		r, p1, _ := approvedRun(t, f)
		r.call(api.ToolRead) // the step the approval was for
		_, _, err := r.apply(p1)
		wantRefusal(t, "ApplyChange at the step after next", err, api.RefusedGate, "approval of proposal "+p1+" is for step")
	})

	t.Run("expired", func(t *testing.T) {
		f, clock := gateFixture(t)
		r, p1, _ := approvedRun(t, f)
		clock.advance(DefaultApprovalTTL)
		_, _, err := r.apply(p1)
		wantRefusal(t, "ApplyChange after the approval expired", err, api.RefusedGate, "expired")
	})

	t.Run("changed record", func(t *testing.T) {
		f, _ := gateFixture(t)
		r, p1, _ := approvedRun(t, f)
		var p api.Proposal
		v, _ := getRecord(t.Context(), f.store, kindProposal, p1, &p)
		p.Files[0].Content = "slipped in after the approval\n"
		if _, err := putRecord(t.Context(), f.store, kindProposal, p1, v, &p); err != nil {
			t.Fatal(err)
		}
		_, _, err := r.apply(p1)
		wantRefusal(t, "ApplyChange of a proposal changed after its approval", err, api.RefusedGate, "not what was approved")
	})

	t.Run("conflict", func(t *testing.T) {
		f, _ := gateFixture(t)
		r, p1, _ := approvedRun(t, f)
		f.wsWrite("data/a.txt", "someone else's\n")
		res, _, err := r.apply(p1)
		if err != nil || res.Revision != "" || !strings.Contains(res.Error, "data/a.txt") {
			t.Fatalf("ApplyChange over a conflicting change = %+v, %v; want an error naming data/a.txt", res, err)
		}
		got := r.proposal(p1)
		if got.State != api.ProposalApplied || got.Applied != "" || !strings.Contains(got.Reason, "data/a.txt") {
			t.Errorf("proposal after a conflict: %s applied %q reason %q, want applied, no revision, the conflict as reason", got.State, got.Applied, got.Reason)
		}
		_, _, err = r.apply(p1)
		wantRefusal(t, "ApplyChange after a conflict", err, api.RefusedGate, "applied already")
	})

	t.Run("rejected", func(t *testing.T) {
		f, _ := gateFixture(t)
		r := f.newGateRun(true)
		p1 := r.propose(api.ProposedFile{Path: "data/a.txt", Content: gateContent}).Proposal
		r.apply(p1)
		r.pause(p1)
		f.do("key-editor", "POST", "/v1/runs/"+r.id+"/reject", `{"proposal":"`+p1+`","reason":"no"}`, 403, nil)
		f.do("editor", "POST", "/v1/runs/"+r.id+"/reject", `{"proposal":"`+p1+`","reason":"not this file"}`, 200, nil)
		run, got := r.record(), r.proposal(p1)
		if run.State != api.RunRunning || run.Agent.Awaiting != "" || run.Agent.Approved != "" {
			t.Errorf("run after reject: %s awaiting %q approved %q, want running", run.State, run.Agent.Awaiting, run.Agent.Approved)
		}
		if got.State != api.ProposalRejected || got.Reason != "not this file" || got.RejectedBy == nil {
			t.Errorf("proposal after reject: %+v", got)
		}
		f.do("editor", "POST", "/v1/runs/"+r.id+"/approve", `{"proposal":"`+p1+`"}`, 409, nil)
		_, _, err := r.apply(p1)
		wantRefusal(t, "ApplyChange of a rejected proposal", err, api.RefusedGate, "rejected", "not this file")
		var found bool
		for _, e := range r.events() {
			found = found || e.Kind == api.RunEventRejection && e.Proposal == p1 && e.By != nil && e.Summary == "not this file"
		}
		if !found {
			t.Errorf("run events %+v, want a rejection of %s with its reason", r.events(), p1)
		}
		entries, err := f.store.Audit(t.Context(), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var audited []string
		for _, e := range entries {
			var a api.AuditDocument
			json.Unmarshal(e.Entry, &a)
			if a.Action == "run.reject" {
				audited = append(audited, a.Who+" "+a.Target+" "+a.Result)
			}
		}
		if want := []string{f.keyOf("key-editor") + "  forbidden", accountID("editor@example.com") + " " + p1 + " ok"}; !slices.Equal(audited, want) {
			t.Errorf("run.reject in the audit: %q, want %q", audited, want)
		}
	})

	t.Run("another run's", func(t *testing.T) {
		f, _ := gateFixture(t)
		a, b := f.newGateRun(false), f.newGateRun(false)
		pa := a.propose(api.ProposedFile{Path: "data/a.txt", Content: gateContent}).Proposal
		_, _, err := b.apply(pa)
		wantRefusal(t, "ApplyChange of another run's proposal", err, api.RefusedGate, "no proposal \""+pa+"\" in this run")
		_, _, err = b.apply("prop-nosuchthing")
		wantRefusal(t, "ApplyChange of no proposal", err, api.RefusedGate, "no proposal")
		w := f.do("viewer", "GET", "/v1/runs/"+b.id+"/proposals/"+pa, "", 404, nil)
		if !strings.Contains(w.Body.String(), "no proposal") {
			t.Errorf("GET another run's proposal: %s", w.Body)
		}
	})

	t.Run("ungated", func(t *testing.T) {
		f, _ := gateFixture(t)
		r := f.newGateRun(false)
		p := r.propose(api.ProposedFile{Path: "data/a.txt", Delete: true}, api.ProposedFile{Path: "data/c.txt", Content: "c\n"}).Proposal
		res, awaiting, err := r.apply(p)
		if err != nil || awaiting || res.Revision == "" {
			t.Fatalf("ungated ApplyChange = %+v, awaiting %v, %v; want a revision", res, awaiting, err)
		}
		if _, ok := f.wsFile("data/a.txt"); ok {
			t.Errorf("data/a.txt still there after applying its deletion")
		}
		if got, _ := f.wsFile("data/c.txt"); got != "c\n" || f.wsRevisions() != 2 {
			t.Errorf("data/c.txt = %q after %d revisions, want c in one revision more", got, f.wsRevisions())
		}
		_, _, err = r.apply(p)
		wantRefusal(t, "a second ungated ApplyChange", err, api.RefusedGate, "applied already")
	})
}

// gaterFile is an agent whose ApplyChange is gated.
const gaterFile = `---
name: gater
description: proposes changes and applies them once a person approved
tools: [Read, ProposeChange, ApplyChange]
gates:
  - tool: ApplyChange
---
Propose, wait, apply.
`

// toolAnswer calls tool with input as the run's grant and checks the
// status; result receives the tool's result.
func (f *fixture) toolAnswer(run, tool, input string, want int, result any) api.ToolAnswer {
	f.t.Helper()
	var ans api.ToolAnswer
	w := f.do("grant", "POST", "/v1/runs/"+run+"/steps", `{"tool":"`+tool+`","input":`+input+`}`, want, nil)
	if want/100 == 2 {
		if err := json.Unmarshal(w.Body.Bytes(), &ans); err != nil {
			f.t.Fatalf("%s: decode %s: %v", tool, w.Body, err)
		}
		if result != nil {
			if err := json.Unmarshal(ans.Result, result); err != nil {
				f.t.Fatalf("%s: decode result %s: %v", tool, ans.Result, err)
			}
		}
	}
	return ans
}

// TestGateThroughTheAPI is the gate of Done means 3 through the routes:
// an agent run made from its file, its tool calls with its grant, the
// approval by a person.
func TestGateThroughTheAPI(t *testing.T) {
	f, _ := gateFixture(t)
	if _, err := f.sched.PutFile(t.Context(), wsMain, "agents/gater.md", strings.NewReader(gaterFile), int64(len(gaterFile)),
		client.WriteOptions{Author: api.Author{Kind: api.AuthorAccount, ID: "seed"}}); err != nil {
		t.Fatal(err)
	}
	var created api.RunCreated
	f.do("editor", "POST", "/v1/runs", `{"workspace":"ws-main","agent":"gater"}`, 201, &created)
	f.creds["grant"] = cred{bearer: created.Grant}
	run := created.ID

	var prop api.ProposeChangeResult
	f.toolAnswer(run, api.ToolProposeChange, `{"files":[{"path":"data/a.txt","content":"`+strings.TrimSuffix(gateContent, "\n")+`\n"}]}`, 200, &prop)
	// Before the approval: the call pauses the run, nothing changes.
	ans := f.toolAnswer(run, api.ToolApplyChange, `{"proposal":"`+prop.Proposal+`"}`, 202, nil)
	if ans.Step.State != api.StepAwaitingApproval {
		t.Errorf("ApplyChange before approval: step %s, want %s", ans.Step.State, api.StepAwaitingApproval)
	}
	var op api.Operation
	f.do("viewer", "GET", "/v1/runs/"+run, "", 200, &op)
	if op.State != api.RunAwaitingApproval || op.Awaiting == nil || op.Awaiting.ID != prop.Proposal {
		t.Fatalf("run after a gated ApplyChange: %s awaiting %+v, want awaiting_approval on %s", op.State, op.Awaiting, prop.Proposal)
	}
	f.toolAnswer(run, api.ToolRead, `{"path":"data/a.txt"}`, 409, nil)
	if got, _ := f.wsFile("data/a.txt"); got != aText {
		t.Fatalf("data/a.txt before approval = %q, want %q", got, aText)
	}
	// Only a person with editor or more approves.
	body := `{"proposal":"` + prop.Proposal + `"}`
	for _, who := range []string{"key-owner", "grant", "viewer"} {
		f.do(who, "POST", "/v1/runs/"+run+"/approve", body, 403, nil)
	}
	var p api.Proposal
	f.do("grant", "GET", "/v1/runs/"+run+"/proposals/"+prop.Proposal, "", 200, &p)
	if p.State != api.ProposalProposed || p.Diff == "" {
		t.Fatalf("proposal before approval: %s, diff %q", p.State, p.Diff)
	}
	f.do("editor", "POST", "/v1/runs/"+run+"/approve", body, 200, &op)
	if op.State != api.RunRunning {
		t.Errorf("run after approval: %s, want running", op.State)
	}
	// The call that paused the run no longer awaits anything.
	if st := op.Steps[ans.Step.Index]; st.State != api.StepDone || st.Tool == nil || !strings.Contains(st.Tool.Summary, "approved by") {
		t.Errorf("the paused ApplyChange step after approval: %s %+v, want done, approved by the editor", st.State, st.Tool)
	}
	// The next step applies it, once.
	var applied api.ApplyChangeResult
	f.toolAnswer(run, api.ToolApplyChange, body, 200, &applied)
	if got, _ := f.wsFile("data/a.txt"); applied.Revision == "" || got != gateContent {
		t.Fatalf("after ApplyChange (%+v): data/a.txt = %q, want %q", applied, got, gateContent)
	}
	w := f.do("grant", "POST", "/v1/runs/"+run+"/steps", `{"tool":"ApplyChange","input":`+body+`}`, 403, nil)
	if !strings.Contains(w.Body.String(), "applied already") {
		t.Errorf("second ApplyChange: %s, want refused applied already", w.Body)
	}
	// The run's events and the audit have it all.
	var events []api.RunEvent
	f.do("viewer", "GET", "/v1/runs/"+run+"/events", "", 200, &events)
	var kinds []string
	for _, e := range events {
		kinds = append(kinds, e.Kind)
		if e.Kind == api.RunEventApproval && (e.By == nil || e.By.ID != accountID("editor@example.com") || e.Proposal != prop.Proposal) {
			t.Errorf("approval event %+v, want the editor's of %s", e, prop.Proposal)
		}
	}
	for _, want := range []string{api.RunEventProposal, api.RunEventAwaiting, api.RunEventApproval, api.RunEventRevision, api.RunEventRefusal} {
		if !slices.Contains(kinds, want) {
			t.Errorf("run events %v, want a %s", kinds, want)
		}
	}
	entries, err := f.store.Audit(t.Context(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var audited []string
	for _, e := range entries {
		var a api.AuditDocument
		json.Unmarshal(e.Entry, &a)
		if a.Action == "run.approve" {
			audited = append(audited, a.Who+" "+a.Target+" "+a.Result)
		}
	}
	if !slices.Contains(audited, accountID("editor@example.com")+" "+prop.Proposal+" ok") || len(audited) != 4 {
		t.Errorf("run.approve in the audit: %q, want 3 refusals and the editor's approval of %s", audited, prop.Proposal)
	}
}

// keyOf is the id of the fixture's key credential name.
func (f *fixture) keyOf(name string) string {
	id, _, _ := strings.Cut(strings.TrimPrefix(f.creds[name].bearer, keyPrefix), "_")
	return prefixKey + id
}
