package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/pki/pkitest"
	"github.com/rodon-compute/rodon/scheduler"
	"github.com/rodon-compute/rodon/scheduler/schedulertest"
)

// testScheduler is the real scheduler (schedulertest) that schedctl talks
// to in these tests, with the package's CA, and what the tests watch of
// the requests it gets.
type testScheduler struct {
	*schedulertest.Cluster
	t *testing.T
	// url is what schedctl is given (RODON_SCHEDULER).
	url string

	mu sync.Mutex
	// Request bodies as received.
	submits  []api.StepRequest
	restored [][]byte
	drains   []string
	// snapshot is the body of the last GET /v1/snapshot answered.
	snapshot []byte
	// nodeReads counts GET /v1/nodes/{id}.
	nodeReads int
	// streamURLRefusals counts stream-url answers "not placed yet".
	streamURLRefusals int
	// onStreamURLRefused runs after such an answer, before schedctl gets
	// it: tests use it to register the node the step is placed on.
	onStreamURLRefused func(id string)
	// onCancel runs after a cancel request was answered.
	onCancel func(id string)
}

// newScheduler starts a scheduler of n members (at least one) with mutual
// TLS; edit, if set, changes each member's configuration.
func newScheduler(t *testing.T, n int, edit func(*scheduler.Config)) *testScheduler {
	ca := &pkitest.CA{CA: testPKI().ca, Dir: t.TempDir()}
	return startScheduler(t, schedulertest.Options{Members: n, CA: ca, Config: edit})
}

// newPlainScheduler is newScheduler in plaintext mode, for schedctl
// --plaintext.
func newPlainScheduler(t *testing.T) *testScheduler {
	return startScheduler(t, schedulertest.Options{})
}

func startScheduler(t *testing.T, opts schedulertest.Options) *testScheduler {
	s := &testScheduler{t: t, Cluster: schedulertest.New(t, opts)}
	s.url = s.URLs()
	s.Use(s.watch)
	return s
}

// watch records the requests the tests look at, and runs their hooks.
func (s *testScheduler) watch(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Body != nil && r.Method == http.MethodPost {
			body, _ = io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		p := r.URL.Path
		s.mu.Lock()
		switch {
		case p == "/v1/steps":
			var req api.StepRequest
			if json.Unmarshal(body, &req) == nil {
				s.submits = append(s.submits, req)
			}
		case p == "/v1/snapshot/restore":
			s.restored = append(s.restored, body)
		case strings.HasPrefix(p, "/v1/nodes/") && strings.HasSuffix(p, "/drain"):
			s.drains = append(s.drains, string(body))
		case strings.HasPrefix(p, "/v1/nodes/") && r.Method == http.MethodGet:
			s.nodeReads++
		}
		s.mu.Unlock()
		sw := &schedulertest.Recorder{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		switch {
		case p == "/v1/snapshot" && r.Method == http.MethodGet:
			s.mu.Lock()
			s.snapshot = sw.Body.Bytes()
			s.mu.Unlock()
		case strings.HasSuffix(p, "/stream-url") && sw.Status == http.StatusConflict:
			s.mu.Lock()
			s.streamURLRefusals++
			hook := s.onStreamURLRefused
			s.mu.Unlock()
			if hook != nil {
				hook(r.PathValue("id"))
			}
		case strings.HasSuffix(p, "/cancel") && r.Method == http.MethodPost && sw.Status == http.StatusOK:
			s.mu.Lock()
			hook := s.onCancel
			s.mu.Unlock()
			if hook != nil {
				hook(strings.TrimSuffix(strings.TrimPrefix(p, "/v1/steps/"), "/cancel"))
			}
		}
	})
}

// submitted returns the step requests received.
func (s *testScheduler) submitted() []api.StepRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]api.StepRequest(nil), s.submits...)
}

// refusals returns how many stream-url answers said "not placed yet".
func (s *testScheduler) refusals() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streamURLRefusals
}

// step returns step id as the scheduler holds it.
func (s *testScheduler) step(id string) cluster.Step {
	s.t.Helper()
	st, ok := s.State().Step(cluster.StepID(id))
	if !ok {
		s.t.Fatalf("step %s: not found", id)
	}
	return st
}

// addrOf returns the HOST:PORT of a test server's URL.
func addrOf(t *testing.T, rawURL string) netip.AddrPort {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	ap, err := netip.ParseAddrPort(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	return ap
}

// node returns a ready node record of id at addr with 4 cores and 8 GiB,
// for Restore.
func node(id string, addr netip.AddrPort) cluster.Node {
	return cluster.Node{ID: cluster.NodeID(id), Address: addr, State: cluster.NodeReady,
		Health:   cluster.Health{State: cluster.NodeReady},
		Capacity: cluster.Resources{CPU: 4, MemoryBytes: 8 << 30}, MaxStarting: cluster.DefaultMaxStarting,
		LastHeartbeat: time.Now()}
}

// liveStep returns a step of state on node n, attempt 1, for Restore.
func liveStep(id string, state cluster.StepState, n string) cluster.Step {
	now := time.Now().UTC()
	s := cluster.Step{ID: cluster.StepID(id), State: state, Node: cluster.NodeID(n), Attempts: 1,
		Spec:   cluster.StepSpec{Image: "base", Args: []string{"true"}, CPU: 1, MemoryBytes: 512 << 20},
		Phases: cluster.Phases{Queued: now, Placed: now, Created: now, Started: now}, Events: []cluster.Event{}}
	if state == cluster.StateQueued {
		s.Node, s.Attempts, s.Phases = "", 0, cluster.Phases{Queued: now}
	}
	if state.Terminal() {
		s.Phases.Exited, s.Phases.CleanedUp, s.EndedAt = now, now, now
	}
	return s
}

// stepWith is s changed by f.
func stepWith(s cluster.Step, f func(*cluster.Step)) cluster.Step {
	f(&s)
	return s
}
