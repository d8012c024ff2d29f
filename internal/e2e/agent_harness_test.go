package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// The agent-run tests' client (docs/design/agents.md, §3): an agent file
// planted through the files API, a run started by the owner, tool calls
// with the run's grant, and the run and its events read back.

// agentStack starts one scheduler, one agent (for Bash steps) and a
// gateway, and answers the owner's client and a new workspace.
func agentStack(t *testing.T, node, name string) (*fleet, *gwClient, string) {
	t.Helper()
	f := &fleet{}
	startSchedulers(t, f, 1)
	startNamedAgent(t, f, node)
	_, owner, ws := ownerWithWorkspace(t, f, name)
	return f, owner, ws
}

// agentFile is agents/NAME.md with the given tools and more front
// matter lines.
func agentFile(name string, tools []string, more ...string) []byte {
	var b strings.Builder
	b.WriteString("---\nname: " + name + "\ndescription: an agent of the e2e tests\n")
	b.WriteString("tools: [" + strings.Join(tools, ", ") + "]\n")
	b.WriteString("network: none\n")
	for _, l := range more {
		b.WriteString(l + "\n")
	}
	b.WriteString("---\nYou are a test agent. Do what the test says.\n")
	return []byte(b.String())
}

// plant writes files (path: content) into ws as the owner, one revision
// each, and answers the last revision.
func (c *gwClient) plant(ws string, files ...[2]string) api.Revision {
	c.t.Helper()
	var rev api.Revision
	for _, f := range files {
		code, r, body := c.putFile(ws, f[0], []byte(f[1]), "")
		if code != http.StatusCreated {
			c.t.Fatalf("PUT %s = %d %s, want 201", f[0], code, body)
		}
		rev = r
	}
	return rev
}

// agentRun is a live agent run: the owner who started it and a client
// holding its grant.
type agentRun struct {
	t     *testing.T
	owner *gwClient
	grant *gwClient
	id    string
	ws    string
	token string
	// calls counts the tool calls made, refusals those refused; seen is
	// each refusal as its 403 said it, in order.
	calls, refusals int
	seen            []toolError
}

// startAgent plants agents/NAME.md (tools, more front matter) in ws and
// starts a run of it.
func startAgent(t *testing.T, owner *gwClient, ws, name string, tools []string, more ...string) *agentRun {
	t.Helper()
	owner.plant(ws, [2]string{"agents/" + name + ".md", string(agentFile(name, tools, more...))})
	return owner.newRun(ws, name)
}

// newRun starts a run of agent name (its file at the head of ws).
func (c *gwClient) newRun(ws, name string) *agentRun {
	c.t.Helper()
	var created api.RunCreated
	c.must(http.StatusCreated, http.MethodPost, "/v1/runs", api.RunRequest{Workspace: ws, Agent: name}, &created)
	if !strings.HasPrefix(created.Grant, "rg_") || created.Agent == nil || created.State != api.RunRunning {
		c.t.Fatalf("POST /v1/runs for agent %s = %+v, want a running agent run with an rg_ grant", name, created)
	}
	return &agentRun{t: c.t, owner: c, grant: c.withKey(created.Grant), id: created.ID, ws: ws, token: created.Grant}
}

// toolError is the error of a refused tool call (SPEC.md: 403
// {"error": {"code": "refused", "message", "path"?, "did_you_mean"?}}).
type toolError struct {
	Code       string `json:"code"`
	Message    string `json:"message"`
	Reason     string `json:"reason"`
	Path       string `json:"path"`
	DidYouMean string `json:"did_you_mean"`
}

// post sends one raw tool-call body with the grant (query: "" or
// "?wait=..."), and answers the status and body.
func (r *agentRun) post(body []byte, query string) (int, []byte) {
	r.t.Helper()
	req, err := http.NewRequestWithContext(r.t.Context(), http.MethodPost, r.grant.g.site+"/v1/runs/"+r.id+"/steps"+query, bytes.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	r.grant.auth(req)
	resp, err := r.grant.http.Do(req)
	if err != nil {
		r.t.Fatalf("POST /v1/runs/%s/steps: %v", r.id, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	r.calls++
	return resp.StatusCode, b.Bytes()
}

// call makes one tool call of tool with input and answers the status and
// body.
func (r *agentRun) call(tool string, input any) (int, []byte) {
	r.t.Helper()
	in, err := json.Marshal(input)
	if err != nil {
		r.t.Fatal(err)
	}
	b, _ := json.Marshal(api.ToolCall{Tool: tool, Input: in})
	return r.post(b, "")
}

// ok makes a tool call that must answer 200 with a step done, and decodes
// its result into out.
func (r *agentRun) ok(tool string, input, out any) api.ToolAnswer {
	r.t.Helper()
	code, b := r.call(tool, input)
	var ans api.ToolAnswer
	if code != http.StatusOK || json.Unmarshal(b, &ans) != nil {
		r.t.Fatalf("%s %+v = %d %s, want 200", tool, input, code, b)
	}
	if out != nil {
		if err := json.Unmarshal(ans.Result, out); err != nil {
			r.t.Fatalf("%s result %s: %v", tool, ans.Result, err)
		}
	}
	if ans.Step.State != api.StepDone || ans.Step.Tool == nil || ans.Step.Tool.Name != tool {
		r.t.Fatalf("%s %+v: step %+v, want %s done", tool, input, ans.Step, tool)
	}
	return ans
}

// refused checks that an answer is a refusal (403, code refused), counts
// it, and answers its error.
func (r *agentRun) refused(what string, code int, b []byte) toolError {
	r.t.Helper()
	var e struct {
		Error toolError `json:"error"`
	}
	if code != http.StatusForbidden || json.Unmarshal(b, &e) != nil || e.Error.Code != api.CodeRefused {
		r.t.Errorf("%s = %d %s, want 403 with code %s", what, code, b, api.CodeRefused)
		return toolError{}
	}
	r.refusals++
	r.seen = append(r.seen, e.Error)
	return e.Error
}

// run reads the run as its owner.
func (r *agentRun) run() api.Operation {
	r.t.Helper()
	var op api.Operation
	r.owner.must(http.StatusOK, http.MethodGet, "/v1/runs/"+r.id, nil, &op)
	return op
}

// lastStep is the run's last step.
func (r *agentRun) lastStep() api.RunStep {
	r.t.Helper()
	op := r.run()
	if len(op.Steps) == 0 {
		r.t.Fatalf("run %s has no steps", r.id)
	}
	return op.Steps[len(op.Steps)-1]
}

// events reads every page of the run's events as c.
func (r *agentRun) events(c *gwClient) []api.RunEvent {
	r.t.Helper()
	var all []api.RunEvent
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 1000 {
			r.t.Fatalf("events of %s: more than 1,000 pages", r.id)
		}
		path := "/v1/runs/" + r.id + "/events?limit=7"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		req, err := http.NewRequestWithContext(r.t.Context(), http.MethodGet, c.g.site+path, nil)
		if err != nil {
			r.t.Fatal(err)
		}
		c.auth(req)
		resp, err := c.http.Do(req)
		if err != nil {
			r.t.Fatalf("GET %s: %v", path, err)
		}
		var page []api.RunEvent
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b.Bytes(), &page) != nil {
			r.t.Fatalf("GET %s = %d %s, want 200 with events", path, resp.StatusCode, b.Bytes())
		}
		all = append(all, page...)
		if cursor = resp.Header.Get("X-Next-Cursor"); cursor == "" {
			break
		}
	}
	for i, e := range all {
		if e.Seq <= 0 || i > 0 && e.Seq <= all[i-1].Seq {
			r.t.Fatalf("events of %s: seq %d after %v, want increasing from 1", r.id, e.Seq, seqs(all[:i]))
		}
	}
	return all
}

func seqs(es []api.RunEvent) []int {
	var s []int
	for _, e := range es {
		s = append(s, e.Seq)
	}
	return s
}

// bash runs command as a Bash step and waits until the step ended; it
// answers the step as the run shows it and the result of the call.
func (r *agentRun) bash(command string) (api.RunStep, api.BashResult) {
	r.t.Helper()
	b, _ := json.Marshal(api.ToolCall{Tool: api.ToolBash, Input: json.RawMessage(mustJSON(r.t, api.BashInput{Command: command}))})
	code, body := r.post(b, "?wait=20s")
	var ans api.ToolAnswer
	var res api.BashResult
	if code != http.StatusOK || json.Unmarshal(body, &ans) != nil || json.Unmarshal(ans.Result, &res) != nil {
		r.t.Fatalf("Bash %q = %d %s, want 200 with its step", command, code, body)
	}
	var st api.RunStep
	waitFor(r.t, 3*time.Minute, "the Bash step "+ans.Step.ID+" to end", func() bool {
		for _, s := range r.run().Steps {
			if s.ID == ans.Step.ID {
				st = s
				return isTerminal(s.State)
			}
		}
		return false
	})
	return st, res
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// head is the workspace's head revision.
func (c *gwClient) head(ws string) api.Revision {
	c.t.Helper()
	revs := c.revisions(ws)
	if len(revs) == 0 {
		c.t.Fatalf("workspace %s has no revision", ws)
	}
	return revs[0]
}

// tree is the tree of ws at rev ("" for the head).
func (c *gwClient) tree(ws, rev string) []api.TreeEntry {
	c.t.Helper()
	path := "/v1/workspaces/" + ws + "/tree"
	if rev != "" {
		path += "?rev=" + rev
	}
	var tree []api.TreeEntry
	c.must(http.StatusOK, http.MethodGet, path, nil, &tree)
	slices.SortFunc(tree, func(a, b api.TreeEntry) int { return strings.Compare(a.Path, b.Path) })
	return tree
}

// refusalEvents are the refusal events of es.
func refusalEvents(es []api.RunEvent) []api.RunEvent {
	var rs []api.RunEvent
	for _, e := range es {
		if e.Kind == api.RunEventRefusal {
			rs = append(rs, e)
		}
	}
	return rs
}

// checkRefusals checks that the run counts r.refusals refusals, that its
// events hold exactly as many refusal events, and answers them.
func (r *agentRun) checkRefusals() []api.RunEvent {
	r.t.Helper()
	op := r.run()
	if op.Refusals != r.refusals {
		r.t.Errorf("run %s counts %d refusals, want %d (one per refused call)", r.id, op.Refusals, r.refusals)
	}
	refused := 0
	for _, s := range op.Steps {
		if s.State == api.StepRefused {
			refused++
		}
	}
	if refused != r.refusals {
		r.t.Errorf("run %s has %d refused steps, want %d", r.id, refused, r.refusals)
	}
	rs := refusalEvents(r.events(r.owner))
	r.t.Logf("run %s: %d calls, %d refused, %d refusal events, the run counts %d", r.id, r.calls, r.refusals, len(rs), op.Refusals)
	if len(rs) != r.refusals {
		r.t.Errorf("run %s has %d refusal events, want %d", r.id, len(rs), r.refusals)
		return rs
	}
	// Each event is its call's refusal, in order, with its path and
	// suggestion (a long path kept by its first bytes).
	for i, e := range rs {
		want := r.seen[i]
		got := e.Refusal
		if got == nil {
			r.t.Errorf("refusal event %d has no refusal", e.Seq)
			continue
		}
		samePath := got.Path == want.Path || len(want.Path) > 200 && len(got.Path) >= 64 && strings.HasPrefix(want.Path, got.Path[:64])
		if !samePath || got.DidYouMean != want.DidYouMean || want.Reason != "" && got.Reason != want.Reason {
			r.t.Errorf("refusal event %d %+v, want the refusal of call %d: reason %q, path %q, did_you_mean %q",
				e.Seq, *got, i+1, want.Reason, short(want.Path), want.DidYouMean)
		}
	}
	return rs
}

// finish ends the run with its grant.
func (r *agentRun) finish() api.Operation {
	r.t.Helper()
	code, b := r.grant.do(http.MethodPost, "/v1/runs/"+r.id+"/finish", api.FinishRequest{Reason: "the test is done"}, nil)
	if code/100 != 2 {
		r.t.Fatalf("finish %s = %d %s, want 2xx", r.id, code, b)
	}
	return r.run()
}
