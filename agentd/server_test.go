package agentd

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/scheduler"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// TestNewChecksConfig: New refuses a configuration the daemon cannot run
// with, naming what is missing, and starts nothing.
func TestNewChecksConfig(t *testing.T) {
	good := func() Config {
		c := DefaultConfig()
		c.Agent.Node, c.Agent.Address = "n1", netip.MustParseAddrPort("127.0.0.1:7200")
		c.Schedulers = []string{"http://127.0.0.1:7100"}
		c.Logs.Dir = t.TempDir()
		return c
	}
	for _, tt := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"ok", func(*Config) {}, ""},
		{"no node", func(c *Config) { c.Agent.Node = "" }, "node id"},
		{"no address", func(c *Config) { c.Agent.Address = netip.AddrPort{} }, "stream address"},
		{"no scheduler", func(c *Config) { c.Schedulers = nil }, "scheduler"},
		{"no log dir", func(c *Config) { c.Logs.Dir = "" }, "log directory"},
		{"no shutdown time", func(c *Config) { c.ShutdownTimeout = 0 }, "shutdown timeout"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := good()
			tt.edit(&c)
			_, err := New(c, slog.New(slog.DiscardHandler))
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("New() = %v, want an error naming %q", err, tt.want)
			}
		})
	}
	testenv.NoGoroutines(t, 5*time.Second, "github.com/rodon-compute/rodon/agentd")
}

// daemon is a Server under test, its scheduler a real one-member cluster
// on loopback (plaintext).
type daemon struct {
	srv   *Server
	sched *client.Client
	addr  string
}

// startScheduler runs a one-member scheduler until the test ends and
// returns its HTTP address.
func startScheduler(t *testing.T) string {
	t.Helper()
	cfg := scheduler.DefaultConfig()
	cfg.ID, cfg.DataDir, cfg.Bootstrap = "m1", t.TempDir(), true
	cfg.RaftAddr, cfg.HTTPAddr = testenv.FreeAddr(t), testenv.FreeAddr(t)
	cfg.ShutdownTimeout = 2 * time.Second
	srv, err := scheduler.New(cfg, testenv.Logger(t))
	if err != nil {
		t.Fatalf("scheduler.New() = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("scheduler Run() = %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("scheduler did not stop within 15s")
		}
	})
	return cfg.HTTPAddr
}

// newDaemon builds the node daemon of node d1 (no sandbox network) on a
// real containerd; hook, if not nil, wraps its loops.
func newDaemon(t *testing.T, schedAddr string, hook func(name string, run func(context.Context) error) func(context.Context) error) *daemon {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Agent.Node = "d1"
	cfg.Agent.Address = netip.MustParseAddrPort(testenv.FreeAddr(t))
	cfg.Agent.Capacity = cluster.Resources{CPU: 1, MemoryBytes: 1 << 30}
	cfg.Agent.Heartbeat = 200 * time.Millisecond
	cfg.Agent.PollWait = time.Second
	cfg.Agent.ProbeImage = baseImage
	cfg.Runtime.DataDir = t.TempDir()
	cfg.Runtime.KillGrace = 2 * time.Second
	cfg.Logs.Dir = t.TempDir()
	cfg.Schedulers = []string{"http://" + schedAddr}
	cfg.ShutdownTimeout = 2 * time.Second
	srv, err := New(cfg, testenv.Logger(t))
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	srv.loop = hook
	c, err := client.New("http://"+schedAddr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &daemon{srv: srv, sched: c, addr: cfg.Agent.Address.String()}
}

// waitServing waits until the daemon answers /healthz and the scheduler
// has its node registered at its address: every loop is running.
func (d *daemon) waitServing(t *testing.T, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("Run() = %v before the daemon served", err)
		default:
		}
		healthy := false
		if resp, err := http.Get("http://" + d.addr + "/healthz"); err == nil {
			resp.Body.Close()
			healthy = resp.StatusCode == http.StatusOK
		}
		n, err := d.sched.Node(t.Context(), "d1")
		if healthy && err == nil && n.Address == d.addr && n.State != string(cluster.NodeDown) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not serving within 60s: healthz %v, node %+v, %v", healthy, n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// errInjected is the failure the test gives one of the daemon's loops.
var errInjected = errors.New("injected failure")

// TestServerStopsWhenALoopFails kills one internal loop of a running node
// daemon and checks that the whole daemon stops with that loop's error
// (instead of running half-dead: registered, heartbeating, serving
// streams), within a few seconds, leaving no goroutine and nothing on the
// host; a loop that returns by itself is a failure too; and cancellation
// stops everything with a nil error.
func TestServerStopsWhenALoopFails(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	schedAddr := startScheduler(t)
	for _, tt := range []struct {
		name string
		// loop is the loop killed, empty for none (the test cancels).
		loop string
		// stop makes the killed loop's end: an error or a nil return.
		stop    error
		wantErr error
	}{
		{"log sweeper fails", "log sweeper", errInjected, errInjected},
		{"agent fails", "agent", errInjected, errInjected},
		{"reload returns", "reload", nil, ErrLoopStopped},
		{"cancelled", "", nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kill := make(chan struct{})
			killed := make(chan struct{})
			hook := func(name string, run func(context.Context) error) func(context.Context) error {
				if name != tt.loop {
					return run
				}
				// The real loop runs until the test kills it.
				return func(ctx context.Context) error {
					lctx, cancel := context.WithCancel(ctx)
					defer cancel()
					done := make(chan error, 1)
					go func() { done <- run(lctx) }()
					select {
					case err := <-done:
						return err
					case <-kill:
					}
					cancel()
					<-done
					close(killed)
					return tt.stop
				}
			}
			d := newDaemon(t, schedAddr, hook)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- d.srv.Run(ctx) }()
			d.waitServing(t, done)

			start := time.Now()
			if tt.loop != "" {
				close(kill)
				<-killed
			} else {
				cancel()
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("Run() still running 30s after the %s stopped: the daemon runs half-dead", tt.loop)
			}
			t.Logf("Run() returned %v, %v after the stop", err, time.Since(start))
			switch {
			case tt.wantErr == nil && err != nil:
				t.Errorf("Run() = %v after cancellation, want nil", err)
			case tt.wantErr != nil && (!errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.loop)):
				t.Errorf("Run() = %v, want %v naming the %s", err, tt.wantErr, tt.loop)
			}
			if tt.loop != "" && ctx.Err() != nil {
				t.Errorf("the test's context ended: %v; the daemon must stop by itself", ctx.Err())
			}
			// Nothing of the daemon answers any more.
			if resp, err := http.Get("http://" + d.addr + "/healthz"); err == nil {
				resp.Body.Close()
				t.Errorf("GET /healthz after Run returned = %d, want a refused connection", resp.StatusCode)
			}
			testenv.NoGoroutines(t, 5*time.Second, "github.com/rodon-compute/rodon/agentd")
		})
	}
}
