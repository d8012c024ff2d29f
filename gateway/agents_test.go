package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// agentText is an agent file of name with tools and extra front matter
// lines.
func agentText(name string, tools []string, extra ...string) string {
	return "---\nname: " + name + "\ndescription: a test agent\ntools: [" + strings.Join(tools, ", ") + "]\n" +
		strings.Join(append(extra, ""), "\n") + "---\nDo what the test says.\n"
}

// plant writes path into ws-main as a person would, returning the
// revision.
func (f *fixture) plant(path, content string) string {
	f.t.Helper()
	rev, err := f.sched.PutFile(f.t.Context(), wsMain, path, strings.NewReader(content), int64(len(content)),
		client.WriteOptions{Author: api.Author{Kind: api.AuthorAccount, ID: "seed"}, Message: "plant"})
	if err != nil {
		f.t.Fatal(err)
	}
	return rev.ID
}

// startAgent plants agent name with tools and starts a run of it as the
// editor key: the answer, and the run's grant as a credential.
func (f *fixture) startAgent(name string, tools []string, extra ...string) (api.RunCreated, cred) {
	f.t.Helper()
	f.plant("agents/"+name+".md", agentText(name, tools, extra...))
	var rc api.RunCreated
	f.do("key-editor", "POST", "/v1/runs", `{"workspace":"ws-main","agent":"`+name+`"}`, 201, &rc)
	if !strings.HasPrefix(rc.Grant, grantPrefix) {
		f.t.Fatalf("grant = %q, want rg_...", rc.Grant)
	}
	return rc, cred{bearer: rc.Grant}
}

// call makes tool call tool(input) on run with grant g.
func (f *fixture) call(g cred, run, query, tool, input string) *httptest.ResponseRecorder {
	f.t.Helper()
	body := fmt.Sprintf(`{"tool":%q,"input":%s}`, tool, input)
	return f.serve(f.request(g, "POST", "/v1/runs/"+run+"/steps"+query, body))
}

// mustCall is call, checking the status and decoding the answer.
func (f *fixture) mustCall(g cred, run, tool, input string, want int) api.ToolAnswer {
	f.t.Helper()
	w := f.call(g, run, "", tool, input)
	if w.Code != want {
		f.t.Fatalf("%s %s = %d %s, want %d", tool, input, w.Code, w.Body, want)
	}
	var a api.ToolAnswer
	if want < 300 {
		if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil {
			f.t.Fatalf("%s: decode %s: %v", tool, w.Body, err)
		}
	}
	return a
}

// events reads every event of run, a page of limit at a time.
func (f *fixture) events(run string, limit int) []api.RunEvent {
	f.t.Helper()
	var all []api.RunEvent
	cursor := ""
	for range 1000 {
		q := fmt.Sprintf("/v1/runs/%s/events?limit=%d", run, limit)
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		var page []api.RunEvent
		w := f.do("viewer", "GET", q, "", 200, &page)
		all = append(all, page...)
		if cursor = w.Header().Get(nextCursorHeader); cursor == "" {
			return all
		}
	}
	f.t.Fatal("events: the pages do not end")
	return nil
}

func eventKinds(evs []api.RunEvent) string {
	var k []string
	for _, e := range evs {
		k = append(k, e.Kind)
	}
	return strings.Join(k, " ")
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestAgentRunCreate(t *testing.T) {
	f := newFixture(t)
	text := agentText("reader", []string{"Read", "Glob"})
	rev := f.plant("agents/reader.md", text)
	var rc api.RunCreated
	f.do("key-editor", "POST", "/v1/runs", `{"workspace":"ws-main","agent":"reader"}`, 201, &rc)
	a := rc.Agent
	if a == nil || a.Path != "agents/reader.md" || a.Revision != rev || a.SHA256 != sha(text) || !slices.Equal(a.Tools, []string{"Read", "Glob"}) {
		t.Fatalf("agent = %+v, want agents/reader.md at %s with its digest and tools Read, Glob", a, rev)
	}
	if rc.State != api.RunRunning || len(rc.Steps) != 0 || !strings.HasPrefix(rc.Grant, grantPrefix) {
		t.Errorf("run = %s with %d steps and grant %q, want running, no step, rg_...", rc.State, len(rc.Steps), rc.Grant)
	}
	if d := time.Until(a.GrantExpires); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("grant expires in %v, want 1h (limits.run's default)", d)
	}
	// The grant is shown once: the run's page does not have it.
	w := f.do("viewer", "GET", "/v1/runs/"+rc.ID, "", 200, nil)
	if strings.Contains(w.Body.String(), rc.Grant) || strings.Contains(w.Body.String(), `"grant"`) {
		t.Errorf("the run's page shows the grant: %s", w.Body)
	}
	if evs := f.events(rc.ID, 10); eventKinds(evs) != api.RunEventCreated || evs[0].Seq != 1 || evs[0].Revision != rev {
		t.Errorf("events = %+v, want one run_created at %s", evs, rev)
	}
	// The grant reads its own run.
	f.creds["grant"] = cred{bearer: rc.Grant}
	f.do("grant", "GET", "/v1/runs/"+rc.ID, "", 200, nil)

	f.plant("agents/bad.md", "---\nname: bad\ntools: [Read]\ncolour: blue\n---\n")
	for _, tc := range []struct {
		name, body string
		status     int
		want       []string
	}{
		{"missing", `{"workspace":"ws-main","agent":"writer"}`, 404, []string{"agents/writer.md", "bad, reader"}},
		{"bad file", `{"workspace":"ws-main","agent":"bad"}`, 400, []string{"agents/bad.md", "line 4", `colour`}},
		{"steps too", `{"workspace":"ws-main","agent":"reader","steps":[{"args":["true"]}]}`, 400, []string{`agent`, `steps`}},
		{"bad name", `{"workspace":"ws-main","agent":"../x"}`, 400, []string{`agent`, `../x`}},
		{"other workspace", `{"workspace":"ws-other","agent":"reader"}`, 404, []string{"agents/reader.md"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := f.do("key-editor", "POST", "/v1/runs", tc.body, tc.status, nil)
			for _, s := range tc.want {
				if !strings.Contains(w.Body.String(), s) {
					t.Errorf("answer %s does not name %s", w.Body, s)
				}
			}
		})
	}
}

func TestAgentFileTools(t *testing.T) {
	f := newFixture(t)
	rc, g := f.startAgent("editor", []string{"Read", "Glob", "Grep", "Write", "Edit"})
	ctx := t.Context()

	a := f.mustCall(g, rc.ID, "Read", `{"path":"/workspace/data/a.txt"}`, 200)
	var read api.ReadResult
	json.Unmarshal(a.Result, &read)
	if !strings.Contains(read.Content, "hello, workspace") || a.Step.State != api.StepDone || a.Step.Tool == nil || a.Step.Tool.Name != "Read" {
		t.Fatalf("Read = %+v, step %+v, want a.txt's content, done", read, a.Step)
	}
	a = f.mustCall(g, rc.ID, "Write", `{"path":"data/b.txt","content":"one\ntwo\n"}`, 200)
	var wrote api.WriteResult
	json.Unmarshal(a.Result, &wrote)
	if wrote.Revision == "" || a.Step.Revision != wrote.Revision {
		t.Fatalf("Write = %+v, step revision %q, want a revision", wrote, a.Step.Revision)
	}
	writeStep := a.Step.ID
	a = f.mustCall(g, rc.ID, "Edit", `{"path":"data/b.txt","old_string":"two","new_string":"three"}`, 200)
	var edited api.EditResult
	json.Unmarshal(a.Result, &edited)
	if edited.Replacements != 1 || edited.Revision == "" {
		t.Fatalf("Edit = %+v, want 1 replacement and a revision", edited)
	}
	editStep := a.Step.ID
	a = f.mustCall(g, rc.ID, "Glob", `{"pattern":"data/*.txt"}`, 200)
	var glob api.GlobResult
	json.Unmarshal(a.Result, &glob)
	if !slices.Equal(glob.Paths, []string{"data/a.txt", "data/b.txt"}) && !slices.Equal(glob.Paths, []string{"/workspace/data/a.txt", "/workspace/data/b.txt"}) {
		t.Errorf("Glob = %v, want a.txt and b.txt", glob.Paths)
	}
	a = f.mustCall(g, rc.ID, "Grep", `{"pattern":"three"}`, 200)
	var grep api.GrepResult
	json.Unmarshal(a.Result, &grep)
	if grep.Count != 1 {
		t.Errorf("Grep = %+v, want one match", grep)
	}
	// A file that is not there: the call ran and failed.
	a = f.mustCall(g, rc.ID, "Read", `{"path":"data/none.txt"}`, 200)
	if a.Step.State != api.StepFailed {
		t.Errorf("Read of a missing file: step %s, want failed", a.Step.State)
	}

	// Each write is a revision authored by its step.
	for step, rev := range map[string]string{writeStep: wrote.Revision, editStep: edited.Revision} {
		r, err := f.sched.Revision(ctx, wsMain, rev)
		if err != nil || r.Author != (api.Author{Kind: api.AuthorStep, ID: step}) {
			t.Errorf("revision %s = %+v, %v, want authored by step %s", rev, r.Author, err, step)
		}
		// The gateway's answer names the step's run.
		var pub api.Revision
		f.do("viewer", "GET", "/v1/workspaces/"+wsMain+"/revisions/"+rev, "", 200, &pub)
		if pub.Run != rc.ID {
			t.Errorf("GET revision %s: run %q, want %s", rev, pub.Run, rc.ID)
		}
	}
	op := f.getRun(rc.ID)
	if got, want := stepStates(op), "done done done done done failed"; got != want || op.State != api.RunRunning {
		t.Errorf("run = %s [%s], want running [%s]", op.State, got, want)
	}
	for i, tool := range []string{"Read", "Write", "Edit", "Glob", "Grep", "Read"} {
		if s := op.Steps[i]; s.Tool == nil || s.Tool.Name != tool || s.Tool.InputSHA256 == "" || s.Tool.Summary == "" || s.Tool.Input == "" {
			t.Errorf("step %d tool = %+v, want %s with its input digest and a summary", i, s.Tool, tool)
		}
	}
	if fc := op.FilesChanged; fc == nil || !slices.Equal(fc.Added, []string{"data/b.txt"}) {
		t.Errorf("run's files changed = %+v, want data/b.txt added", fc)
	}
	// A step the gateway answered has no stream; it reads as a step.
	f.do("viewer", "GET", "/v1/steps/"+writeStep+"/stream", "", 409, nil)
	var one api.RunStep
	if f.do("viewer", "GET", "/v1/steps/"+writeStep, "", 200, &one); one.State != api.StepDone || one.Tool == nil || one.Revision != wrote.Revision {
		t.Errorf("GET the Write step = %+v, want done with its revision", one)
	}
	// The run's list shows the steps too.
	var list []api.Operation
	f.do("viewer", "GET", "/v1/runs?workspace=ws-main", "", 200, &list)
	if i := slices.IndexFunc(list, func(o api.Operation) bool { return o.ID == rc.ID }); i < 0 || len(list[i].Steps) != 6 || list[i].Steps[1].Tool == nil {
		t.Errorf("the list does not show the agent run's tool steps: %+v", list)
	}

	evs := f.events(rc.ID, 3)
	if got, want := eventKinds(evs), "run_created tool_call tool_call revision tool_call revision tool_call tool_call tool_call"; got != want {
		t.Fatalf("events = %s, want %s", got, want)
	}
	for i, e := range evs {
		if e.Seq != i+1 {
			t.Errorf("event %d seq %d, want %d", i, e.Seq, i+1)
		}
	}
	if e := evs[3]; e.Revision != wrote.Revision || len(e.Changes) != 1 || e.Changes[0].Path != "data/b.txt" || e.Changes[0].SHA256 != sha("one\ntwo\n") || e.Parent == "" {
		t.Errorf("Write's revision event = %+v, want data/b.txt with its digest", e)
	}
	if e := evs[5]; e.Revision != edited.Revision || len(e.Changes) != 1 || e.Changes[0].SHA256 != sha("one\nthree\n") || e.Parent != wrote.Revision {
		t.Errorf("Edit's revision event = %+v, want data/b.txt's new digest from %s", e, wrote.Revision)
	}
}

func TestAgentRefusals(t *testing.T) {
	f := newFixture(t)
	rc, g := f.startAgent("reader", []string{"Read"})
	for _, tc := range []struct {
		tool, input, reason string
		path                bool
	}{
		{"Write", `{"path":"x","content":"y"}`, api.RefusedTool, false},
		{"Bash", `{"command":"echo hi > x"}`, api.RefusedTool, false},
		{"Launch", `{}`, api.RefusedTool, false},
		{"Read", `{"path":"a","colour":1}`, api.RefusedInput, false},
		{"Read", `"a"`, api.RefusedInput, false},
		{"Read", `{"path":"/data/a.txt"}`, api.RefusedPath, true},
	} {
		w := f.call(g, rc.ID, "", tc.tool, tc.input)
		var e struct {
			Error struct {
				Code, Message, Reason, Path, DidYouMean string `json:",omitempty"`
			}
		}
		json.Unmarshal(w.Body.Bytes(), &e)
		if w.Code != 403 || e.Error.Code != api.CodeRefused || e.Error.Reason != tc.reason || e.Error.Message == "" {
			t.Errorf("%s %s = %d %s, want 403 refused %s", tc.tool, tc.input, w.Code, w.Body, tc.reason)
		}
		if tc.path && !strings.Contains(w.Body.String(), `"did_you_mean":"/workspace/data/a.txt"`) && !strings.Contains(w.Body.String(), `"did_you_mean":"data/a.txt"`) {
			t.Errorf("%s %s = %s, want did_you_mean data/a.txt", tc.tool, tc.input, w.Body)
		}
	}
	op := f.getRun(rc.ID)
	if op.Refusals != 6 || stepStates(op) != "refused refused refused refused refused refused" || op.State != api.RunRunning {
		t.Errorf("run = %s, %d refusals [%s], want running with 6 refused steps", op.State, op.Refusals, stepStates(op))
	}
	if r := op.Steps[0].Tool.Refusal; r == nil || r.Reason != api.RefusedTool || !strings.Contains(r.Message, "Write") {
		t.Errorf("step 0 refusal = %+v, want tool_not_granted naming Write", r)
	}
	if s := op.Steps[5].Tool; !strings.HasPrefix(s.Summary, "refused: ") {
		t.Errorf("the last refused step's summary = %q, want its refusal", s.Summary)
	}
	evs := f.events(rc.ID, 100)
	if got := eventKinds(evs); got != "run_created refusal refusal refusal refusal refusal refusal" {
		t.Errorf("events = %s, want run_created and 6 refusals", got)
	}
	if evs[6].Refusal == nil || evs[6].Refusal.Path != "/data/a.txt" || evs[6].InputSHA256 != sha(`{"path":"/data/a.txt"}`) {
		t.Errorf("last refusal event = %+v, want its path and input digest", evs[6])
	}
	// The grant is for tool calls on its run, nothing else.
	w := f.serve(f.request(g, "POST", "/v1/runs/"+f.run+"/steps", `{"tool":"Read","input":{"path":"a"}}`))
	if w.Code != 403 {
		t.Errorf("a call on another run = %d %s, want 403", w.Code, w.Body)
	}
}

// fakeOutput is the nodes' streams: frames by step.
type fakeOutput struct {
	mu     sync.Mutex
	frames map[string][]api.Frame
}

func (o *fakeOutput) set(step string, out string, code int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	o.frames[step] = []api.Frame{api.NewOutputFrame(1, api.KindStdout, []byte(out), now),
		api.NewExitFrame(2, api.Exit{State: api.StepExited, ExitCode: &code, TerminatedBy: "exit"}, now)}
}

func (o *fakeOutput) Open(ctx context.Context, step string, from uint64) (io.ReadCloser, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var b bytes.Buffer
	for _, f := range o.frames[step] {
		line, _ := json.Marshal(f)
		b.Write(append(line, '\n'))
	}
	return io.NopCloser(&b), nil
}

// bashCall makes a Bash call with ?wait in the background; the answer
// comes on the channel.
func (f *fixture) bashCall(g cred, run, command string) chan *httptest.ResponseRecorder {
	done := make(chan *httptest.ResponseRecorder, 1)
	r := f.request(g, "POST", "/v1/runs/"+run+"/steps?wait=20s", fmt.Sprintf(`{"tool":"Bash","input":{"command":%q}}`, command))
	go func() { done <- f.serve(r) }()
	return done
}

func TestAgentBash(t *testing.T) {
	out := &fakeOutput{frames: map[string][]api.Frame{}}
	f := newFixtureWith(t, func(cfg *Config) { cfg.Output = out })
	ctx := t.Context()

	// An agent without a writing tool: its Bash steps see the workspace
	// read-only, from its head; a non-zero exit leaves the run running.
	rc, g := f.startAgent("looker", []string{"Read", "Bash"}, "network: none", "limits: {timeout: 2m}")
	head := f.plant("data/c.txt", "c\n")
	sid := stepID(rc.ID, 0)
	out.set(sid, strings.Repeat("x", 40<<10)+"the end\n", 3)
	done := f.bashCall(g, rc.ID, "ls; exit 3")
	f.sched.Start(sid)
	f.sched.Exit(sid, 3)
	w := <-done
	var a api.ToolAnswer
	if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &a) != nil {
		t.Fatalf("Bash = %d %s, want 200", w.Code, w.Body)
	}
	var res api.BashResult
	json.Unmarshal(a.Result, &res)
	if res.State != api.StepExited || res.ExitCode == nil || *res.ExitCode != 3 || !res.Truncated || len(res.Output) != outputTail || !strings.HasSuffix(res.Output, "the end\n") {
		t.Errorf("Bash result = %s %v truncated %v, %d bytes of output, want exited 3 with the last 32 KiB", res.State, res.ExitCode, res.Truncated, len(res.Output))
	}
	st := f.sched.step(t, sid)
	if !slices.Equal(st.Spec.Args, []string{"/bin/sh", "-c", "ls; exit 3"}) || !st.Spec.WorkspaceReadOnly || !st.Spec.NoInternet ||
		st.Spec.BaseRevision != head || time.Duration(st.Spec.Timeout) != 2*time.Minute || st.Spec.Idempotent {
		t.Errorf("Bash step spec = %+v, want sh -c, read-only, no internet, from the head, 2m, at most once", st.Spec)
	}
	op := f.getRun(rc.ID)
	if op.State != api.RunRunning || len(op.Steps) != 1 || op.Steps[0].State != api.StepExited || op.Steps[0].Tool == nil || op.Steps[0].Tool.Name != "Bash" {
		t.Errorf("run after a Bash step exited 3 = %s %+v, want running with the step exited", op.State, op.Steps)
	}
	if got := eventKinds(f.events(rc.ID, 100)); got != "run_created script script" {
		t.Errorf("events = %s, want run_created script script", got)
	}

	// An agent with a writing tool: its Bash step's revision is a run
	// event, and a call without ?wait answers at once.
	rc2, g2 := f.startAgent("maker", []string{"Write", "Bash"})
	w = f.call(g2, rc2.ID, "", "Bash", `{"command":"echo made > made.txt"}`)
	a, res = api.ToolAnswer{}, api.BashResult{}
	json.Unmarshal(w.Body.Bytes(), &a)
	json.Unmarshal(a.Result, &res)
	if w.Code != 200 || res.ExitCode != nil || res.State == api.StepExited {
		t.Fatalf("Bash without wait = %d %s, want 200 before the step ended", w.Code, w.Body)
	}
	sid2 := stepID(rc2.ID, 0)
	f.sched.Start(sid2)
	done2 := f.sched.ExitWithFiles(sid2, 0, map[string]string{"made.txt": "made\n"})
	f.g.Driver().Pass(ctx)
	if st := f.sched.step(t, sid2); st.Spec.WorkspaceReadOnly {
		t.Error("a writing agent's Bash step is read-only")
	}
	evs := f.events(rc2.ID, 100)
	if got := eventKinds(evs); got != "run_created script script revision" {
		t.Fatalf("events = %s, want run_created script script revision", got)
	}
	if e := evs[3]; e.Revision != string(done2.Revision) || len(e.Changes) != 1 || e.Changes[0].Path != "made.txt" || e.Changes[0].SHA256 != sha("made\n") {
		t.Errorf("revision event = %+v, want made.txt of %s", e, done2.Revision)
	}
}

func TestAgentFinish(t *testing.T) {
	f := newFixture(t)
	rc, g := f.startAgent("reader", []string{"Read"})
	f.mustCall(g, rc.ID, "Read", `{"path":"data/a.txt"}`, 200)
	w := f.serve(f.request(g, "POST", "/v1/runs/"+rc.ID+"/finish", `{}`))
	var op api.Operation
	if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &op) != nil || op.State != api.RunSucceeded || op.EndedAt.IsZero() {
		t.Fatalf("finish = %d %s, want 200 succeeded", w.Code, w.Body)
	}
	// The grant ended with its run.
	if w := f.call(g, rc.ID, "", "Read", `{"path":"data/a.txt"}`); w.Code != 401 {
		t.Errorf("a call after finish = %d %s, want 401", w.Code, w.Body)
	}
	evs := f.events(rc.ID, 100)
	if got := eventKinds(evs); got != "run_created tool_call run_ended" || evs[2].State != api.RunSucceeded {
		t.Errorf("events = %s (%+v), want run_created tool_call run_ended succeeded", got, evs[len(evs)-1])
	}
	f.g.Driver().Pass(t.Context())
	if _, err := f.store.GetRecord(t.Context(), kindRunLive, rc.ID); !IsNotFound(err) {
		t.Errorf("live marker of a finished run = %v, want it gone", err)
	}

	// A person finishes a run failed, with a reason; twice is a 409.
	rc2, _ := f.startAgent("reader2", []string{"Read"})
	f.do("editor", "POST", "/v1/runs/"+rc2.ID+"/finish", `{"failed":true,"reason":"the model gave up"}`, 200, &op)
	if op.State != api.RunFailed || !slices.Contains(op.Errors, "the model gave up") {
		t.Errorf("failed finish = %s %v, want failed with the reason", op.State, op.Errors)
	}
	f.do("editor", "POST", "/v1/runs/"+rc2.ID+"/finish", `{}`, 409, nil)
	// A fixed run is not finished, it ends with its steps.
	f.do("editor", "POST", "/v1/runs/"+f.run+"/finish", `{}`, 409, nil)
}

func TestAgentEventsPaginate(t *testing.T) {
	f := newFixture(t)
	rc, g := f.startAgent("reader", []string{"Read", "Glob"})
	for i := range 7 {
		f.mustCall(g, rc.ID, "Glob", fmt.Sprintf(`{"pattern":"data/%d*"}`, i), 200)
	}
	f.call(g, rc.ID, "", "Grep", `{"pattern":"x"}`)
	all := f.events(rc.ID, 1000)
	for _, limit := range []int{1, 2, 3, 100} {
		got := f.events(rc.ID, limit)
		if len(got) != 9 || !slices.EqualFunc(got, all, func(a, b api.RunEvent) bool { return a.Seq == b.Seq }) {
			t.Errorf("events by %d = %d events, want the 9 of one page", limit, len(got))
		}
	}
	for i, e := range all {
		if e.Seq != i+1 || (i > 0 && (e.StepIndex == nil || *e.StepIndex != i-1 || e.Step != stepID(rc.ID, i-1))) {
			t.Errorf("event %d = %+v, want seq %d of step %d", i, e, i+1, i-1)
		}
	}
	// A fixed run has none; a member of another workspace sees no run.
	var none []api.RunEvent
	f.do("viewer", "GET", "/v1/runs/"+f.run+"/events", "", 200, &none)
	if len(none) != 0 {
		t.Errorf("a fixed run's events = %v, want none", none)
	}
	f.do("other", "GET", "/v1/runs/"+rc.ID+"/events", "", 404, nil)
}

func TestAgentRunExpires(t *testing.T) {
	var mu sync.Mutex
	now := time.Now().UTC()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	f := newFixtureWith(t, func(cfg *Config) { cfg.Now = clock })
	rc, g := f.startAgent("runner", []string{"Read", "Bash"}, "limits: {run: 10m}")
	// A live Bash step is cancelled when the time runs out.
	w := f.call(g, rc.ID, "", "Bash", `{"command":"sleep 1000"}`)
	if w.Code != 200 {
		t.Fatalf("Bash = %d %s", w.Code, w.Body)
	}
	sid := stepID(rc.ID, 0)
	f.sched.Start(sid)
	mu.Lock()
	now = now.Add(10*time.Minute + time.Second)
	mu.Unlock()
	f.g.Driver().Pass(t.Context())
	if st := f.sched.step(t, sid); st.Cancel == nil {
		t.Fatalf("the live Bash step of an expired run was not cancelled: %+v", st)
	}
	if op := f.getRun(rc.ID); op.State != api.RunRunning {
		t.Errorf("run = %s while its Bash step is live, want running until it ends", op.State)
	}
	f.sched.Exit(sid, 137)
	f.g.Driver().Pass(t.Context())
	op := f.getRun(rc.ID)
	if op.State != api.RunFailed || !slices.Contains(op.Errors, "the run's time ran out (limits.run 10m)") {
		t.Errorf("expired run = %s %v, want failed: the run's time ran out (limits.run 10m)", op.State, op.Errors)
	}
	if evs := f.events(rc.ID, 100); evs[len(evs)-1].Kind != api.RunEventEnded || evs[len(evs)-1].State != api.RunFailed {
		t.Errorf("last event = %+v, want run_ended failed", evs[len(evs)-1])
	}
}

func TestAgentRunLimits(t *testing.T) {
	f := newFixture(t)
	rc, g := f.startAgent("reader", []string{"Read"})
	// Awaiting approval and ended runs take no calls; neither does a run
	// at its step limit.
	for i := range maxToolSteps {
		if w := f.call(g, rc.ID, "", "Write", fmt.Sprintf(`{"path":"%d","content":""}`, i)); w.Code != 403 {
			t.Fatalf("call %d = %d %s, want 403", i, w.Code, w.Body)
		}
	}
	w := f.call(g, rc.ID, "", "Read", `{"path":"data/a.txt"}`)
	if w.Code != 409 || !strings.Contains(w.Body.String(), "the run has 256 steps, at most 256: finish it and start another") {
		t.Errorf("call 257 = %d %s, want 409 naming the limit", w.Code, w.Body)
	}
	if op := f.getRun(rc.ID); op.Refusals != maxToolSteps {
		t.Errorf("refusals = %d, want %d", op.Refusals, maxToolSteps)
	}
}

// TestAgentRunCancel: a cancel ends a live run as for a fixed run, its
// live Bash step cancelled, and its grant with it.
func TestAgentRunCancel(t *testing.T) {
	f := newFixture(t)
	rc, g := f.startAgent("runner", []string{"Read", "Bash"})
	if w := f.call(g, rc.ID, "", "Bash", `{"command":"sleep 1000"}`); w.Code != 200 {
		t.Fatalf("Bash = %d %s", w.Code, w.Body)
	}
	sid := stepID(rc.ID, 0)
	f.sched.Start(sid)
	f.do("editor", "POST", "/v1/runs/"+rc.ID+"/cancel", "", 200, nil)
	if st := f.sched.step(t, sid); st.Cancel == nil {
		t.Fatalf("the live Bash step of a cancelled run was not cancelled")
	}
	if w := f.call(g, rc.ID, "", "Read", `{"path":"data/a.txt"}`); w.Code != 409 {
		t.Errorf("a call on a run being cancelled = %d %s, want 409", w.Code, w.Body)
	}
	f.sched.Exit(sid, 137)
	f.g.Driver().Pass(t.Context())
	if op := f.getRun(rc.ID); op.State != api.RunCancelled {
		t.Errorf("cancelled run = %s, want cancelled", op.State)
	}
	if w := f.call(g, rc.ID, "", "Read", `{"path":"data/a.txt"}`); w.Code != 401 {
		t.Errorf("a call after the cancel = %d %s, want 401 (the grant ended with its run)", w.Code, w.Body)
	}
	if evs := f.events(rc.ID, 100); eventKinds(evs) != "run_created script script run_ended" {
		t.Errorf("events = %s, want run_created script script run_ended", eventKinds(evs))
	}
}

// TestAgentRunRetention: a run's events are deleted with it.
func TestAgentRunRetention(t *testing.T) {
	var mu sync.Mutex
	clock := time.Now().UTC()
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	f := newFixtureWith(t, func(c *Config) { c.RunRetention = time.Hour; c.Now = now })
	ctx := t.Context()
	rc, g := f.startAgent("reader", []string{"Read"})
	f.mustCall(g, rc.ID, "Read", `{"path":"data/a.txt"}`, 200)
	f.do("editor", "POST", "/v1/runs/"+rc.ID+"/finish", `{}`, 200, nil)
	f.g.Driver().Pass(ctx)
	if n := f.store.Count(kindRunEvent); n != 3 {
		t.Fatalf("%d run events, want 3", n)
	}
	mu.Lock()
	clock = clock.Add(2 * time.Hour)
	mu.Unlock()
	if res, err := f.g.Maintain(ctx); err != nil || res.Runs != 1 {
		t.Fatalf("maintenance = %+v, %v, want the agent run deleted", res, err)
	}
	if n := f.store.Count(kindRunEvent); n != 0 {
		t.Errorf("%d run events after their run was deleted, want none", n)
	}
}

// TestAgentGateThroughCalls: a gated ApplyChange pauses the run on its
// proposal (202, the run awaiting_approval showing it, every call a 409
// naming it) until a person approves; the next call applies it.
func TestAgentGateThroughCalls(t *testing.T) {
	f := newFixture(t)
	rc, g := f.startAgent("gated", []string{"Read", "ProposeChange", "ApplyChange"}, "gates: [{tool: ApplyChange}]")
	a := f.mustCall(g, rc.ID, "ProposeChange", `{"files":[{"path":"data/p.txt","content":"p\n"}]}`, 200)
	var prop api.ProposeChangeResult
	json.Unmarshal(a.Result, &prop)
	if prop.Proposal == "" || a.Step.Tool.Proposal != prop.Proposal {
		t.Fatalf("ProposeChange = %+v, step %+v, want a proposal", prop, a.Step.Tool)
	}
	a = f.mustCall(g, rc.ID, "ApplyChange", `{"proposal":"`+prop.Proposal+`"}`, 202)
	if a.Step.State != api.StepAwaitingApproval {
		t.Errorf("gated ApplyChange step = %s, want awaiting_approval", a.Step.State)
	}
	op := f.getRun(rc.ID)
	if op.State != api.RunAwaitingApproval || op.Awaiting == nil || op.Awaiting.ID != prop.Proposal {
		t.Fatalf("run = %s awaiting %+v, want awaiting_approval on %s", op.State, op.Awaiting, prop.Proposal)
	}
	if w := f.call(g, rc.ID, "", "Read", `{"path":"data/a.txt"}`); w.Code != 409 || !strings.Contains(w.Body.String(), prop.Proposal) {
		t.Errorf("a call while awaiting = %d %s, want 409 naming %s", w.Code, w.Body, prop.Proposal)
	}
	var listed []api.Operation
	f.do("viewer", "GET", "/v1/runs?workspace=ws-main&state=awaiting_approval", "", 200, &listed)
	if len(listed) != 1 || listed[0].ID != rc.ID {
		t.Errorf("runs awaiting approval = %d, want this one", len(listed))
	}
	f.do("editor", "POST", "/v1/runs/"+rc.ID+"/approve", `{"proposal":"`+prop.Proposal+`"}`, 200, nil)
	a = f.mustCall(g, rc.ID, "ApplyChange", `{"proposal":"`+prop.Proposal+`"}`, 200)
	var applied api.ApplyChangeResult
	json.Unmarshal(a.Result, &applied)
	if applied.Revision == "" || a.Step.State != api.StepDone {
		t.Fatalf("approved ApplyChange = %+v, step %s, want a revision, done", applied, a.Step.State)
	}
	if got, ok := f.wsFile("data/p.txt"); !ok || got != "p\n" {
		t.Errorf("data/p.txt after the apply = %q, %v, want p", got, ok)
	}
	evs := f.events(rc.ID, 100)
	if got, want := eventKinds(evs), "run_created proposal awaiting_approval refusal approval tool_call revision"; got != want && got != "run_created proposal awaiting_approval approval tool_call revision" {
		t.Errorf("events = %s, want %s", got, want)
	}
	if e := evs[len(evs)-1]; e.Revision != applied.Revision || len(e.Changes) != 1 || e.Changes[0].Path != "data/p.txt" {
		t.Errorf("the apply's revision event = %+v, want data/p.txt", e)
	}
}

// TestAgentBashWaitOutlivesDeadlines: a ?wait longer than the server's
// read and write timeouts is answered, over a real connection.
func TestAgentBashWaitOutlivesDeadlines(t *testing.T) {
	f := newFixtureWith(t, func(cfg *Config) {
		cfg.Timeouts.Read, cfg.Timeouts.Write = time.Second, time.Second
	})
	rc, g := f.startAgent("runner", []string{"Read", "Bash"})
	addr, stop := serveLoopback(t, f.g)
	defer stop()
	sid := stepID(rc.ID, 0)
	go func() {
		time.Sleep(2500 * time.Millisecond)
		f.sched.Start(sid)
		f.sched.Exit(sid, 0)
	}()
	req := f.request(g, "POST", "http://"+addr+"/v1/runs/"+rc.ID+"/steps?wait=10s", `{"tool":"Bash","input":{"command":"true"}}`)
	req.RequestURI = ""
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("Bash with a wait past the timeouts: %v", err)
	}
	defer resp.Body.Close()
	var a api.ToolAnswer
	var res api.BashResult
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != 200 || json.Unmarshal(a.Result, &res) != nil {
		t.Fatalf("Bash = %d, %v", resp.StatusCode, err)
	}
	if res.State != api.StepExited || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Errorf("Bash result = %+v, want exited 0 after 2.5 s", res)
	}
}

// TestAgentConcurrentCalls: calls at once each become a step of their
// own, and every event has a seq of its own (runCAS tries again on a
// conflict, change and all).
func TestAgentConcurrentCalls(t *testing.T) {
	f := newFixture(t)
	rc, g := f.startAgent("reader", []string{"Read", "Write"})
	var wg sync.WaitGroup
	codes := make([]int, 8)
	for i := range codes {
		wg.Go(func() {
			codes[i] = f.call(g, rc.ID, "", "Write", fmt.Sprintf(`{"path":"out/%d.txt","content":"%d"}`, i, i)).Code
		})
	}
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Errorf("call %d = %d, want 200", i, c)
		}
	}
	op := f.getRun(rc.ID)
	if len(op.Steps) != 8 || strings.Count(stepStates(op), "done") != 8 {
		t.Fatalf("run after 8 calls at once = [%s], want 8 steps done", stepStates(op))
	}
	evs := f.events(rc.ID, 100)
	kinds := eventKinds(evs)
	if strings.Count(kinds, "tool_call") != 8 || strings.Count(kinds, "revision") != 8 {
		t.Errorf("events = %s, want 8 tool calls and 8 revisions", kinds)
	}
	for i, e := range evs {
		if e.Seq != i+1 {
			t.Errorf("event %d has seq %d, want %d", i, e.Seq, i+1)
		}
	}
}

// TestAgentLostCall: a file tool's step whose gateway never answered it
// fails once toolCallStale passed.
func TestAgentLostCall(t *testing.T) {
	clock := newTestClock()
	f := newFixtureWith(t, func(c *Config) { c.Now = clock.now })
	rc, _ := f.startAgent("reader", []string{"Read"})
	// A call appended (calling) by a gateway that then went away.
	if _, err := f.g.runCAS(f.in(t.Context()), rc.ID, func(run *runRecord) ([]api.RunEvent, error) {
		run.Steps = append(run.Steps, runStepRecord{ID: stepID(run.ID, 0), Status: stepCalling, Tool: &api.ToolStep{Name: "Read"},
			View: &api.RunStep{State: api.StepRunning, Phases: api.Phases{Started: clock.now()}}})
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	f.g.Driver().Pass(t.Context())
	if op := f.getRun(rc.ID); op.Steps[0].State != api.StepRunning {
		t.Fatalf("a call in flight = %s, want running", op.Steps[0].State)
	}
	clock.advance(toolCallStale)
	f.g.Driver().Pass(t.Context())
	op := f.getRun(rc.ID)
	if op.Steps[0].State != api.StepFailed || op.State != api.RunRunning {
		t.Errorf("a lost call = %s in a %s run, want failed, the run running", op.Steps[0].State, op.State)
	}
	if evs := f.events(rc.ID, 100); eventKinds(evs) != "run_created tool_call" || evs[1].State != api.StepFailed {
		t.Errorf("events = %s, want the lost call's failure", eventKinds(evs))
	}
}

func TestOutputTail(t *testing.T) {
	long := strings.Repeat("é", outputTail) // 2 bytes each
	for _, tc := range []struct {
		name      string
		in        string
		truncated bool
		want      string
	}{
		{"short", "hello\n", false, "hello\n"},
		{"exactly the tail", strings.Repeat("a", outputTail), false, strings.Repeat("a", outputTail)},
		{"one byte more", "b" + strings.Repeat("a", outputTail), true, strings.Repeat("a", outputTail)},
		{"characters", long, true, strings.Repeat("é", outputTail/2)},
		{"from a character's start", "x" + long, true, strings.Repeat("é", outputTail/2)},
		{"cut in a character", long + "a", true, strings.Repeat("é", outputTail/2-1) + "a"},
	} {
		got, truncated := tailOf([]byte(tc.in), false)
		if got != tc.want || truncated != tc.truncated {
			t.Errorf("%s: tailOf = %d bytes, truncated %v; want %d bytes, %v", tc.name, len(got), truncated, len(tc.want), tc.truncated)
		}
	}
}
