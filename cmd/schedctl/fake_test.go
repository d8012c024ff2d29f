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

// testCerts are the certificates of the scheduler, the fake agent and schedctl, made once
// for the package's tests (TestMain).
type testCerts struct {
	// dir holds the CA and the servers' pairs; operatorDir ca.crt and the
	// one operator pair, operator/tester (schedctl's RODON_TLS_DIR).
	dir, operatorDir string
	ca               *pki.CA
	// agent is agent/n1.
	agent *pki.Source
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
	return schedctlWith(t, nil, vars, intr, stdout, stderr, args...)
}

// schedctlWith is schedctlEnv with the cli edited by edit (if not nil)
// before it runs.
func schedctlWith(t *testing.T, edit func(*cli), vars map[string]string, intr <-chan os.Signal, stdout, stderr *syncBuffer, args ...string) result {
	t.Helper()
	env := func(k string) string { return vars[k] }
	c := &cli{stdin: strings.NewReader(""), stdout: stdout, stderr: stderr, env: env, interrupts: intr,
		now: func() time.Time { return testNow }, retryFor: time.Second}
	if edit != nil {
		edit(c)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	code := c.main(ctx, args)
	return result{code, stdout.String(), stderr.String()}
}

var testNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func (r result) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
}
