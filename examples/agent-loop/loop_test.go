package agentloop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/gateway"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/scheduler"
	"github.com/rodon-compute/rodon/scheduler/schedulertest"
)

// testGateway is a real gateway on loopback over the real scheduler
// (schedulertest) with one node played by the test, an owner signed in,
// a workspace holding an agent file, and an editor's API key for it.
type testGateway struct {
	t     *testing.T
	site  string
	sc    *schedulertest.Cluster
	node  *schedulertest.Agent
	owner *http.Client
	csrf  string
	key   string
	ws    string
}

const analyst = `---
name: analyst
description: Reads the sales data and proposes a summary
tools: [Read, Glob, Bash, ProposeChange, ApplyChange]
network: none
gates:
  - tool: ApplyChange
---
Summarise data/sales.csv in summary.md.
`

func newTestGateway(t *testing.T) *testGateway {
	t.Helper()
	sc := schedulertest.New(t, schedulertest.Options{})
	cl := sc.Client()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	site := "http://" + ln.Addr().String()
	cfg := gateway.DefaultConfig()
	cfg.Listen, cfg.Site, cfg.OwnerEmail, cfg.DataDir = ln.Addr().String(), site, "", t.TempDir()
	cfg.DriverInterval = 100 * time.Millisecond
	g, err := gateway.New(cfg, cl, cl, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("gateway Serve = %v", err)
		}
	})
	boot, err := gateway.Bootstrap(t.Context(), cl, "owner@example.com", time.Now())
	if err != nil || !boot.Created {
		t.Fatalf("Bootstrap = %+v, %v", boot, err)
	}
	jar, _ := cookiejar.New(nil)
	f := &testGateway{t: t, site: site, sc: sc, node: sc.Agent(t, "n1", schedulertest.AgentOptions{}),
		owner: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
	var in struct {
		CSRFToken string `json:"csrf_token"`
	}
	f.must(http.StatusOK, "POST", "/v1/auth/signin", "", map[string]string{"email": boot.Email, "password": boot.Password}, &in)
	f.csrf = in.CSRFToken
	var ws api.Workspace
	f.must(http.StatusCreated, "POST", "/v1/workspaces", "", map[string]string{"name": "sales"}, &ws)
	f.ws = ws.ID
	var key struct {
		Secret string `json:"secret"`
	}
	f.must(http.StatusCreated, "POST", "/v1/keys", "", map[string]any{"name": "loop", "role": "editor", "workspaces": []string{ws.ID}}, &key)
	f.key = key.Secret
	f.put("agents/analyst.md", analyst)
	f.put("data/sales.csv", "region,amount\nnorth,10\nsouth,32\n")
	return f
}

// do sends one request as the owner (bearer "") or with a bearer token,
// and decodes a 2xx answer into out.
func (f *testGateway) do(method, path, bearer string, body, out any) (int, []byte) {
	f.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		enc, _ := json.Marshal(b)
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequestWithContext(f.t.Context(), method, f.site+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Origin", f.site)
	if _, ok := body.(string); !ok && body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	} else if method != "GET" {
		req.Header.Set("X-CSRF-Token", f.csrf)
	}
	resp, err := f.owner.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, out); err != nil {
			f.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
	return resp.StatusCode, b
}

func (f *testGateway) must(want int, method, path, bearer string, body, out any) {
	f.t.Helper()
	if code, b := f.do(method, path, bearer, body, out); code != want {
		f.t.Fatalf("%s %s = %d %s, want %d", method, path, code, b, want)
	}
}

// put writes a file of the workspace with the key.
func (f *testGateway) put(path, content string) {
	f.t.Helper()
	f.must(http.StatusCreated, "PUT", "/v1/workspaces/"+f.ws+"/files/"+path, f.key, content, nil)
}

// playNode runs the node's part until ctx ends: every step placed on n1
// starts, and exits 0 after exitAfter, as the real node would for
// `wc -l`.
func (f *testGateway) playNode(ctx context.Context, exitAfter func() time.Duration) {
	seen := map[cluster.StepID]bool{}
	for ctx.Err() == nil {
		for _, s := range f.sc.State().Steps(scheduler.StepFilter{Node: "n1", State: cluster.StatePlaced}) {
			if !seen[s.ID] {
				seen[s.ID] = true
				f.node.Start(string(s.ID))
				d := exitAfter()
				go func() {
					select {
					case <-ctx.Done():
					case <-time.After(d):
						f.node.Exit(string(s.ID), 0)
					}
				}()
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// playGate is the person at the run page until ctx ends: each run of the
// workspace that awaits approval gets its proposal approved, or rejected
// with a reason when reject says so.
func (f *testGateway) playGate(ctx context.Context, reject func() bool) {
	for ctx.Err() == nil {
		var ops []api.Operation
		if code, _ := f.do("GET", "/v1/runs?workspace="+f.ws, "", nil, &ops); code == 200 {
			for _, op := range ops {
				if op.State != api.RunAwaitingApproval || op.Awaiting == nil {
					continue
				}
				action, req := "/approve", api.ApproveRequest{Proposal: op.Awaiting.ID}
				if reject() {
					action, req.Reason = "/reject", "not this summary"
				}
				f.must(http.StatusOK, "POST", "/v1/runs/"+op.ID+action, "", req, nil)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// loop runs agent.py with script against the gateway; it returns its
// exit code and output.
func (f *testGateway) loop(script string, args ...string) (int, string) {
	f.t.Helper()
	file := filepath.Join(f.t.TempDir(), "calls.json")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(f.t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python3(f.t), append([]string{"agent.py", "--workspace", f.ws, "--agent", "analyst", "--script", file, "--poll", "0.2"}, args...)...)
	cmd.Env = append(os.Environ(), "RODON_GATEWAY="+f.site, "RODON_KEY="+f.key)
	var out testenv.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	}
	f.t.Fatalf("agent.py: %v\n%s", err, out.String())
	return -1, ""
}

// TestAgentLoop runs agent.py against a real gateway: a run made with an
// API key, a Glob, a refused Read naming the path it meant, a Read, a Bash
// step waited for, a Write refused as not granted, a proposal, a gated
// ApplyChange that waits for the owner's approval and then applies it, and
// the finish; the run succeeded and the workspace holds the change. Then a
// Bash step that outlives ?wait (the loop waits for its end) and a
// rejected proposal (told to the model; the run goes on); and a script
// that finishes failed, which makes the loop exit 1.
func TestAgentLoop(t *testing.T) {
	f := newTestGateway(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var (
		mu        sync.Mutex
		exitAfter time.Duration
		reject    bool
	)
	go f.playNode(ctx, func() time.Duration { mu.Lock(); defer mu.Unlock(); return exitAfter })
	go f.playGate(ctx, func() bool { mu.Lock(); defer mu.Unlock(); return reject })

	code, out := f.loop(`{"calls": [
  {"tool": "Glob", "input": {"pattern": "**/*.csv"}},
  {"tool": "Read", "input": {"path": "/data/sales.csv"}},
  {"tool": "Read", "input": {"path": "data/sales.csv"}},
  {"tool": "Bash", "input": {"command": "wc -l data/sales.csv"}},
  {"tool": "Write", "input": {"path": "summary.md", "content": "no"}},
  {"tool": "ProposeChange", "input": {"files": [{"path": "summary.md", "content": "# Sales\n42\n"}], "message": "a summary"}},
  {"tool": "ApplyChange", "input": {"proposal": "$last"}}
], "finish": {"reason": "summary written"}}`)
	t.Logf("agent.py:\n%s", out)
	if code != 0 {
		t.Fatalf("agent.py exit code %d, want 0", code)
	}
	runID := runOf(t, out)
	for _, want := range []string{
		"#/runs/" + runID,                         // the run page
		`"data/sales.csv"`,                        // the Glob's match
		"did you mean: /workspace/data/sales.csv", // the refused Read
		"     2\tnorth,10",                        // the Read's numbered lines
		"exit code 0",                             // the Bash step
		api.RefusedTool,                           // the Write
		"waiting for a person to approve",         // the gate
		"approved by",
		"run " + runID + " succeeded",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("agent.py's output does not say %q", want)
		}
	}
	var op api.Operation
	f.must(http.StatusOK, "GET", "/v1/runs/"+runID, "", nil, &op)
	if op.State != api.RunSucceeded || op.Refusals != 2 {
		t.Errorf("run %s: %s with %d refusals, want succeeded with 2", op.ID, op.State, op.Refusals)
	}
	code, b := f.do("GET", "/v1/workspaces/"+f.ws+"/files/summary.md", f.key, nil, nil)
	if code != 200 || string(b) != "# Sales\n42\n" {
		t.Errorf("summary.md after the run = %d %q, want the approved proposal's content", code, b)
	}

	// A Bash step that outlives its wait, and a rejection.
	mu.Lock()
	exitAfter, reject = 2*time.Second, true
	mu.Unlock()
	code, out = f.loop(`{"calls": [
  {"tool": "Bash", "input": {"command": "sleep 2"}},
  {"tool": "ProposeChange", "input": {"files": [{"path": "summary.md", "content": "other\n"}]}},
  {"tool": "ApplyChange", "input": {"proposal": "$last"}},
  {"tool": "Glob", "input": {"pattern": "*.md"}}
]}`, "--wait", "1s")
	t.Logf("agent.py:\n%s", out)
	for _, want := range []string{"the step is still running", "exit code 0", "was not approved (rejected)", "not this summary", `"summary.md"`, " succeeded;"} {
		if !strings.Contains(out, want) {
			t.Errorf("agent.py (a long Bash step, a rejection): exit code %d, the output does not say %q", code, want)
		}
	}
	if code, b := f.do("GET", "/v1/workspaces/"+f.ws+"/files/summary.md", f.key, nil, nil); code != 200 || string(b) != "# Sales\n42\n" {
		t.Errorf("summary.md after a rejected proposal = %d %q, want it unchanged", code, b)
	}

	// A model that gives up: the run ends failed, and so does the loop.
	code, out = f.loop(`{"calls": [{"tool": "Glob", "input": {"pattern": "*.md"}}], "finish": {"failed": true, "reason": "nothing to do"}}`)
	if code != 1 || !strings.Contains(out, " failed;") {
		t.Errorf("agent.py of a failed run: exit code %d, output:\n%s\nwant exit code 1 and the run failed", code, out)
	}
}

// runOf is the id of the run agent.py's output names first.
func runOf(t *testing.T, out string) string {
	t.Helper()
	rest, ok := strings.CutPrefix(out, "run ")
	id, _, _ := strings.Cut(rest, " ")
	if !ok || !strings.HasPrefix(id, "run-") {
		t.Fatalf("agent.py's output does not start with its run: %q", out)
	}
	return id
}
