package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/envseal"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// logBuffer keeps every log line of a test, and shows them with t.Log.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.buf.Bytes())
}

// envCluster starts n members sharing key, with snapshots taken often,
// logging at debug level into logs.
func envCluster(t *testing.T, n int, key *envseal.Key, logs *logBuffer) *serverCluster {
	t.Helper()
	checkNoServerGoroutines(t)
	c := &serverCluster{t: t, transport: newTestTransport(t)}
	logger := slog.New(slog.NewJSONHandler(io.MultiWriter(logs, testenv.LogWriter(t)), &slog.HandlerOptions{Level: slog.LevelDebug}))
	var first string
	for i := range n {
		cfg := serverConfig(t, "m"+string(rune('0'+i)))
		cfg.EnvKey = key
		cfg.Raft.SnapshotInterval, cfg.Raft.SnapshotThreshold, cfg.Raft.TrailingLogs = 50*time.Millisecond, 1, 1
		if i == 0 {
			cfg.Bootstrap, first = true, cfg.HTTPAddr
		} else {
			cfg.Join = []string{first}
		}
		srv, err := New(cfg, logger.With("member", cfg.ID))
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		m := &testServer{id: cfg.ID, srv: srv, stop: stop, done: make(chan error, 1)}
		go func() { m.done <- srv.Run(ctx) }()
		c.members = append(c.members, m)
		t.Cleanup(func() { c.stopMember(m) })
		if i == 0 {
			c.waitLeader()
		}
	}
	c.waitMembers(n)
	return c
}

// get returns the body of GET url through the cluster's transport.
func (c *serverCluster) get(url string) []byte {
	c.t.Helper()
	resp, err := (&http.Client{Transport: c.transport}).Get(url)
	if err != nil {
		c.t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("GET %s: %v", url, err)
	}
	return b
}

// post returns the status and body of POST url with body.
func (c *serverCluster) post(url string, body any) (int, []byte) {
	c.t.Helper()
	b, _ := json.Marshal(body)
	resp, err := (&http.Client{Transport: c.transport}).Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		c.t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// TestEnvValuesAreWriteOnly submits steps with a secret in their
// environment, directly, through a follower and sealed ahead of time as
// the gateway does, and then reads every route of every member, the
// snapshot document, the data dirs and the logs: the secret is only in the
// assignments of the node that runs the steps.
func TestEnvValuesAreWriteOnly(t *testing.T) {
	key, err := envseal.Generate()
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	c := envCluster(t, 3, key, logs)
	cl := c.client()
	ctx := t.Context()
	marker := testenv.Marker()
	a := newAgent(t, cl, "n1", 8, 64*gib)

	leader, follower := c.waitLeader(), c.follower()
	req := func(id string) api.StepRequest {
		return api.StepRequest{ID: id, Image: "base", Args: []string{"sh", "-c", "echo $SECRET"}, CPU: 0.5, MemoryBytes: gib}
	}
	// Directly to the leader and through a follower's forwarding.
	direct := req("env-direct")
	direct.Env = []string{"PLAIN=visible-name-only", "SECRET=" + marker}
	if code, b := c.post(leader.url()+"/v1/steps", direct); code != http.StatusCreated || testenv.Holds(b, marker) {
		t.Fatalf("POST /v1/steps = %d %s, want 201 without the value", code, b)
	}
	forwarded := req("env-forwarded")
	forwarded.Env = []string{"SECRET=" + marker}
	if code, b := c.post(follower.url()+"/v1/steps", forwarded); code != http.StatusCreated || testenv.Holds(b, marker) {
		t.Fatalf("POST /v1/steps via a follower = %d %s, want 201 without the value", code, b)
	}
	// Sealed ahead, kept in a record as the gateway keeps its runs, and
	// submitted later.
	sealed, err := cl.SealEnv(ctx, "env-sealed", []string{"SECRET=" + marker})
	if err != nil || len(sealed) != 1 || sealed[0].Name != "SECRET" {
		t.Fatalf("SealEnv() = %+v, %v", sealed, err)
	}
	doc, _ := json.Marshal(map[string]any{"sealed_env": sealed})
	if testenv.Holds(doc, marker) {
		t.Fatalf("SealEnv() answer holds the value: %s", doc)
	}
	if _, err := cl.PutRecord(ctx, "run", "r1", 0, doc); err != nil {
		t.Fatal(err)
	}
	later := req("env-sealed")
	later.SealedEnv = sealed
	if _, err := cl.SubmitStep(ctx, later); err != nil {
		t.Fatalf("SubmitStep(sealed_env) = %v", err)
	}
	// A refused entry is not quoted back.
	bad := req("env-bad")
	bad.Env = []string{"SECRET=" + marker + "\x00"}
	if code, b := c.post(follower.url()+"/v1/steps", bad); code != http.StatusBadRequest || testenv.Holds(b, marker) {
		t.Errorf("POST /v1/steps with a NUL in a value = %d %s, want 400 without the value", code, b)
	}
	ids := []string{"env-direct", "env-forwarded", "env-sealed"}
	for _, id := range ids {
		waitStep(t, cl, id, "placed", stateIs("placed"))
	}

	// The agent of the node gets the values.
	as, err := cl.Assignments(ctx, "n1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, s := range as.Steps {
		if len(s.Spec.SealedEnv) > 0 || s.Spec.EnvError != "" {
			t.Errorf("assignment %s: sealed_env %d entries, env_error %q; want opened values only", s.ID, len(s.Spec.SealedEnv), s.Spec.EnvError)
		}
		got[string(s.ID)] = s.Spec.Env
	}
	want := map[string][]string{
		"env-direct":    {"PLAIN=visible-name-only", "SECRET=" + marker},
		"env-forwarded": {"SECRET=" + marker},
		"env-sealed":    {"SECRET=" + marker},
	}
	for id, env := range want {
		if !slices.Equal(got[id], env) {
			t.Errorf("assignment %s env = %q, want %q", id, got[id], env)
		}
	}

	// Every read route of every member names the variables only.
	st, err := cl.Step(ctx, "env-direct")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Spec.EnvNames, []string{"PLAIN", "SECRET"}) || len(st.Spec.Env) > 0 || len(st.Spec.SealedEnv) > 0 {
		t.Errorf("Step().Spec env %q, env_names %q, sealed_env %d; want the names only", st.Spec.Env, st.Spec.EnvNames, len(st.Spec.SealedEnv))
	}
	a.run("env-direct", 1)
	a.exit("env-direct", 1, cluster.StateExited, 0, cluster.ByExit)
	if _, err := cl.CancelStep(ctx, "env-forwarded", "enough"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "snapshots on every member", func() bool {
		for _, m := range c.members {
			snaps, _ := filepath.Glob(filepath.Join(m.srv.cfg.DataDir, "snapshots", "*", "state.bin"))
			if len(snaps) == 0 {
				return false
			}
		}
		return true
	})
	var answers bytes.Buffer
	for _, m := range c.members {
		for _, path := range []string{
			"/healthz", "/metrics", "/v1/members", "/v1/snapshot", "/v1/nodes", "/v1/nodes/n1",
			"/v1/steps", "/v1/steps?state=placed", "/v1/steps?node=n1", "/v1/steps?limit=1",
			"/v1/records/run", "/v1/records/run/r1", "/v1/audit",
		} {
			answers.Write(c.get(m.url() + path))
		}
		for _, id := range ids {
			for _, path := range []string{"/v1/steps/" + id, "/v1/steps/" + id + "?index=1&wait=1ms", "/v1/steps/" + id + "/stream-url"} {
				answers.Write(c.get(m.url() + path))
			}
		}
	}
	if testenv.Holds(answers.Bytes(), marker) {
		t.Errorf("a read route returned an environment value:\n%s", answers.Bytes())
	}
	if !bytes.Contains(answers.Bytes(), []byte(`"env_names":["PLAIN","SECRET"]`)) {
		t.Errorf("no read route names the variables (env_names)")
	}

	// Nor do the data dirs (Raft log, stable store, snapshots) or the logs.
	for _, m := range c.members {
		// FilesHolding skips what vanishes while it reads: a snapshot
		// being written is a .tmp file one moment and renamed the next.
		for _, path := range testenv.FilesHolding(t, m.srv.cfg.DataDir, marker) {
			t.Errorf("member %s: %s holds an environment value", m.id, path)
		}
	}
	if testenv.Holds(logs.bytes(), marker) {
		t.Errorf("a log line holds an environment value")
	}
}

// TestSealedEnvIsBound: a sealed entry opens only for the step id it was
// sealed for, and only as a submission's; a ciphertext of the replicated
// state is refused as a submission's.
func TestSealedEnvIsBound(t *testing.T) {
	key, err := envseal.Generate()
	if err != nil {
		t.Fatal(err)
	}
	c := envCluster(t, 1, key, &logBuffer{})
	cl := c.client()
	ctx := t.Context()
	req := func(id string) api.StepRequest {
		return api.StepRequest{ID: id, Image: "base", Args: []string{"true"}, CPU: 0.5, MemoryBytes: gib}
	}
	forA, err := cl.SealEnv(ctx, "step-a", []string{"K=v"})
	if err != nil {
		t.Fatal(err)
	}
	plain := req("step-p")
	plain.Env = []string{"K=v"}
	if _, err := cl.SubmitStep(ctx, plain); err != nil {
		t.Fatal(err)
	}
	snap, err := cl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var d snapshotData
	if err := json.Unmarshal(snap, &d); err != nil || len(d.Steps) != 1 || len(d.Steps[0].Spec.SealedEnv) != 1 {
		t.Fatalf("snapshot = %s, %v; want one step with one sealed variable", snap, err)
	}
	fromState := d.Steps[0].Spec.SealedEnv[0]
	other, _ := envseal.Generate()
	foreign, _ := other.Seal(envseal.ForSubmit, "step-x", "K", "v")

	for _, tc := range []struct {
		name    string
		req     api.StepRequest
		wantMsg string
	}{
		{"other step id", func() api.StepRequest { r := req("step-b"); r.SealedEnv = forA; return r }(), "does not open for step step-b"},
		{"no step id", func() api.StepRequest { r := req(""); r.SealedEnv = forA; return r }(), "send the id"},
		{"other name", func() api.StepRequest {
			r := req("step-a")
			r.SealedEnv = []api.SealedEnv{{Name: "OTHER", Sealed: forA[0].Sealed}}
			return r
		}(), "does not open"},
		{"ciphertext of the state", func() api.StepRequest {
			r := req("step-p2")
			r.SealedEnv = []api.SealedEnv{{Name: "K", Sealed: fromState.Sealed}}
			return r
		}(), "does not open"},
		{"another cluster's key", func() api.StepRequest {
			r := req("step-x")
			r.SealedEnv = []api.SealedEnv{{Name: "K", Sealed: foreign}}
			return r
		}(), "does not open"},
		{"env_names in a request", func() api.StepRequest { r := req("step-n"); r.EnvNames = []string{"K"}; return r }(), "env_names"},
		{"bad name", func() api.StepRequest { r := req("step-q"); r.Env = []string{"=v"}; return r }(), "env[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cl.SubmitStep(ctx, tc.req)
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Code != api.CodeBadRequest || !strings.Contains(ce.Message, tc.wantMsg) {
				t.Errorf("SubmitStep() = %v, want bad_request naming %q", err, tc.wantMsg)
			}
		})
	}
	// The right id opens.
	ok := req("step-a")
	ok.SealedEnv = forA
	if _, err := cl.SubmitStep(ctx, ok); err != nil {
		t.Errorf("SubmitStep(sealed for its id) = %v", err)
	}
	if _, err := cl.SealEnv(ctx, "Bad ID", []string{"K=v"}); !client.IsCode(err, api.CodeBadRequest) {
		t.Errorf("SealEnv(bad id) = %v, want bad_request", err)
	}
	if _, err := cl.SealEnv(ctx, "step-c", []string{"NOEQUALS"}); !client.IsCode(err, api.CodeBadRequest) {
		t.Errorf("SealEnv(bad entry) = %v, want bad_request", err)
	}

	// A document with plaintext values is not restored.
	d.Steps[0].Spec.Env = []string{"K=v"}
	doc, _ := json.Marshal(d)
	if err := cl.RestoreSnapshot(ctx, doc); !client.IsCode(err, api.CodeBadRequest) || !strings.Contains(err.Error(), "never replicated") {
		t.Errorf("RestoreSnapshot(plaintext env) = %v, want bad_request", err)
	}
}

// TestEnvKeyMismatch: a member whose env key cannot open a step's values
// hands the agent an env_error instead of the values, for that step only.
func TestEnvKeyMismatch(t *testing.T) {
	key, _ := envseal.Generate()
	c := envCluster(t, 1, key, &logBuffer{})
	cl := c.client()
	ctx := t.Context()
	newAgent(t, cl, "n1", 8, 64*gib)
	for _, r := range []api.StepRequest{
		{ID: "with-env", Image: "base", Args: []string{"true"}, CPU: 0.5, MemoryBytes: gib, Env: []string{"K=v"}},
		{ID: "without-env", Image: "base", Args: []string{"true"}, CPU: 0.5, MemoryBytes: gib},
	} {
		if _, err := cl.SubmitStep(ctx, r); err != nil {
			t.Fatal(err)
		}
		waitStep(t, cl, r.ID, "placed", stateIs("placed"))
	}
	srv := c.members[0].srv
	other, _ := envseal.Generate()
	// As a member given another key file.
	mismatched := &Server{cfg: srv.cfg, envKey: other}
	for _, s := range srv.fsm.State().Assignments("n1") {
		got := mismatched.openEnv(s)
		switch s.ID {
		case "with-env":
			if got.Spec.Env != nil || !strings.Contains(got.Spec.EnvError, "does not open") || !strings.Contains(got.Spec.EnvError, "--env-key") {
				t.Errorf("openEnv(%s) = env %q, env_error %q; want an error naming --env-key", s.ID, got.Spec.Env, got.Spec.EnvError)
			}
		case "without-env":
			if got.Spec.Env != nil || got.Spec.EnvError != "" {
				t.Errorf("openEnv(%s) = env %q, env_error %q; want neither", s.ID, got.Spec.Env, got.Spec.EnvError)
			}
		}
	}
	if st, _ := srv.fsm.State().Step("with-env"); len(st.Spec.SealedEnv) != 1 || st.Spec.EnvError != "" {
		t.Errorf("openEnv changed the state's record: %+v", st.Spec)
	}
}

// TestApplyRefusesPlaintextEnv: the FSM never takes a value in the clear.
func TestApplyRefusesPlaintextEnv(t *testing.T) {
	f := newTestFSM(t)
	spec := cluster.StepSpec{Image: "base", Args: []string{"true"}, CPU: 0.5, MemoryBytes: gib, Env: []string{"K=v"}}
	if err := f.applyErr(t, cluster.SubmitStep{Step: "s1", Spec: spec, At: at(0)}); !errors.Is(err, ErrInvalid) {
		t.Errorf("apply submit with env = %v, want ErrInvalid", err)
	}
	spec.Env = nil
	spec.SealedEnv = []cluster.EnvVar{{Name: "K"}}
	if err := f.applyErr(t, cluster.SubmitStep{Step: "s1", Spec: spec, At: at(0)}); !errors.Is(err, ErrInvalid) {
		t.Errorf("apply submit with an empty sealed value = %v, want ErrInvalid", err)
	}
}
