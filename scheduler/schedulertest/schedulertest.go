// Package schedulertest runs the real scheduler in-process for the tests
// of other packages: each member is a scheduler.Server (its FSM, its Raft
// wrapper, its HTTP API and leader loops, what `scheduler serve` runs)
// over raft's in-memory transport and stores, serving HTTP on a loopback
// listener, in plaintext or with mutual TLS from a pkitest CA. A test
// cuts a member off (Disconnect, Reconnect), changes the answers of the
// HTTP API (Use, FailNext) or the members' clock (SetNow), and plays a
// node agent through the real client (Agent).
package schedulertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/pki/pkitest"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/scheduler"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// Options configure a Cluster. The zero value is one member in plaintext
// mode.
type Options struct {
	// Members is how many members to run: 1 (0 is 1) or more; the first
	// bootstraps, the others join it.
	Members int
	// CA, when set, issues every member its certificate: the members speak
	// mutual TLS and authorize every request by its caller's identity
	// (scheduler/authz.go). Nil is plaintext mode: no authentication.
	CA *pkitest.CA
	// Config, if set, changes each member's configuration before it starts
	// (timeouts, retention, ...).
	Config func(*scheduler.Config)
	// Logger receives the members' logs; nil is t.Log.
	Logger *slog.Logger
}

// Cluster is a running in-process scheduler cluster. Its methods may be
// called from any goroutine.
type Cluster struct {
	t       testing.TB
	ca      *pkitest.CA
	Members []*Member

	// plain carries plaintext clients' requests; closed at cleanup.
	plain *http.Transport

	mu    sync.Mutex
	wraps []*wrap
	now   func() time.Time
	as    map[string]*http.Transport
}

type wrap struct {
	mw func(http.Handler) http.Handler
}

// Member is one scheduler member of a Cluster.
type Member struct {
	// ID is the member id, m0, m1, ...
	ID string
	// Server is the member itself.
	Server *scheduler.Server
	// Addr is the HOST:PORT of its HTTP API, on loopback.
	Addr string
	// RaftAddr is the address of its in-memory Raft transport.
	RaftAddr string

	c     *Cluster
	trans *raft.InmemTransport
	stop  context.CancelFunc
	done  chan error
}

// URL is the member's base URL (https:// with TLS).
func (m *Member) URL() string {
	if m.c.ca != nil {
		return "https://" + m.Addr
	}
	return "http://" + m.Addr
}

// RaftConfig is a Raft timing fit for an in-process cluster.
func RaftConfig() scheduler.RaftConfig {
	rc := scheduler.DefaultRaftConfig()
	rc.HeartbeatTimeout = 50 * time.Millisecond
	rc.ElectionTimeout = 50 * time.Millisecond
	rc.LeaderLeaseTimeout = 50 * time.Millisecond
	rc.CommitTimeout = 5 * time.Millisecond
	rc.ApplyTimeout = 2 * time.Second
	return rc
}

// New starts a cluster and waits until every member knows the leader.
// Cleanup stops the members and fails t if one's Run fails.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	n := max(opts.Members, 1)
	logger := opts.Logger
	if logger == nil {
		logger = Logger(t)
	}
	c := &Cluster{t: t, ca: opts.CA, plain: &http.Transport{}, as: map[string]*http.Transport{}}
	t.Cleanup(c.plain.CloseIdleConnections)
	var cfgs []scheduler.Config
	// The members share one local blob store, as a cluster shares its
	// S3 bucket.
	blobs := "local://" + t.TempDir()
	for i := range n {
		id := fmt.Sprintf("m%d", i)
		// The in-memory transport dials nothing: its address is a name,
		// given the shape the members' records want (HOST:PORT).
		raftAddr := fmt.Sprintf("127.0.0.%d:7000", i+1)
		_, trans := raft.NewInmemTransport(raft.ServerAddress(raftAddr))
		store := raft.NewInmemStore()
		cfg := scheduler.DefaultConfig()
		cfg.ID, cfg.DataDir = id, t.TempDir()
		cfg.RaftAddr, cfg.HTTPAddr = raftAddr, testenv.FreeAddr(t)
		cfg.NodeTTL = time.Minute
		cfg.ShutdownTimeout = 2 * time.Second
		cfg.BlobStore = blobs
		cfg.Raft = RaftConfig()
		if n == 1 {
			// A lone member has no one to wait for: it elects itself at
			// once and never loses a quorum.
			cfg.Raft.HeartbeatTimeout, cfg.Raft.ElectionTimeout, cfg.Raft.LeaderLeaseTimeout = 10*time.Millisecond, 10*time.Millisecond, 10*time.Millisecond
		}
		cfg.Testing = scheduler.Testing{
			Raft: scheduler.RaftDeps{Transport: trans, Logs: store, Stable: store, Snapshots: raft.NewInmemSnapshotStore()},
			Wrap: c.wrapHandler,
			Now:  c.clock,
		}
		if c.ca != nil {
			cfg.TLS = c.ca.Source(t, pki.RoleMember, id)
		}
		if i == 0 {
			cfg.Bootstrap = true
		} else {
			cfg.Join = []string{cfgs[0].HTTPAddr}
		}
		if opts.Config != nil {
			opts.Config(&cfg)
		}
		cfgs = append(cfgs, cfg)
		c.Members = append(c.Members, &Member{ID: id, Addr: cfg.HTTPAddr, RaftAddr: raftAddr, c: c, trans: trans})
	}
	c.heal()
	for i, cfg := range cfgs {
		m := c.Members[i]
		srv, err := scheduler.New(cfg, logger)
		if err != nil {
			t.Fatalf("schedulertest: New(%s) = %v", cfg.ID, err)
		}
		ctx, stop := context.WithCancel(context.Background())
		m.Server, m.stop, m.done = srv, stop, make(chan error, 1)
		go func() { m.done <- srv.Run(ctx) }()
		t.Cleanup(func() { c.stopMember(m) })
		if i == 0 {
			c.Leader()
		}
	}
	c.waitMembers()
	return c
}

func (c *Cluster) stopMember(m *Member) {
	m.stop()
	select {
	case err, ok := <-m.done:
		if ok && err != nil {
			c.t.Errorf("schedulertest: member %s: Run() = %v", m.ID, err)
		}
		if ok {
			close(m.done)
		}
	case <-time.After(10 * time.Second):
		c.t.Errorf("schedulertest: member %s: Run did not return 10s after cancel", m.ID)
	}
}

// Stop stops member m (its Run returns); the others go on.
func (c *Cluster) Stop(m *Member) { c.stopMember(m) }

// heal connects every member's transport to every other's.
func (c *Cluster) heal() {
	for _, a := range c.Members {
		for _, b := range c.Members {
			if a != b {
				a.trans.Connect(b.trans.LocalAddr(), b.trans)
			}
		}
	}
}

// Disconnect cuts m's Raft transport off the other members', both ways:
// a leader cut off steps down, a follower cannot be reached. Its HTTP API
// still answers, as a member partitioned from its peers does.
func (c *Cluster) Disconnect(m *Member) {
	for _, o := range c.Members {
		if o != m {
			m.trans.Disconnect(o.trans.LocalAddr())
			o.trans.Disconnect(m.trans.LocalAddr())
		}
	}
}

// Reconnect undoes Disconnect.
func (c *Cluster) Reconnect(m *Member) {
	for _, o := range c.Members {
		if o != m {
			m.trans.Connect(o.trans.LocalAddr(), o.trans)
			o.trans.Connect(m.trans.LocalAddr(), m.trans)
		}
	}
}

// Leader waits until one member leads, and returns it.
func (c *Cluster) Leader() *Member {
	c.t.Helper()
	var leader *Member
	Eventually(c.t, "a scheduler leader", func() bool {
		leader = nil
		for _, m := range c.Members {
			if m.Server != nil && m.Server.Raft().IsLeader() {
				leader = m
			}
		}
		return leader != nil
	})
	return leader
}

// waitMembers waits until the leader counts every member as a voter and
// every member knows the leader's HTTP address.
func (c *Cluster) waitMembers() {
	c.t.Helper()
	Eventually(c.t, fmt.Sprintf("%d scheduler members", len(c.Members)), func() bool {
		leader := c.Leader()
		ms, err := leader.Server.Raft().Members(context.Background())
		if err != nil || len(ms) != len(c.Members) {
			return false
		}
		for _, m := range c.Members {
			id, _ := m.Server.Raft().Leader()
			if _, ok := m.Server.FSM().State().Member(id); !ok {
				return false
			}
		}
		return true
	})
}

// State is the replicated state as the leader holds it.
func (c *Cluster) State() *scheduler.State { return c.Leader().Server.FSM().State() }

// Apply applies cmd through the leader's Raft, as a leader loop does
// (cluster.MarkNodeLost, cluster.CompactSteps, ...), and returns the
// FSM's answer; a business error is returned as the error.
func (c *Cluster) Apply(ctx context.Context, cmd cluster.Command) (any, error) {
	res, err := c.Leader().Server.Raft().Apply(ctx, cmd)
	if err != nil {
		return nil, err
	}
	if e, ok := res.(error); ok {
		return nil, e
	}
	return res, nil
}

// Compact removes step id from the state, as the leader does once a
// terminal step is past its retention, with every terminal step that
// ended before it. id must be terminal.
func (c *Cluster) Compact(id string) {
	c.t.Helper()
	s, ok := c.State().Step(cluster.StepID(id))
	if !ok {
		return
	}
	if !s.State.Terminal() {
		c.t.Fatalf("schedulertest: compact step %s: it is %s, not terminal", id, s.State)
	}
	end := s.EndedAt
	if end.IsZero() {
		end = s.Phases.Exited
	}
	if end.IsZero() {
		end = s.Phases.Queued
	}
	if _, err := c.Apply(context.Background(), cluster.CompactSteps{Before: end.Add(time.Nanosecond), Limit: 1000, At: c.clock()}); err != nil {
		c.t.Fatalf("schedulertest: compact step %s: %v", id, err)
	}
}

// Restore replaces the nodes and steps of the state with these, as an
// operator's restore of a snapshot document does (cluster.Restore): for a
// state no agent could bring about in a test, such as a step with every
// field set. Records, the audit log and the members stay.
func (c *Cluster) Restore(nodes []cluster.Node, steps []cluster.Step) {
	c.t.Helper()
	if _, err := c.Apply(context.Background(), cluster.Restore{Nodes: nodes, Steps: steps, At: c.clock()}); err != nil {
		c.t.Fatalf("schedulertest: restore: %v", err)
	}
}

// UpdateStep changes step id by a Restore of the whole state with f
// applied to it; prefer an Agent's reports, which go the way they do in
// production.
func (c *Cluster) UpdateStep(id string, f func(*cluster.Step)) {
	c.t.Helper()
	st := c.State()
	nodes, steps := st.Nodes(), st.Steps(scheduler.StepFilter{})
	found := false
	for i := range steps {
		if steps[i].ID == cluster.StepID(id) {
			f(&steps[i])
			found = true
		}
	}
	if !found {
		c.t.Fatalf("schedulertest: update step %s: not found", id)
	}
	c.Restore(nodes, steps)
}

// SetNow sets the members' clock (what they stamp records, audit entries
// and their decisions with); nil is time.Now again.
func (c *Cluster) SetNow(now func() time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
}

func (c *Cluster) clock() time.Time {
	c.mu.Lock()
	now := c.now
	c.mu.Unlock()
	if now == nil {
		return time.Now().UTC()
	}
	return now().UTC()
}

// Use adds mw around every member's HTTP API, outside the ones added
// before, until the returned function is called (or the test ends). A
// request forwarded from a follower to the leader passes it twice.
func (c *Cluster) Use(mw func(http.Handler) http.Handler) (remove func()) {
	w := &wrap{mw: mw}
	c.mu.Lock()
	c.wraps = append(c.wraps, w)
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, x := range c.wraps {
			if x == w {
				c.wraps = append(c.wraps[:i], c.wraps[i+1:]...)
				return
			}
		}
	}
}

// wrapHandler is each member's Testing.Wrap: the middlewares of Use, as
// they are when a request comes.
func (c *Cluster) wrapHandler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		wraps := append([]*wrap(nil), c.wraps...)
		c.mu.Unlock()
		var out http.Handler = h
		for _, x := range wraps {
			out = x.mw(out)
		}
		out.ServeHTTP(w, r)
	})
}

// FailNext answers the next n requests that match with status and the
// api error code of it ("unavailable" for 503), without serving them, as
// a member that cannot reach its leader does.
func (c *Cluster) FailNext(n int, status int, match func(*http.Request) bool) {
	var mu sync.Mutex
	left := n
	c.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			fail := left > 0 && match(r)
			if fail {
				left--
			}
			mu.Unlock()
			if !fail {
				next.ServeHTTP(w, r)
				return
			}
			code := api.CodeUnavailable
			if status != http.StatusServiceUnavailable {
				code = api.CodeInternal
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			json.NewEncoder(w).Encode(api.NewError(code, "injected failure (schedulertest)"))
		})
	})
}

// Match returns a request matcher of method and a path prefix.
func Match(method, pathPrefix string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		return r.Method == method && strings.HasPrefix(r.URL.Path, pathPrefix)
	}
}

// URLs returns the members' base URLs, comma-separated, as
// RODON_SCHEDULER and client.New take them.
func (c *Cluster) URLs(of ...*Member) string {
	if len(of) == 0 {
		of = c.Members
	}
	var urls []string
	for _, m := range of {
		urls = append(urls, m.URL())
	}
	return strings.Join(urls, ",")
}

// Client returns a client of the given members (all when none) that
// retries for 5 seconds: in plaintext mode an anonymous one, with TLS
// operator/ops.
func (c *Cluster) Client(of ...*Member) *client.Client {
	c.t.Helper()
	return c.ClientAs("operator/ops", of...)
}

// ClientAs returns a client of the given members (all when none) that
// retries for 5 seconds, with the certificate of who (ROLE/NAME) issued by
// the cluster's CA; in plaintext mode who is ignored.
func (c *Cluster) ClientAs(who string, of ...*Member) *client.Client {
	c.t.Helper()
	return c.ClientWith(who, client.Options{RetryFor: 5 * time.Second}, of...)
}

// ClientWith is ClientAs with opts; their HTTPClient's transport is the
// identity's (or, in plaintext mode, one closed at cleanup).
func (c *Cluster) ClientWith(who string, opts client.Options, of ...*Member) *client.Client {
	c.t.Helper()
	hc := &http.Client{Transport: c.plain}
	if opts.HTTPClient != nil {
		x := *opts.HTTPClient
		hc = &x
	}
	if c.ca != nil {
		hc.Transport = c.Transport(who)
	} else if hc.Transport == nil {
		hc.Transport = c.plain
	}
	opts.HTTPClient = hc
	cl, err := client.New(c.URLs(of...), opts)
	if err != nil {
		c.t.Fatalf("schedulertest: %v", err)
	}
	return cl
}

// Transport returns the HTTP transport of identity who (ROLE/NAME) with
// TLS, made once per cluster and closed at cleanup, that accepts only
// members as servers; in plaintext mode a plain one.
func (c *Cluster) Transport(who string) *http.Transport {
	c.t.Helper()
	if c.ca == nil {
		return c.plain
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if tr, ok := c.as[who]; ok {
		return tr
	}
	id, err := pki.ParseIdentity(who)
	if err != nil {
		c.t.Fatalf("schedulertest: %v", err)
	}
	tr := c.ca.Source(c.t, id.Role, id.Name).Transport(pki.AllowRoles(pki.RoleMember))
	c.t.Cleanup(tr.CloseIdleConnections)
	c.as[who] = tr
	return tr
}

// Eventually polls cond until it holds, failing t after 10 seconds.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() error {
		if !cond() {
			return fmt.Errorf("waiting for %s", what)
		}
		return nil
	})
}

// Logger routes logs to t.Log, so they show only when a test fails, and
// drops them once the test has ended (Raft goroutines may still log).
func Logger(t testing.TB) *slog.Logger { return testenv.Logger(t) }

// Recorder is an http.ResponseWriter for middleware (Cluster.Use) that
// passes the answer on and keeps its status and body for the test to read.
type Recorder struct {
	http.ResponseWriter
	Status int
	Body   bytes.Buffer
}

func (w *Recorder) WriteHeader(code int) {
	w.Status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *Recorder) Write(p []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	w.Body.Write(p)
	return w.ResponseWriter.Write(p)
}

// Flush passes flushes on (long polls, streams).
func (w *Recorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
