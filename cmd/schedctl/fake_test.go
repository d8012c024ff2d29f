package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/pki"
)

// fakeScheduler serves the scheduler's operator routes from memory. Its
// long poll (GET /v1/steps/{id}?index=N) blocks until the step changes,
// as the real one does.
type fakeScheduler struct {
	t   *testing.T
	srv *httptest.Server

	mu      sync.Mutex
	index   uint64
	changed chan struct{}
	steps   map[string]*api.Step
	order   []string
	nodes   []api.Node
	members []api.Member
	snap    []byte
	// Requests as received.
	submits  []api.StepRequest
	restored [][]byte
	drains   []string // bodies
	// nodeReads counts GET /v1/nodes/{id}.
	nodeReads int
	removed   []string
	cancels   []string
	// streamURL is what stream-url answers for a placed step.
	streamURL string
	// streamURLRefusals counts stream-url answers "not placed yet".
	streamURLRefusals int
	// onStreamURLRefused runs (locked) after such an answer: tests use it
	// to place the step.
	onStreamURLRefused func(s *api.Step)
	// onCancel runs (locked) after a cancel was recorded.
	onCancel func(s *api.Step)
}

func newFakeScheduler(t *testing.T) *fakeScheduler { return newFakeSchedulerOn(t, testPKI().scheduler) }

// newPlainFakeScheduler is newFakeScheduler over plain HTTP, for
// schedctl --plaintext.
func newPlainFakeScheduler(t *testing.T) *fakeScheduler { return newFakeSchedulerOn(t, nil) }

// newFakeSchedulerOn serves the fake over TLS with src's certificate, or
// over plain HTTP with a nil src.
func newFakeSchedulerOn(t *testing.T, src *pki.Source) *fakeScheduler {
	f := &fakeScheduler{t: t, changed: make(chan struct{}), steps: map[string]*api.Step{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/members", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		writeJSON(w, 200, f.members)
	})
	mux.HandleFunc("POST /v1/members/remove", func(w http.ResponseWriter, r *http.Request) {
		var req api.RemoveMemberRequest
		if !decodeBody(w, r, &req) {
			return
		}
		f.mu.Lock()
		f.removed = append(f.removed, req.ID)
		f.mu.Unlock()
		writeJSON(w, 200, struct{}{})
	})
	mux.HandleFunc("GET /v1/snapshot", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write(f.snap)
	})
	mux.HandleFunc("POST /v1/snapshot/restore", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.restored = append(f.restored, b)
		f.mu.Unlock()
		writeJSON(w, 200, struct{}{})
	})
	mux.HandleFunc("GET /v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		writeJSON(w, 200, f.nodes)
	})
	// A node read while it drains shows one step fewer each time, then
	// the drain complete.
	mux.HandleFunc("GET /v1/nodes/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		for i := range f.nodes {
			n := &f.nodes[i]
			if n.ID != r.PathValue("id") {
				continue
			}
			f.nodeReads++
			if n.Drain != nil && n.Running > 0 {
				n.Running--
			} else if n.Drain != nil {
				n.Drain.Complete = true
			}
			writeJSON(w, 200, *n)
			return
		}
		writeError(w, 404, api.CodeNotFound, "node "+r.PathValue("id")+": not found")
	})
	mux.HandleFunc("POST /v1/nodes/{id}/drain", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.drains = append(f.drains, string(b))
		for i := range f.nodes {
			if f.nodes[i].ID == r.PathValue("id") {
				f.nodes[i].State = "draining"
				f.nodes[i].Drain = &api.Drain{RequestedAt: time.Now()}
				writeJSON(w, 200, f.nodes[i])
				return
			}
		}
		writeError(w, 404, api.CodeNotFound, "node "+r.PathValue("id")+": not found")
	})
	mux.HandleFunc("POST /v1/nodes/{id}/undrain", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		for i := range f.nodes {
			if f.nodes[i].ID == r.PathValue("id") {
				f.nodes[i].State, f.nodes[i].Drain = "ready", nil
				writeJSON(w, 200, f.nodes[i])
				return
			}
		}
		writeError(w, 404, api.CodeNotFound, "node "+r.PathValue("id")+": not found")
	})
	mux.HandleFunc("POST /v1/steps", func(w http.ResponseWriter, r *http.Request) {
		var req api.StepRequest
		if !decodeBody(w, r, &req) {
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.submits = append(f.submits, req)
		if _, ok := f.steps[req.ID]; ok {
			writeError(w, 409, api.CodeConflict, "step "+req.ID+" exists already")
			return
		}
		spec := req
		spec.ID = ""
		s := &api.Step{ID: req.ID, State: "queued", Idempotent: req.Idempotent, Spec: spec,
			Phases: api.Phases{Queued: time.Now()}, Events: []api.Event{}}
		f.steps[req.ID] = s
		f.order = append(f.order, req.ID)
		f.bumpLocked(s)
		writeJSON(w, 201, s)
	})
	mux.HandleFunc("GET /v1/steps", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		out := []api.Step{}
		for _, id := range f.order {
			s := f.steps[id]
			if st := r.URL.Query().Get("state"); st != "" && s.State != st {
				continue
			}
			if n := r.URL.Query().Get("node"); n != "" && s.Node != n {
				continue
			}
			out = append(out, *s)
		}
		// Pages as the scheduler does, the cursor being a position.
		from, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		out = out[min(from, len(out)):]
		if limit > 0 && len(out) > limit {
			w.Header().Set("X-Next-Cursor", strconv.Itoa(from+limit))
			out = out[:limit]
		}
		writeJSON(w, 200, out)
	})
	mux.HandleFunc("GET /v1/steps/{id}", f.getStep)
	mux.HandleFunc("POST /v1/steps/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		var req api.CancelRequest
		if !decodeBody(w, r, &req) {
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		s, ok := f.steps[r.PathValue("id")]
		switch {
		case !ok:
			writeError(w, 404, api.CodeNotFound, "step "+r.PathValue("id")+": not found")
			return
		case s.Terminal() && s.State != "lost" && s.Cancel == nil:
			writeError(w, 409, api.CodeConflict, "step "+s.ID+" is "+s.State+": step already terminal")
			return
		}
		f.cancels = append(f.cancels, req.Reason)
		if s.Cancel == nil {
			s.Cancel = &api.Cancel{RequestedAt: time.Now()}
			if f.onCancel != nil {
				f.onCancel(s)
			}
			f.bumpLocked(s)
		}
		writeJSON(w, 200, s)
	})
	mux.HandleFunc("GET /v1/steps/{id}/stream-url", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		s, ok := f.steps[r.PathValue("id")]
		switch {
		case !ok:
			writeError(w, 404, api.CodeNotFound, "step "+r.PathValue("id")+": not found")
		case s.Node == "":
			writeError(w, 409, api.CodeConflict, "step "+s.ID+" is "+s.State+": not placed yet")
			f.streamURLRefusals++
			if f.onStreamURLRefused != nil {
				f.onStreamURLRefused(s)
				f.bumpLocked(s)
			}
		default:
			writeJSON(w, 200, api.StreamURL{URL: f.streamURL + "/v1/steps/" + s.ID + "/stream", Node: s.Node})
		}
	})
	f.srv = startFake(t, mux, src, pki.RoleOperator)
	return f
}

// testCerts are the certificates of the fakes and of schedctl, made once
// for the package's tests (TestMain).
type testCerts struct {
	// dir holds the CA and the servers' pairs; operatorDir ca.crt and the
	// one operator pair, operator/tester (schedctl's RODON_TLS_DIR).
	dir, operatorDir string
	ca               *pki.CA
	// scheduler is member/m1, agent agent/n1.
	scheduler, agent *pki.Source
}

var (
	pkiOnce  sync.Once
	pkiCerts *testCerts
	pkiErr   error
)

// testPKI returns the package's certificates, made on first use.
func testPKI() *testCerts {
	pkiOnce.Do(func() { pkiCerts, pkiErr = makeTestCerts() })
	if pkiErr != nil {
		panic(pkiErr)
	}
	return pkiCerts
}

func makeTestCerts() (*testCerts, error) {
	dir, err := os.MkdirTemp("", "schedctl-test-pki-")
	if err != nil {
		return nil, err
	}
	c := &testCerts{dir: dir, operatorDir: filepath.Join(dir, "operator")}
	if err := pki.InitCA(dir, 0); err != nil {
		return nil, err
	}
	if c.ca, err = pki.LoadCA(dir); err != nil {
		return nil, err
	}
	load := func(role pki.Role, name string) (*pki.Source, error) {
		id := pki.Identity{Role: role, Name: name}
		if _, err := c.ca.IssueFiles(dir, id, pki.IssueOptions{}); err != nil {
			return nil, err
		}
		return pki.Load(pki.DirFiles(dir, id), id, slog.New(slog.DiscardHandler))
	}
	if c.scheduler, err = load(pki.RoleMember, "m1"); err != nil {
		return nil, err
	}
	if c.agent, err = load(pki.RoleAgent, "n1"); err != nil {
		return nil, err
	}
	if _, err := c.ca.IssueFiles(c.operatorDir, pki.Identity{Role: pki.RoleOperator, Name: "tester"}, pki.IssueOptions{}); err != nil {
		return nil, err
	}
	return c, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	if pkiCerts != nil {
		os.RemoveAll(pkiCerts.dir)
	}
	os.Exit(code)
}

// startFake serves h over TLS with src's certificate, failing the test
// for a request from any but a verified client of role caller; with a nil
// src, over plain HTTP.
func startFake(t *testing.T, h http.Handler, src *pki.Source, caller pki.Role) *httptest.Server {
	if src == nil {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, ok := pki.PeerIdentity(r.TLS); !ok || id.Role != caller {
			t.Errorf("%s %s from %v, want a verified %s", r.Method, r.URL, id, caller)
		}
		h.ServeHTTP(w, r)
	}))
	srv.TLS = src.ServerConfig(pki.AnyIdentity)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// getStep answers GET /v1/steps/{id}, as a long poll when ?index is set.
func (f *fakeScheduler) getStep(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var index uint64
	if q := r.URL.Query().Get("index"); q != "" {
		index, _ = strconv.ParseUint(q, 10, 64)
	}
	wait := 2 * time.Second
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		f.mu.Lock()
		s, ok := f.steps[id]
		if !ok {
			f.mu.Unlock()
			writeError(w, 404, api.CodeNotFound, "step "+id+": not found")
			return
		}
		if index == 0 || s.ModifyIndex > index {
			defer f.mu.Unlock()
			w.Header().Set("X-Rodon-Index", strconv.FormatUint(f.index, 10))
			writeJSON(w, 200, s)
			return
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			index = 0
		case <-r.Context().Done():
			return
		}
	}
}

// bumpLocked records a change of s and wakes the long polls.
func (f *fakeScheduler) bumpLocked(s *api.Step) {
	f.index++
	s.ModifyIndex = f.index
	if s.CreateIndex == 0 {
		s.CreateIndex = f.index
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

// update changes step id under the lock.
func (f *fakeScheduler) update(id string, fn func(s *api.Step)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.steps[id]
	if !ok {
		f.t.Errorf("fake scheduler: update of unknown step %s", id)
		return
	}
	fn(s)
	f.bumpLocked(s)
}

// addStep adds a step as is.
func (f *fakeScheduler) addStep(s api.Step) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.Events == nil {
		s.Events = []api.Event{}
	}
	f.steps[s.ID] = &s
	f.order = append(f.order, s.ID)
	f.bumpLocked(&s)
}

func (f *fakeScheduler) step(id string) api.Step {
	f.mu.Lock()
	defer f.mu.Unlock()
	return *f.steps[id]
}

// fakeAgent serves agentd's stream route (NDJSON) from memory.
type fakeAgent struct {
	t   *testing.T
	srv *httptest.Server

	mu      sync.Mutex
	changed chan struct{}
	frames  map[string][][]byte
	// conns records each stream request's query and Accept header.
	conns []streamConn
	// dropConns connections are cut after dropAfter frames, in the
	// middle of the next frame's line.
	dropConns, dropAfter int
	// replay makes a resumed connection start one frame early, as a
	// server may: the client must not write that frame twice.
	replay bool
	// onExitServed runs after the exit frame was written.
	onExitServed func(id string)
}

// streamConn is one stream request: its from and follow parameters and
// its Accept header.
type streamConn struct{ from, follow, accept string }

func newFakeAgent(t *testing.T) *fakeAgent { return newFakeAgentOn(t, testPKI().agent) }

// newFakeAgentOn serves the fake over TLS with src's certificate, or over
// plain HTTP with a nil src.
func newFakeAgentOn(t *testing.T, src *pki.Source) *fakeAgent {
	a := &fakeAgent{t: t, changed: make(chan struct{}), frames: map[string][][]byte{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/steps/{id}/stream", a.stream)
	a.srv = startFake(t, mux, src, pki.RoleOperator)
	return a
}

// add appends frames to step id's stream.
func (a *fakeAgent) add(id string, frames ...api.Frame) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, f := range frames {
		var b []byte
		if f.Kind == api.KindStdout || f.Kind == api.KindStderr {
			out, err := f.Output()
			if err != nil {
				a.t.Fatal(err)
			}
			b = api.AppendOutputFrame(nil, f.Seq, f.Kind, out, f.Time)
		} else {
			var err error
			if b, err = json.Marshal(f); err != nil {
				a.t.Fatal(err)
			}
		}
		a.frames[id] = append(a.frames[id], b)
	}
	close(a.changed)
	a.changed = make(chan struct{})
}

func (a *fakeAgent) connections() []streamConn {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]streamConn(nil), a.conns...)
}

func (a *fakeAgent) stream(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	q := r.URL.Query()
	from, _ := strconv.Atoi(q.Get("from"))
	a.mu.Lock()
	a.conns = append(a.conns, streamConn{q.Get("from"), q.Get("follow"), r.Header.Get("Accept")})
	_, known := a.frames[id]
	drop := a.dropConns > 0
	if drop {
		a.dropConns--
	}
	resumed := len(a.conns) > 1
	a.mu.Unlock()
	if !known {
		writeError(w, 404, api.CodeNotFound, "step "+id+": no such stream")
		return
	}
	if a.replay && resumed && from > 0 {
		from--
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(200)
	fl := w.(http.Flusher)
	next, sent := from, 0
	for {
		a.mu.Lock()
		frames, ch := a.frames[id], a.changed
		a.mu.Unlock()
		for ; next < len(frames); next++ {
			line := frames[next]
			if drop && sent == a.dropAfter {
				w.Write(line[:len(line)/2])
				fl.Flush()
				panic(http.ErrAbortHandler) // cut the connection
			}
			w.Write(append(append([]byte(nil), line...), '\n'))
			fl.Flush()
			sent++
			var f api.Frame
			json.Unmarshal(line, &f)
			if f.Kind == api.KindExit {
				if a.onExitServed != nil {
					a.onExitServed(id)
				}
				return
			}
		}
		if q.Get("follow") != "1" {
			return
		}
		select {
		case <-ch:
		case <-r.Context().Done():
			return
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, api.NewError(code, msg))
}

func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, 400, api.CodeBadRequest, err.Error())
		return false
	}
	return true
}

// syncBuffer is a bytes.Buffer safe for a writer and a concurrent reader,
// which can wait for content.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{}
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{changed: make(chan struct{})} }

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.changed)
	s.changed = make(chan struct{})
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits until the buffer contains sub, and returns its content
// then.
func (s *syncBuffer) waitFor(t *testing.T, sub string) string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		s.mu.Lock()
		str, ch := s.b.String(), s.changed
		s.mu.Unlock()
		if strings.Contains(str, sub) {
			return str
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("output %q never contained %q", str, sub)
		}
	}
}

// result is how one schedctl invocation ended.
type result struct {
	code           int
	stdout, stderr string
}

// schedctl runs schedctl in-process against addr, with interrupts from
// intr (nil: none), and returns how it ended.
func schedctl(t *testing.T, addr string, intr <-chan os.Signal, args ...string) result {
	t.Helper()
	stdout, stderr := newSyncBuffer(), newSyncBuffer()
	return schedctlTo(t, addr, intr, stdout, stderr, args...)
}

func schedctlTo(t *testing.T, addr string, intr <-chan os.Signal, stdout, stderr *syncBuffer, args ...string) result {
	t.Helper()
	return schedctlEnv(t, map[string]string{"RODON_SCHEDULER": addr, "RODON_TLS_DIR": testPKI().operatorDir}, intr, stdout, stderr, args...)
}

// schedctlEnv runs schedctl in-process with the environment vars.
func schedctlEnv(t *testing.T, vars map[string]string, intr <-chan os.Signal, stdout, stderr *syncBuffer, args ...string) result {
	t.Helper()
	env := func(k string) string { return vars[k] }
	c := &cli{stdin: strings.NewReader(""), stdout: stdout, stderr: stderr, env: env, interrupts: intr,
		now: func() time.Time { return testNow }, retryFor: time.Second}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	code := c.main(ctx, args)
	return result{code, stdout.String(), stderr.String()}
}

var testNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func (r result) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
}
