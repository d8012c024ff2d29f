package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/scheduler"
	"github.com/rodon-compute/rodon/scheduler/client"
	"github.com/rodon-compute/rodon/scheduler/schedulertest"
)

// testNode is the node every step runs on; the gateway must never show
// it, nor its address.
const (
	testNode     = "node-secret-7"
	testNodeAddr = "127.0.0.1:7200"
)

// testScheduler is the real scheduler (schedulertest, one member in
// plaintext mode) the gateway's tests run against: store is its record
// store and audit log, steps its step API and its workspace API, as the
// gateway sees them, with what the tests count and inject.
type testScheduler struct {
	c     *schedulertest.Cluster
	store *testStore
	sched *testSteps
}

// newTestScheduler starts a scheduler with node testNode registered.
func newTestScheduler(t *testing.T) *testScheduler {
	t.Helper()
	c := schedulertest.New(t, schedulertest.Options{Config: func(cfg *scheduler.Config) {
		// Runs of the tests are made with old times.
		cfg.QueueTimeout = scheduler.MaxQueueTimeout
	}})
	// The gateway's client tries once: an injected failure is its answer.
	cl := c.ClientWith("", client.Options{RetryFor: -1})
	ts := &testScheduler{c: c}
	ts.store = &testStore{Client: cl, c: c}
	ts.sched = &testSteps{Client: cl, c: c, accepted: map[string]int{}, env: map[string][]string{}}
	c.Use(ts.store.count)
	c.Use(ts.sched.count)
	ts.sched.agent = c.Agent(t, testNode, schedulertest.AgentOptions{Address: netip.MustParseAddrPort(testNodeAddr)})
	return ts
}

// testStore is the scheduler's record store and audit log (a
// *client.Client), with counts of what it answered.
type testStore struct {
	*client.Client
	c *schedulertest.Cluster

	mu    sync.Mutex
	stats storeStats
}

// storeStats counts what the store answered: calls that read (a record,
// a page of records, a page of the audit log) and that wrote, and the
// bytes read: each record's kind, id and value, each audit entry's
// document.
type storeStats struct {
	Reads, Writes int
	ReadBytes     int64
}

// count is a middleware on the scheduler that counts the store's calls.
func (s *testStore) count(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		isRecords, isAudit := strings.HasPrefix(p, "/v1/records/"), p == "/v1/audit" || p == "/v1/audit/drop"
		if !isRecords && !isAudit {
			next.ServeHTTP(w, r)
			return
		}
		rec := &schedulertest.Recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		s.mu.Lock()
		defer s.mu.Unlock()
		if r.Method != http.MethodGet {
			s.stats.Writes++
			return
		}
		s.stats.Reads++
		if rec.Status != http.StatusOK {
			return
		}
		switch {
		case isAudit:
			var es []api.AuditEntry
			json.Unmarshal(rec.Body.Bytes(), &es)
			for _, e := range es {
				s.stats.ReadBytes += int64(len(e.Entry))
			}
		case strings.Count(p, "/") == 3: // /v1/records/KIND
			var rs []api.Record
			json.Unmarshal(rec.Body.Bytes(), &rs)
			for _, r := range rs {
				s.stats.ReadBytes += recordSize(r.Kind, r.ID, r.Value)
			}
		default:
			var r api.Record
			json.Unmarshal(rec.Body.Bytes(), &r)
			s.stats.ReadBytes += recordSize(r.Kind, r.ID, r.Value)
		}
	})
}

func recordSize(kind, id string, value []byte) int64 { return int64(len(kind) + len(id) + len(value)) }

// Stats returns the counts since the store was made or ResetStats.
func (s *testStore) Stats() storeStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// ResetStats zeroes the counts.
func (s *testStore) ResetStats() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats = storeStats{}
}

// Size returns the bytes of state the store holds: each record's kind, id
// and value, and each audit entry (what the replicated state grows by),
// as the scheduler's snapshot document shows them.
func (s *testStore) Size() int64 {
	doc, err := s.Client.Snapshot(context.Background())
	if err != nil {
		panic("gateway test: snapshot: " + err.Error())
	}
	var d struct {
		Records []api.Record     `json:"records"`
		Audit   []api.AuditEntry `json:"audit"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		panic("gateway test: snapshot: " + err.Error())
	}
	var n int64
	for _, r := range d.Records {
		n += recordSize(r.Kind, r.ID, r.Value)
	}
	for _, e := range d.Audit {
		n += int64(len(e.Entry))
	}
	return n
}

// Count returns how many records of kind the store holds.
func (s *testStore) Count(kind string) int { return len(s.c.State().Records(kind, "")) }

// AuditLen returns how many entries the audit log holds.
func (s *testStore) AuditLen() int { return s.c.State().AuditLen() }

// AuditAll returns every entry the log holds, oldest first.
func (s *testStore) AuditAll() []api.AuditEntry {
	var out []api.AuditEntry
	for _, e := range s.c.State().Audit(0, 1<<30) {
		out = append(out, api.AuditEntry{Seq: e.Seq, Time: e.Time, Entry: e.Entry})
	}
	return out
}

// SetNow sets the scheduler's clock, which stamps audit entries; nil is
// time.Now.
func (s *testStore) SetNow(now func() time.Time) { s.c.SetNow(now) }

// FailGets makes the next n reads of a record fail with unavailable.
func (s *testStore) FailGets(n int) {
	s.c.FailNext(n, http.StatusServiceUnavailable, func(r *http.Request) bool {
		return r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/records/") && strings.Count(r.URL.Path, "/") == 4
	})
}

// FailPuts makes the next n writes of a record fail with unavailable.
func (s *testStore) FailPuts(n int) {
	s.c.FailNext(n, http.StatusServiceUnavailable, schedulertest.Match(http.MethodPut, "/v1/records/"))
}

// testSteps is the scheduler's step API (a *client.Client) and the agent
// of testNode, which the tests move steps on with (Start, Exit, ...).
type testSteps struct {
	*client.Client
	c     *schedulertest.Cluster
	agent *schedulertest.Agent

	mu sync.Mutex
	// accepted counts accepted submissions per id.
	accepted map[string]int
	// env holds the environment each started step reached its node with.
	env map[string][]string
	// reads counts step reads (not long polls), readBytes the JSON bytes
	// they answered.
	reads     int
	readBytes int64
}

// count is a middleware on the scheduler that counts submissions and
// step reads.
func (s *testSteps) count(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		submit := r.Method == http.MethodPost && p == "/v1/steps"
		read := r.Method == http.MethodGet && strings.HasPrefix(p, "/v1/steps/") && strings.Count(p, "/") == 3 && !r.URL.Query().Has("index")
		if !submit && !read {
			next.ServeHTTP(w, r)
			return
		}
		rec := &schedulertest.Recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		s.mu.Lock()
		defer s.mu.Unlock()
		switch {
		case submit && rec.Status == http.StatusCreated:
			var st api.Step
			json.Unmarshal(rec.Body.Bytes(), &st)
			s.accepted[st.ID]++
		case read:
			s.reads++
			if rec.Status == http.StatusOK {
				s.readBytes += int64(len(bytes.TrimSpace(rec.Body.Bytes())))
			}
		}
	})
}

// Accepted returns how many times a submission of id was accepted (at
// most once, unless the gateway lost track of its steps).
func (s *testSteps) Accepted(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted[id]
}

// Reads returns how many step reads were answered since the last
// ResetReads, and the bytes of their answers (JSON).
func (s *testSteps) Reads() (calls int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads, s.readBytes
}

// ResetReads zeroes the counts of Reads.
func (s *testSteps) ResetReads() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads, s.readBytes = 0, 0
}

// StepIDs returns the ids of every step the scheduler holds, sorted.
func (s *testSteps) StepIDs() []string {
	var ids []string
	for _, st := range s.c.State().Steps(scheduler.StepFilter{}) {
		ids = append(ids, string(st.ID))
	}
	slices.Sort(ids)
	return ids
}

// Start reports step id starting and running on testNode, once placed
// there.
func (s *testSteps) Start(id string) {
	st := s.agent.Assigned(id)
	s.mu.Lock()
	s.env[id] = st.Spec.Env
	s.mu.Unlock()
	s.agent.Start(id)
}

// Env returns the environment step id reached its node with when it
// started (nil for a step never started).
func (s *testSteps) Env(id string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.env[id])
}

// Exit reports the end of step id's process with code, cleaned up: a
// step with a cancel request ends cancelled.
func (s *testSteps) Exit(id string, code int) { s.agent.Exit(id, code) }

// Fail reports that step id could not be started, for reason.
func (s *testSteps) Fail(id, reason string) {
	s.agent.Assigned(id)
	s.agent.Fail(id, reason)
}

// ExitWithFiles reports the end of step id's process with code, having
// changed its workspace by files (path -> content, "" removes) as a node
// reports it; the scheduler commits the revision. It returns the step as
// the scheduler then holds it (its Revision; a detached one, the step
// failed, on a conflict).
func (s *testSteps) ExitWithFiles(id string, code int, files map[string]string) cluster.Step {
	return s.agent.ExitWithFiles(id, code, files)
}

// ExitWithTree is ExitWithFiles with symlinks too (path -> target).
func (s *testSteps) ExitWithTree(id string, code int, files, links map[string]string) cluster.Step {
	return s.agent.ExitWithTree(id, code, files, links)
}

// Submit submits step id ("true") in workspace ws straight to the
// scheduler, as the driver does a run's.
func (s *testSteps) Submit(t *testing.T, id, ws string) {
	t.Helper()
	if _, err := s.Client.SubmitStep(t.Context(), api.StepRequest{ID: id, Image: "base", Args: []string{"true"}, CPU: 1, MemoryBytes: 1 << 30, Workspace: ws}); err != nil {
		t.Fatalf("SubmitStep(%s) = %v", id, err)
	}
}

// ConfirmCancel reports the process of cancelled step id gone.
func (s *testSteps) ConfirmCancel(id string) { s.agent.ConfirmCancel(id) }

// AddEvent reports an event of step id.
func (s *testSteps) AddEvent(id, kind, message string) {
	s.agent.Event(id, cluster.Event{Kind: kind, Message: message})
}

// AddTypedEvent reports e, an event with its payload, of step id.
func (s *testSteps) AddTypedEvent(id string, e api.Event) { s.agent.Event(id, cluster.Event(e)) }

// Compact removes step id (terminal) from the scheduler, as it does once
// past its retention: reads of it are then not_found.
func (s *testSteps) Compact(id string) { s.c.Compact(id) }

// Lose declares testNode down: its live steps are lost.
func (s *testSteps) Lose() { s.agent.Lose("node stopped answering") }

// step returns step id as the scheduler holds it.
func (s *testSteps) step(t *testing.T, id string) api.Step {
	t.Helper()
	st, err := s.Client.Step(context.Background(), id)
	if err != nil {
		t.Fatalf("Step(%s) = %v", id, err)
	}
	return st
}
