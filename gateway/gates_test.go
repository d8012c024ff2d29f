package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/gateway/tools"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// wsHead is ws-main's head: its revision count and the content of p
// ("", false when it has no such file).
func (f *fixture) wsFile(p string) (string, bool) {
	f.t.Helper()
	file, err := f.sched.File(f.t.Context(), wsMain, p, client.FileOptions{})
	if IsNotFound(err) {
		return "", false
	}
	if err != nil {
		f.t.Fatal(err)
	}
	defer file.Body.Close()
	b, err := io.ReadAll(file.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return string(b), true
}

// wsRevisions counts ws-main's revisions.
func (f *fixture) wsRevisions() int {
	f.t.Helper()
	revs, _, err := f.sched.Revisions(f.t.Context(), wsMain, 100, "")
	if err != nil {
		f.t.Fatal(err)
	}
	return len(revs)
}

// wsWrite writes p in ws-main as another writer would.
func (f *fixture) wsWrite(p, content string) {
	f.t.Helper()
	if _, err := f.sched.PutFile(f.t.Context(), wsMain, p, strings.NewReader(content), int64(len(content)),
		client.WriteOptions{Author: api.Author{Kind: api.AuthorAccount, ID: "other-writer"}}); err != nil {
		f.t.Fatal(err)
	}
}

// gateRun is an agent run of ws-main for the gate tests, its tool calls
// built by hand as the runs helper's step flow builds them.
type gateRun struct {
	f      *fixture
	id     string
	claims *grantClaims
}

// newGateRun records a live agent run whose grant holds ProposeChange
// and ApplyChange, gated or not.
func (f *fixture) newGateRun(gated bool) *gateRun {
	f.t.Helper()
	now := f.g.now()
	claims := &grantClaims{ID: "grant-" + randomString(8), Workspace: wsMain, Tenant: f.tenant, Agent: "gater",
		Tools: []string{api.ToolRead, api.ToolProposeChange, api.ToolApplyChange}}
	if gated {
		claims.Gates = []string{api.ToolApplyChange}
	}
	run := runRecord{ID: newTimeID(prefixRun, now), Workspace: wsMain, State: api.RunRunning,
		CreatedBy: personActor("editor@example.com"), CreatedAt: now,
		Agent: &agentRunRecord{RunAgent: api.RunAgent{Name: "gater", Path: "agents/gater.md", Tools: claims.Tools, Gates: claims.Gates}, Grant: claims.ID}}
	claims.Run = run.ID
	f.put(kindRun, run.ID, &run)
	return &gateRun{f: f, id: run.ID, claims: claims}
}

// personActor is the actor of the account of email.
func personActor(email string) api.Actor { return api.Actor{Kind: "account", ID: accountID(email)} }

// call appends the run's next step (a call of tool) and returns the
// call as the tools see it.
func (r *gateRun) call(tool string) *toolCall {
	r.f.t.Helper()
	ctx := r.f.t.Context()
	var run runRecord
	v, err := getRecord(ctx, r.f.store, kindRun, r.id, &run)
	if err != nil {
		r.f.t.Fatal(err)
	}
	i := len(run.Steps)
	run.Steps = append(run.Steps, runStepRecord{ID: stepID(run.ID, i), Index: i, Status: stepEnded, Tool: &api.ToolStep{Name: tool}})
	if _, err := putRecord(ctx, r.f.store, kindRun, run.ID, v, &run); err != nil {
		r.f.t.Fatal(err)
	}
	author := api.Author{Kind: api.AuthorStep, ID: stepID(run.ID, i)}
	env, err := r.f.g.toolEnv(r.f.in(ctx), run.Workspace, author)
	if err != nil {
		r.f.t.Fatal(err)
	}
	return &toolCall{run: &run, claims: r.claims, index: i, stepID: stepID(run.ID, i), env: env, author: author}
}

func (r *gateRun) propose(files ...api.ProposedFile) api.ProposeChangeResult {
	r.f.t.Helper()
	res, err := r.f.g.toolPropose(r.f.in(r.f.t.Context()), r.call(api.ToolProposeChange), api.ProposeChangeInput{Files: files})
	if err != nil || res.Error != "" {
		r.f.t.Fatalf("ProposeChange = %+v, %v, want a proposal", res, err)
	}
	return res
}

// apply calls ApplyChange of proposal as the run's next step.
func (r *gateRun) apply(proposal string) (api.ApplyChangeResult, bool, error) {
	return r.f.g.toolApply(r.f.in(r.f.t.Context()), r.call(api.ToolApplyChange), api.ApplyChangeInput{Proposal: proposal})
}

// pause sets the run awaiting approval of proposal, as the step flow
// does when toolApply answers awaiting.
func (r *gateRun) pause(proposal string) {
	r.f.t.Helper()
	ctx := r.f.t.Context()
	var run runRecord
	v, err := getRecord(ctx, r.f.store, kindRun, r.id, &run)
	if err != nil {
		r.f.t.Fatal(err)
	}
	run.State, run.Agent.Awaiting = api.RunAwaitingApproval, proposal
	if _, err := putRecord(ctx, r.f.store, kindRun, run.ID, v, &run); err != nil {
		r.f.t.Fatal(err)
	}
}

func (r *gateRun) record() runRecord {
	r.f.t.Helper()
	var run runRecord
	if _, err := getRecord(r.f.t.Context(), r.f.store, kindRun, r.id, &run); err != nil {
		r.f.t.Fatal(err)
	}
	return run
}

func (r *gateRun) proposal(id string) api.Proposal {
	r.f.t.Helper()
	var p api.Proposal
	if _, err := getRecord(r.f.t.Context(), r.f.store, kindProposal, id, &p); err != nil {
		r.f.t.Fatal(err)
	}
	return p
}

// events is the run's events as recorded.
func (r *gateRun) events() []api.RunEvent {
	r.f.t.Helper()
	recs, _, err := r.f.store.ListRecordsPage(r.f.t.Context(), kindRunEvent, r.id+".", 1000, "")
	if err != nil {
		r.f.t.Fatal(err)
	}
	var evs []api.RunEvent
	for _, rec := range recs {
		var e api.RunEvent
		json.Unmarshal(rec.Value, &e)
		evs = append(evs, e)
	}
	return evs
}

// wantRefusal checks that err is a refusal with reason whose message
// holds every one of words.
func wantRefusal(t *testing.T, what string, err error, reason string, words ...string) {
	t.Helper()
	var r *tools.Refusal
	if !errors.As(err, &r) {
		t.Fatalf("%s = %v, want a refusal (%s)", what, err, reason)
	}
	if r.Reason != reason {
		t.Errorf("%s refused %s (%s), want reason %s", what, r.Reason, r.Message, reason)
	}
	for _, w := range words {
		if !strings.Contains(r.Message, w) {
			t.Errorf("%s refused %q, want it to say %q", what, r.Message, w)
		}
	}
}

const gateContent = "approved content\n"

// gateFixture is a fixture on a clock the test moves.
func gateFixture(t *testing.T) (*fixture, *testClock) {
	clock := newTestClock() // grant_test.go
	clock.t = clock.t.Truncate(time.Second)
	f := newFixtureWith(t, func(cfg *Config) { cfg.Now = clock.now })
	return f, clock
}

// approvedRun is a gated run with two proposals, P1 (data/a.txt and
// data/new.txt) and P2 (a changed data/a.txt), that paused on P1 and a
// person approved: the next step may apply P1.
func approvedRun(t *testing.T, f *fixture) (r *gateRun, p1, p2 string) {
	t.Helper()
	r = f.newGateRun(true)
	p1 = r.propose(api.ProposedFile{Path: "data/new.txt", Content: "new\n"}, api.ProposedFile{Path: "/workspace/data/a.txt", Content: gateContent}).Proposal
	p2 = r.propose(api.ProposedFile{Path: "data/a.txt", Content: "not what was approved\n"}).Proposal
	res, awaiting, err := r.apply(p1)
	if err != nil || !awaiting || res.Revision != "" {
		t.Fatalf("ApplyChange %s before approval = %+v, awaiting %v, %v; want awaiting", p1, res, awaiting, err)
	}
	if n := f.wsRevisions(); n != 1 {
		t.Fatalf("%d revisions after a paused ApplyChange, want 1", n)
	}
	r.pause(p1)
	f.do("editor", "POST", "/v1/runs/"+r.id+"/approve", `{"proposal":"`+p1+`"}`, 200, nil)
	return r, p1, p2
}

// TestProposeChange: a proposal records the files against the head and
// changes nothing; what the tool does not take is refused.
func TestProposeChange(t *testing.T) {
	f, _ := gateFixture(t)
	r := f.newGateRun(true)
	in := api.ProposeChangeInput{Message: "fix a", Files: []api.ProposedFile{
		{Path: "/workspace/data/z.txt", Content: "z\n"}, {Path: "data/a.txt", Content: "hello, proposal\n"}}}
	c := r.call(api.ToolProposeChange)
	res, err := f.g.toolPropose(f.in(t.Context()), c, in)
	if err != nil || res.Error != "" || res.Base != f.rev {
		t.Fatalf("ProposeChange = %+v, %v; want a proposal on %s", res, err, f.rev)
	}
	for _, want := range []string{"-hello, workspace", "+hello, proposal", "+++ b/data/z.txt"} {
		if !strings.Contains(res.Diff, want) {
			t.Errorf("diff %q, want it to hold %q", res.Diff, want)
		}
	}
	p := r.proposal(res.Proposal)
	wantFiles := []api.ProposedFile{{Path: "data/a.txt", Content: "hello, proposal\n"}, {Path: "data/z.txt", Content: "z\n"}}
	switch {
	case !strings.HasPrefix(p.ID, prefixProposal) || p.Run != r.id || p.Step != c.stepID || p.State != api.ProposalProposed || p.Message != "fix a":
		t.Errorf("proposal %+v, want proposed by step %s of %s", p, c.stepID, r.id)
	case !slices.Equal(p.Files, wantFiles) || p.SHA256 != proposalDigest(wantFiles) || p.Diff != res.Diff:
		t.Errorf("proposal files %+v digest %s, want %+v (sorted, cleaned) with their digest", p.Files, p.SHA256, wantFiles)
	}
	if n := f.wsRevisions(); n != 1 {
		t.Errorf("%d revisions after ProposeChange, want 1: nothing changes", n)
	}
	// The proposal route shows it to viewers of the workspace only.
	var got api.Proposal
	f.do("viewer", "GET", "/v1/runs/"+r.id+"/proposals/"+p.ID, "", 200, &got)
	if got.ID != p.ID || got.SHA256 != p.SHA256 {
		t.Errorf("GET proposal = %+v, want %s", got, p.ID)
	}
	f.do("other", "GET", "/v1/runs/"+r.id+"/proposals/"+p.ID, "", 404, nil)
	f.do("viewer", "GET", "/v1/runs/"+r.id+"/proposals/prop-nosuchthing", "", 404, nil)

	many := make([]api.ProposedFile, maxProposalFiles+1)
	for i := range many {
		many[i] = api.ProposedFile{Path: fmt.Sprintf("f%d", i), Content: "x"}
	}
	for _, tc := range []struct {
		name   string
		in     api.ProposeChangeInput
		reason string
		words  []string
	}{
		{"nothing", api.ProposeChangeInput{}, api.RefusedInput, []string{"at least one"}},
		{"patch of agents/", api.ProposeChangeInput{Patch: "--- /dev/null\n+++ b/agents/x.md\n@@ -0,0 +1 @@\n+tools: [Bash]\n"}, api.RefusedReadOnly, []string{"agents/"}},
		{"patch and files", api.ProposeChangeInput{Patch: "x", Files: wantFiles}, api.RefusedInput, []string{"either files or patch"}},
		{"too many files", api.ProposeChangeInput{Files: many}, api.RefusedInput, []string{"65 files, at most 64"}},
		{"too much content", api.ProposeChangeInput{Files: []api.ProposedFile{{Path: "big", Content: strings.Repeat("x", maxProposalBytes+1)}}}, api.RefusedInput, []string{"192 KiB"}},
		{"outside", api.ProposeChangeInput{Files: []api.ProposedFile{{Path: "/data/a.txt", Content: "x"}}}, api.RefusedPath, []string{"outside the workspace", "/workspace/data/a.txt"}},
		{"traversal", api.ProposeChangeInput{Files: []api.ProposedFile{{Path: "data/../../etc/passwd", Content: "x"}}}, api.RefusedPath, []string{"outside the workspace"}},
		{"library", api.ProposeChangeInput{Files: []api.ProposedFile{{Path: "/library/x", Content: "x"}}}, api.RefusedReadOnly, []string{"read-only"}},
		{"agent file", api.ProposeChangeInput{Files: []api.ProposedFile{{Path: "agents/gater.md", Content: "tools: [Bash]"}}}, api.RefusedReadOnly, []string{"agents/"}},
		{"record too large", api.ProposeChangeInput{Files: []api.ProposedFile{{Path: "big.txt", Content: strings.Repeat("a line\n", 20000)}}}, api.RefusedInput, []string{"with its diff", "fewer or smaller"}},
		{"twice", api.ProposeChangeInput{Files: []api.ProposedFile{{Path: "data/a.txt", Content: "1"}, {Path: "/workspace/data/a.txt", Content: "2"}}}, api.RefusedInput, []string{"more than once"}},
	} {
		_, err := f.g.toolPropose(f.in(t.Context()), r.call(api.ToolProposeChange), tc.in)
		wantRefusal(t, "ProposeChange "+tc.name, err, tc.reason, tc.words...)
	}
	// A patch against the head is the files it makes, whole; one that
	// does not apply is a failure the model reads.
	patch := "diff --git a/data/a.txt b/data/a.txt\n--- a/data/a.txt\n+++ b/data/a.txt\n@@ -1 +1 @@\n-hello, workspace\n+hello, patch\n"
	c = r.call(api.ToolProposeChange)
	res, err = f.g.toolPropose(f.in(t.Context()), c, api.ProposeChangeInput{Patch: patch})
	if err != nil || res.Error != "" || !strings.Contains(res.Diff, "+hello, patch") {
		t.Fatalf("ProposeChange of a patch = %+v, %v; want a proposal", res, err)
	}
	if p := r.proposal(res.Proposal); !slices.Equal(p.Files, []api.ProposedFile{{Path: "data/a.txt", Content: "hello, patch\n"}}) || p.Base != f.rev {
		t.Errorf("proposal of a patch: files %+v on %s, want data/a.txt whole on %s", p.Files, p.Base, f.rev)
	}
	res, err = f.g.toolPropose(f.in(t.Context()), r.call(api.ToolProposeChange), api.ProposeChangeInput{Patch: strings.ReplaceAll(patch, "-hello, workspace", "-goodbye")})
	if err != nil || res.Proposal != "" || !strings.Contains(res.Error, "patch") {
		t.Errorf("ProposeChange of a patch that does not apply = %+v, %v; want an error", res, err)
	}
	// A deletion of nothing is a failure the model reads.
	res, err = f.g.toolPropose(f.in(t.Context()), r.call(api.ToolProposeChange), api.ProposeChangeInput{Files: []api.ProposedFile{{Path: "nothing.txt", Delete: true}}})
	if err != nil || res.Proposal != "" || !strings.Contains(res.Error, "no such file") {
		t.Errorf("ProposeChange of a deletion of nothing = %+v, %v; want an error", res, err)
	}
}

// TestProposalDigest: the digest is of the files whatever their order,
// and tells apart every change of a path, a content or a deletion.
func TestProposalDigest(t *testing.T) {
	base := []api.ProposedFile{{Path: "a", Content: "1"}, {Path: "b", Content: "2"}}
	d := proposalDigest(base)
	if got := proposalDigest([]api.ProposedFile{base[1], base[0]}); got != d {
		t.Errorf("digest of the files reordered = %s, want %s", got, d)
	}
	for name, files := range map[string][]api.ProposedFile{
		"content":         {{Path: "a", Content: "1"}, {Path: "b", Content: "3"}},
		"path":            {{Path: "a", Content: "1"}, {Path: "c", Content: "2"}},
		"deletion":        {{Path: "a", Content: "1"}, {Path: "b", Delete: true}},
		"empty":           {{Path: "a", Content: "1"}, {Path: "b"}},
		"one file":        {{Path: "a", Content: "1"}},
		"content as path": {{Path: "a", Content: "1\x00b\x00file 1\n2"}},
	} {
		if got := proposalDigest(files); got == d {
			t.Errorf("digest with another %s = %s, the same as the original's", name, got)
		}
	}
	if got, want := proposalDigest([]api.ProposedFile{{Path: "b", Delete: true}}), proposalDigest([]api.ProposedFile{{Path: "b"}}); got == want {
		t.Errorf("a deletion and an empty file have the same digest %s", got)
	}
}

// TestProposalsGoWithTheirRun: retention deletes a run's proposals with
// it, and no other run's.
func TestProposalsGoWithTheirRun(t *testing.T) {
	f, _ := gateFixture(t)
	a, b := f.newGateRun(false), f.newGateRun(false)
	pa := a.propose(api.ProposedFile{Path: "x", Content: "1"}).Proposal
	pb := b.propose(api.ProposedFile{Path: "x", Content: "2"}).Proposal
	if !strings.HasPrefix(pa, proposalPrefix(a.id)) || !validID(pa, prefixProposal) {
		t.Fatalf("proposal id %s, want a valid id starting %s", pa, proposalPrefix(a.id))
	}
	if err := f.g.deleteRunProposals(f.in(t.Context()), a.id); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.GetRecord(t.Context(), kindProposal, pa); !IsNotFound(err) {
		t.Errorf("proposal %s of the deleted run: %v, want not found", pa, err)
	}
	if _, err := f.store.GetRecord(t.Context(), kindProposal, pb); err != nil {
		t.Errorf("proposal %s of another run: %v, want kept", pb, err)
	}
}
