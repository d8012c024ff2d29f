package scheduler

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/pki/pkitest"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// testServer is one member of a serverCluster, run by Run on real TCP
// listeners on 127.0.0.1.
type testServer struct {
	id   string
	srv  *Server
	stop context.CancelFunc
	done chan error
}

func (m *testServer) url() string { return m.srv.scheme() + "://" + m.srv.cfg.HTTPAddr }

// serverCluster is an in-process scheduler cluster of Servers over real
// TCP (Raft and HTTP), started with Run and stopped by cancelling it. With
// a CA its members speak mutual TLS (HTTP and Raft), each with its member
// certificate; without, they run in plaintext mode.
type serverCluster struct {
	t       *testing.T
	members []*testServer
	// transport carries the test clients' requests in plaintext mode;
	// closed at cleanup so no connection goroutine outlives the test.
	transport *http.Transport
	// ca issues the members' and the test clients' certificates; nil in
	// plaintext mode.
	ca *pkitest.CA
	// as are the test clients' identities, by ROLE/NAME.
	as map[string]*identity
}

// identity is a test client's certificate and the transport that presents
// it (accepting only members on the other end).
type identity struct {
	src *pki.Source
	tr  *http.Transport
}

// serverConfig is a member's configuration with timings fit for a test.
func serverConfig(t *testing.T, id string) Config {
	cfg := DefaultConfig()
	cfg.ID, cfg.DataDir = id, t.TempDir()
	cfg.RaftAddr, cfg.HTTPAddr = freeAddr(t), freeAddr(t)
	cfg.NodeTTL = time.Minute
	cfg.ShutdownTimeout = 2 * time.Second
	rc := testConfig(id)
	cfg.Raft = rc
	return cfg
}

// newServerCluster starts n members: the first bootstraps, the others
// join through it with --join. edit, if not nil, changes each member's
// configuration. Cleanup stops them and checks that no goroutine of theirs
// is left.
func newServerCluster(t *testing.T, n int, edit func(*Config)) *serverCluster {
	t.Helper()
	return startServerCluster(t, nil, n, edit)
}

// newTLSCluster is newServerCluster with mutual TLS: a fresh cluster CA
// issues every member its certificate.
func newTLSCluster(t *testing.T, n int, edit func(*Config)) *serverCluster {
	t.Helper()
	return startServerCluster(t, pkitest.New(t), n, edit)
}

func startServerCluster(t *testing.T, ca *pkitest.CA, n int, edit func(*Config)) *serverCluster {
	t.Helper()
	checkNoServerGoroutines(t)
	c := &serverCluster{t: t, transport: newTestTransport(t), ca: ca, as: make(map[string]*identity)}
	var first string
	for i := range n {
		cfg := serverConfig(t, fmt.Sprintf("m%d", i))
		if ca != nil {
			cfg.TLS = ca.Source(t, pki.RoleMember, cfg.ID)
		}
		if i == 0 {
			cfg.Bootstrap = true
			first = cfg.HTTPAddr
		} else {
			cfg.Join = []string{first}
		}
		if edit != nil {
			edit(&cfg)
		}
		c.start(cfg)
		if i == 0 {
			c.waitLeader()
		}
	}
	c.waitMembers(n)
	return c
}

// start runs a member with cfg until the test ends.
func (c *serverCluster) start(cfg Config) *testServer {
	t := c.t
	t.Helper()
	srv, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatalf("New(%s) = %v", cfg.ID, err)
	}
	ctx, stop := context.WithCancel(context.Background())
	m := &testServer{id: cfg.ID, srv: srv, stop: stop, done: make(chan error, 1)}
	go func() { m.done <- srv.Run(ctx) }()
	c.members = append(c.members, m)
	t.Cleanup(func() { c.stopMember(m) })
	return m
}

// stopMember cancels a member's Run and waits for it to return.
func (c *serverCluster) stopMember(m *testServer) {
	c.t.Helper()
	m.stop()
	select {
	case err, ok := <-m.done:
		if ok && err != nil {
			c.t.Errorf("member %s: Run() = %v", m.id, err)
		}
		if ok {
			close(m.done)
		}
	case <-time.After(10 * time.Second):
		c.t.Errorf("member %s: Run did not return 10s after cancel", m.id)
	}
}

// waitLeader waits until one member leads, and returns it.
func (c *serverCluster) waitLeader() *testServer {
	c.t.Helper()
	var leader *testServer
	waitFor(c.t, "a leader", func() bool {
		leader = nil
		for _, m := range c.members {
			if m.srv.raft.IsLeader() {
				leader = m
			}
		}
		return leader != nil
	})
	return leader
}

// follower returns a member that is not the leader.
func (c *serverCluster) follower() *testServer {
	leader := c.waitLeader()
	for _, m := range c.members {
		if m != leader {
			return m
		}
	}
	c.t.Fatal("no follower")
	return nil
}

// waitMembers waits until the leader counts n voters and every running
// member knows the leader's HTTP address.
func (c *serverCluster) waitMembers(n int) {
	c.t.Helper()
	waitFor(c.t, fmt.Sprintf("%d members", n), func() bool {
		leader := c.waitLeader()
		ms, err := leader.srv.raft.Members(c.t.Context())
		if err != nil || len(ms) != n {
			return false
		}
		for _, m := range c.members {
			id, _ := m.srv.raft.Leader()
			if _, ok := m.srv.fsm.State().Member(id); !ok {
				return false
			}
		}
		return true
	})
}

// urls are the HTTP URLs of the given members (all when none).
func (c *serverCluster) urls(of []*testServer) []string {
	if len(of) == 0 {
		of = c.members
	}
	var urls []string
	for _, m := range of {
		urls = append(urls, m.url())
	}
	return urls
}

// client returns a client of the given members (all when none).
func (c *serverCluster) client(of ...*testServer) *client.Client {
	c.t.Helper()
	urls := c.urls(of)
	if c.ca != nil {
		return c.clientAs("operator/ops", of...)
	}
	cl, err := client.New(strings.Join(urls, ","), client.Options{
		HTTPClient: &http.Client{Transport: c.transport},
		RetryFor:   5 * time.Second,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return cl
}

// identity returns the test client identity who (ROLE/NAME), issuing its
// certificate the first time. A member's own identity is its Source.
func (c *serverCluster) identity(who string) *identity {
	c.t.Helper()
	if id, ok := c.as[who]; ok {
		return id
	}
	pid, err := pki.ParseIdentity(who)
	if err != nil {
		c.t.Fatal(err)
	}
	var src *pki.Source
	for _, m := range c.members {
		if m.srv.cfg.TLS != nil && m.srv.cfg.TLS.Identity() == pid {
			src = m.srv.cfg.TLS
		}
	}
	if src == nil {
		src = c.ca.Source(c.t, pid.Role, pid.Name)
	}
	id := &identity{src: src, tr: src.Transport(pki.AllowRoles(pki.RoleMember))}
	c.t.Cleanup(id.tr.CloseIdleConnections)
	c.as[who] = id
	return id
}

// clientAs returns a TLS client of the given members (all when none) with
// the certificate of who (ROLE/NAME).
func (c *serverCluster) clientAs(who string, of ...*testServer) *client.Client {
	c.t.Helper()
	urls := c.urls(of)
	cl, err := client.New(strings.Join(urls, ","), client.Options{
		HTTPClient: &http.Client{Transport: c.identity(who).tr},
		RetryFor:   5 * time.Second,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return cl
}

// newTestTransport returns a transport for test clients whose idle
// connections are closed when the test ends.
func newTestTransport(t testing.TB) *http.Transport {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// waitFor polls cond until it holds, failing t after 10 seconds.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() error {
		if !cond() {
			return fmt.Errorf("waiting for %s", what)
		}
		return nil
	})
}

// waitStep waits, with the step long poll, until cond holds for step id,
// and returns the step.
func waitStep(t testing.TB, c *client.Client, id string, what string, cond func(api.Step) bool) api.Step {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var index uint64
	for {
		s, err := c.WaitStep(ctx, id, index, 5*time.Second)
		if err != nil {
			t.Fatalf("waiting for step %s to be %s: WaitStep() = %v", id, what, err)
		}
		if cond(s) {
			return s
		}
		index = s.ModifyIndex
	}
}

func stateIs(state string) func(api.Step) bool {
	return func(s api.Step) bool { return s.State == state }
}

// testAgent plays a node agent through the client: it registers and, until
// stopped, heartbeats.
type testAgent struct {
	t    *testing.T
	id   cluster.NodeID
	c    *client.Client
	stop func()
}

// newAgent registers node id with cpu cores and mem bytes, and heartbeats
// every 50ms until stopHeartbeats or the end of the test.
func newAgent(t *testing.T, c *client.Client, id cluster.NodeID, cpu float64, mem int64) *testAgent {
	t.Helper()
	_, err := c.Register(t.Context(), cluster.RegisterNode{
		Node:     id,
		Address:  netip.MustParseAddrPort("127.0.0.1:7200"),
		Capacity: cluster.Resources{CPU: cpu, MemoryBytes: mem},
		Health:   cluster.Health{State: cluster.NodeReady},
	})
	if err != nil {
		t.Fatalf("Register(%s) = %v", id, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			_, _ = c.Heartbeat(ctx, cluster.Heartbeat{Node: id, Health: cluster.Health{State: cluster.NodeReady}})
		}
	})
	a := &testAgent{t: t, id: id, c: c, stop: sync.OnceFunc(func() { cancel(); wg.Wait() })}
	t.Cleanup(a.stop)
	return a
}

func (a *testAgent) phase(id string, attempt int, state cluster.StepState, p cluster.Phases) {
	a.t.Helper()
	err := a.c.ReportPhase(a.t.Context(), cluster.StepPhase{Step: cluster.StepID(id), Node: a.id, Attempt: attempt, State: state, Phases: p})
	if err != nil {
		a.t.Fatalf("ReportPhase(%s, %s) = %v", id, state, err)
	}
}

// run reports step id starting, then running.
func (a *testAgent) run(id string, attempt int) {
	a.t.Helper()
	a.phase(id, attempt, cluster.StateStarting, cluster.Phases{Created: time.Now()})
	a.phase(id, attempt, cluster.StateRunning, cluster.Phases{Started: time.Now()})
}

func (a *testAgent) exit(id string, attempt int, state cluster.StepState, code int, by cluster.TerminatedBy) {
	a.t.Helper()
	err := a.c.ReportExit(a.t.Context(), cluster.StepExit{Node: a.id, Attempt: attempt, Record: cluster.ExitRecord{
		Step: cluster.StepID(id), State: state, ExitCode: code, TerminatedBy: by, Phases: cluster.Phases{Exited: time.Now()},
	}})
	if err != nil {
		a.t.Fatalf("ReportExit(%s) = %v", id, err)
	}
}

// checkNoServerGoroutines fails t if goroutines of a Server, of Raft or of
// an HTTP connection are still running once t's other cleanups are done.
func checkNoServerGoroutines(t testing.TB) {
	t.Helper()
	testenv.NoGoroutinesAtCleanup(t, 5*time.Second, "hashicorp/raft", "scheduler.(*Raft)", "scheduler.(*Server)", "scheduler.(*batcher)",
		"net/http.(*conn).serve", "net/http.(*persistConn)")
}
