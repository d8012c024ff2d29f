package agentd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/netpolicy"
)

// Config configures the node daemon, `agentd serve`.
type Config struct {
	// Agent is the node as it registers (id, address, capacity, maxima).
	Agent AgentConfig
	// Runtime reaches containerd; its Network is set by Run from Egress.
	Runtime RuntimeConfig
	// Schedulers are the scheduler members' URLs (https://, or http://
	// when TLS is nil).
	Schedulers []string
	// TLS is the agent's certificate (agent/NODE); nil in plaintext mode
	// (loopback only, nothing authenticated).
	TLS *pki.Source
	// Egress is the sandbox network; nil gives sandboxes loopback only.
	// When it cannot be loaded the node registers as degraded.
	Egress *netpolicy.EgressConfig
	// Platform, if set, re-reads the platform CIDRs at every Reload.
	Platform func() ([]netip.Prefix, error)
	// Logs is the store of the steps' output logs (Dir is required).
	Logs logstore.Config
	// Pool is the warm pool; off when its MemoryBudget is zero.
	Pool PoolConfig
	// Reload: every value received re-reads the TLS files and the
	// platform CIDRs (main sends SIGHUP here). Nil: no reloads.
	Reload <-chan os.Signal
	// ShutdownTimeout bounds draining the HTTP server when Run ends.
	ShutdownTimeout time.Duration
}

// DefaultConfig returns the defaults of `agentd serve`; Agent.Node,
// Agent.Address, Schedulers and Logs.Dir must still be set.
func DefaultConfig() Config {
	return Config{
		Agent:           DefaultAgentConfig(),
		Runtime:         DefaultRuntimeConfig(),
		Logs:            logstore.DefaultConfig(),
		Pool:            DefaultPoolConfig(),
		ShutdownTimeout: 10 * time.Second,
	}
}

// Server is the node daemon: the agent (registration, heartbeats,
// assignments and the steps it runs), its HTTP server of step streams and
// terminal input, the log store's sweeper, the control-plane denylist and
// the reload of TLS files and platform CIDRs.
type Server struct {
	cfg    Config
	logger *slog.Logger
	sched  *schedulerClient
	logs   *logstore.Store

	// loop, if set (tests), wraps each loop Run starts, by name: a test
	// injects a failure into one of them.
	loop func(name string, run func(context.Context) error) func(context.Context) error
}

// New checks cfg and wires the daemon; it starts no goroutine and connects
// to nothing (Run does).
func New(cfg Config, logger *slog.Logger) (*Server, error) {
	switch {
	case cfg.Agent.Node == "":
		return nil, errors.New("agentd: empty node id")
	case !cfg.Agent.Address.IsValid():
		return nil, errors.New("agentd: no stream address")
	case len(cfg.Schedulers) == 0:
		return nil, errors.New("agentd: no scheduler URLs")
	case cfg.Logs.Dir == "":
		return nil, errors.New("agentd: no log directory")
	case cfg.ShutdownTimeout <= 0:
		return nil, fmt.Errorf("agentd: shutdown timeout %v: must be positive", cfg.ShutdownTimeout)
	}
	cfg.Runtime.Node = string(cfg.Agent.Node)
	sched, err := newSchedulerClient(cfg.Schedulers, cfg.TLS)
	if err != nil {
		return nil, err
	}
	logs, err := logstore.New(cfg.Logs, logger)
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, logger: logger, sched: sched, logs: logs}, nil
}

// Run runs the daemon until ctx ends, then stops every loop, drains the
// HTTP server within ShutdownTimeout and releases the sandbox network and
// the containerd client. Cancellation is not an error. If any loop fails
// or stops by itself, the others are stopped and Run returns its error: a
// node never runs half of its daemon. Run may be called once.
func (s *Server) Run(ctx context.Context) error {
	err := s.run(ctx)
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)) {
		// Cancelled, possibly during start-up.
		return nil
	}
	return err
}

func (s *Server) run(ctx context.Context) error {
	cfg, logger := s.cfg, s.logger
	defer s.sched.close()
	var cp *ControlPlane
	if cfg.Egress != nil {
		egress, err := netpolicy.NewEgress(*cfg.Egress, logger)
		if err != nil {
			// The node registers as degraded and gets no steps.
			err = fmt.Errorf("egress filter: %w", err)
			logger.Error("sandbox network unavailable", "error", err)
			cfg.Agent.Degraded = append(cfg.Agent.Degraded, err.Error())
		} else {
			defer egress.Close()
			cfg.Runtime.Network = egress
			logger.Info("sandbox network ready", "resolvers", egress.Resolvers(), "node_addrs", egress.NodeAddrs())
			// The control plane is denied before the first sandbox (the
			// probe's canary) starts, and no assigned step starts before
			// the scheduler's list of it arrived.
			if cp, err = newControlPlane(ctx, *cfg.Egress, cfg.Schedulers, s.sched, egress, logger); err != nil {
				return err
			}
			s.sched.ready = controlPlaneReady(cp)
		}
	}
	rt, err := NewRuntime(ctx, cfg.Runtime, logger)
	if err != nil {
		return err
	}
	defer rt.Close()
	if cfg.Agent.BlobClient == nil {
		hc, closeIdle := blobClient(s.sched.tr)
		defer closeIdle()
		cfg.Agent.BlobClient = hc
	}
	if cfg.Agent.SecretsClient == nil && cfg.TLS != nil {
		// The node's agent certificate, to the gateway only.
		tr := cfg.TLS.Transport(pki.AllowRoles(pki.RoleGateway))
		defer tr.CloseIdleConnections()
		cfg.Agent.SecretsClient = &http.Client{Transport: tr}
	}
	agent, err := NewAgent(cfg.Agent, rt, s.sched, s.logs, logger)
	if err != nil {
		return err
	}
	if cfg.Pool.MemoryBudget > 0 {
		pool, err := NewPool(cfg.Pool, rt, agent.Metrics(), logger)
		if err != nil {
			return err
		}
		// The agent runs the pool; what is ready when it stops goes here,
		// before the network and containerd client are released.
		agent.pool = pool
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := pool.Close(cctx); err != nil {
				logger.Warn("destroy the warm pool", "error", err)
			}
		}()
	}
	acc := access{authenticated: cfg.TLS != nil}
	if cp != nil {
		acc.seenGateway = cp.SeenGateway
	}
	var extra []prometheus.Collector
	if cfg.TLS != nil {
		extra = append(extra, cfg.TLS.Collector())
	}
	mux, err := newAgentMux(s.logs, agent, acc, logger, extra...)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Agent.Address.String())
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Agent.Address, err)
	}
	if cfg.TLS != nil {
		// Any cluster identity may connect; the routes check roles.
		ln = tls.NewListener(ln, cfg.TLS.ServerConfig(pki.AnyIdentity))
	}

	g, gctx := errgroup.WithContext(ctx)
	// Streams end with the daemon: their requests' context is gctx.
	srv := newAgentServer(gctx, mux, agentTimeouts, logger)
	s.start(g, gctx, "agent", agent.Run)
	s.start(g, gctx, "log sweeper", s.logs.Run)
	if cp != nil {
		s.start(g, gctx, "control plane", cp.Run)
	}
	s.start(g, gctx, "reload", func(ctx context.Context) error { return s.reloadLoop(ctx, cp) })
	s.start(g, gctx, "stream server", func(context.Context) error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve streams: %w", err)
		}
		return nil
	})
	// The server's own stopper: Serve returns once Shutdown began.
	g.Go(func() error {
		<-gctx.Done()
		// Drain with a fresh, bounded context.
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
		}
		return nil
	})
	logger.Info("agentd serving", "node", cfg.Agent.Node, "listen", cfg.Agent.Address.String(), "schedulers", cfg.Schedulers, "tls", cfg.TLS != nil)
	return g.Wait()
}

// start runs the loop named name on g: an error stops the daemon, and so
// does a loop that returns while the daemon is meant to run.
func (s *Server) start(g *errgroup.Group, ctx context.Context, name string, run func(context.Context) error) {
	if s.loop != nil {
		run = s.loop(name, run)
	}
	g.Go(func() error {
		err := run(ctx)
		switch {
		case err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled):
			return nil
		case err != nil:
			return fmt.Errorf("%s: %w", name, err)
		case ctx.Err() == nil:
			return fmt.Errorf("%s: %w", name, ErrLoopStopped)
		}
		return nil
	})
}

// ErrLoopStopped is returned by Run, wrapped with the loop's name, when
// one of the daemon's loops returned while the daemon was meant to run.
var ErrLoopStopped = errors.New("stopped while the daemon was running")

// reloadLoop, on every value of cfg.Reload until ctx ends, reloads the TLS
// files (when cfg.TLS is not nil) and re-reads the platform CIDRs into the
// control-plane denylist (when cp and cfg.Platform are not nil); running
// sandboxes get the new list at once. A failed reload keeps what was
// loaded.
func (s *Server) reloadLoop(ctx context.Context, cp *ControlPlane) error {
	src, logger := s.cfg.TLS, s.logger
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.cfg.Reload:
		}
		if src != nil {
			if err := src.Reload(); err != nil {
				logger.Error("reload TLS files; keeping the loaded certificate", "error", err)
			} else {
				logger.Info("tls files reloaded", "identity", src.Identity().String(), "not_after", src.NotAfter())
			}
		}
		if cp == nil || s.cfg.Platform == nil {
			continue
		}
		p, err := s.cfg.Platform()
		if err == nil {
			err = cp.SetStatic(p)
		}
		if err != nil {
			logger.Error("reload platform CIDRs; keeping the old ones", "error", err)
			continue
		}
		logger.Info("platform CIDRs reloaded", "platform", p)
	}
}
