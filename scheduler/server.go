package scheduler

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/blob"
	"github.com/rodon-compute/rodon/internal/envseal"
	"github.com/rodon-compute/rodon/internal/pki"
)

// Config configures a scheduler member (`scheduler serve`).
type Config struct {
	// ID names the member in the Raft cluster (--node-id).
	ID string
	// DataDir holds the Raft log, stable store and snapshots (--data-dir).
	DataDir string
	// RaftAddr is the host:port of the Raft transport, which the other
	// members dial (--raft-addr).
	RaftAddr string
	// HTTPAddr is the host:port the HTTP API listens on; the other members
	// forward writes to it, so its host must be a specific address
	// (--http-addr).
	HTTPAddr string
	// Bootstrap starts a new cluster with this member as its only voter,
	// unless DataDir already holds Raft state (--bootstrap).
	Bootstrap bool
	// Join lists HTTP addresses of existing members (HOST:PORT, which is
	// https with TLS and http without, or URLs); the member asks them to
	// add it as a voter until one leader accepts (--join).
	Join []string
	// NodeTTL is how long a node may stay silent before the leader
	// declares it down (--node-ttl).
	NodeTTL time.Duration
	// QueueTimeout is how long a step may wait in the queue before it
	// expires (--queue-timeout).
	QueueTimeout time.Duration
	// StartTimeout is how long a placed step may wait for its node to
	// report it starting, and CreateTimeout how long after its placement
	// it may take to be running; past either the attempt is taken back: an
	// idempotent step is queued again, any other fails (--start-timeout,
	// --create-timeout).
	StartTimeout  time.Duration
	CreateTimeout time.Duration
	// StepRetention is how long a terminal step stays in the replicated
	// state after it ended; then the leader compacts it out
	// (--step-retention).
	StepRetention time.Duration
	// MaxWait caps the wait of a long poll (?wait=).
	MaxWait time.Duration
	// HTTP bounds the HTTP exchanges, per route (http_timeouts.go).
	HTTP HTTPTimeouts
	// ShutdownTimeout bounds the wait for requests in flight when Run's
	// context ends.
	ShutdownTimeout time.Duration
	// Raft holds Raft's timing; its ID, DataDir, Addr, Bootstrap and TLS
	// are taken from the fields above.
	Raft RaftConfig
	// TLS is the member's certificate (identity member/ID) and the cluster
	// CA: the HTTP API and the Raft transport speak mutual TLS 1.3 only,
	// and every request is authorized by its caller's identity (authz.go).
	// Nil is plaintext mode, for tests of one component: no TLS and no
	// authentication, which New accepts only when every address is on
	// loopback.
	TLS *pki.Source
	// Reload: every value received re-reads the TLS files (main sends
	// SIGHUP here). Nil: no reloads (TLS still re-reads changed files at
	// handshakes).
	Reload <-chan os.Signal
	// EnvKey seals step environment values before they are replicated and
	// opens them for the agents that run the steps (--env-key,
	// internal/envseal). Every member of a cluster needs the same key.
	// Nil makes New generate an ephemeral key, which it logs: fit only for
	// a single member whose steps do not outlive it.
	EnvKey *envseal.Key
	// BlobStore is the URL of the blob store of the workspaces' contents
	// (--blob-store, blob.Open: local, local:///PATH or s3://...), which
	// New opens: only the scheduler holds one. A local store's URLs point
	// at this member's HTTPAddr, where it serves them (/v1/blobs/). Empty:
	// no store; the workspace routes answer 503.
	BlobStore string
	// Blobs, if set, is the store in place of BlobStore's (tests).
	Blobs blob.Store
	// Testing is what tests inject in place of the real thing; its zero
	// value is what `scheduler serve` runs.
	Testing Testing
}

// Testing is what a test may inject into a member (scheduler/schedulertest
// and the scheduler's own tests). Zero fields are the real thing.
type Testing struct {
	// Raft replaces what Run builds for Raft: raft's in-memory transport
	// and stores. RaftAddr stays the address the member advertises: give
	// it the transport's.
	Raft RaftDeps
	// Wrap wraps the HTTP API as served, to count requests or fail some.
	Wrap func(http.Handler) http.Handler
	// Now is the member's clock (records, audit entries, the leader's
	// decisions); nil is time.Now in UTC.
	Now func() time.Time
}

// Defaults of Config.
const (
	DefaultNodeTTL       = 10 * time.Second
	DefaultQueueTimeout  = time.Hour
	DefaultStartTimeout  = 2 * time.Minute
	DefaultCreateTimeout = 10 * time.Minute
	// The largest bounds New accepts: past them a step would hold its
	// reservation, or its queue slot, for longer than anyone waits.
	MaxQueueTimeout  = 7 * 24 * time.Hour
	MaxStartTimeout  = time.Hour
	MaxCreateTimeout = 24 * time.Hour
	// DefaultStepRetention is SPEC's 7 days; MaxStepRetention bounds the
	// replicated state's growth by ended steps.
	DefaultStepRetention = 7 * 24 * time.Hour
	MaxStepRetention     = 90 * 24 * time.Hour
	// defaultWait is the wait of a long poll that names none.
	defaultWait = 30 * time.Second
)

// DefaultConfig returns the configuration of `scheduler serve` without
// flags: the identity and addresses are left to the caller.
func DefaultConfig() Config {
	return Config{
		NodeTTL:         DefaultNodeTTL,
		QueueTimeout:    DefaultQueueTimeout,
		StartTimeout:    DefaultStartTimeout,
		CreateTimeout:   DefaultCreateTimeout,
		StepRetention:   DefaultStepRetention,
		MaxWait:         5 * time.Minute,
		HTTP:            DefaultHTTPTimeouts(),
		ShutdownTimeout: 10 * time.Second,
		Raft:            DefaultRaftConfig(),
		BlobStore:       "local",
	}
}

// Server is one scheduler member: a Raft member replicating the FSM, the
// HTTP API of docs/PROTOCOL.md, and, while it leads, the leader loops
// (placement, node TTL, drain deadlines, queue expiry, start timeouts,
// compaction). Build it with New
// and call Run once.
type Server struct {
	cfg     Config
	logger  *slog.Logger
	fsm     *FSM
	raft    *Raft
	metrics *metrics
	handler http.Handler
	// fwd carries forwarded requests, joins and member health checks; with
	// TLS it presents the member's certificate and accepts only members.
	fwd *http.Client
	// envKey seals and opens step environment values (env.go).
	envKey *envseal.Key
	// blobs is cfg.Blobs; manifests caches parsed manifests; wsLocks
	// serialises each workspace's commits while this member leads.
	blobs     blob.Store
	ownBlobs  bool
	manifests *manifestCache
	wsLocks   workspaceLocks
	// now is the leader's clock; tests may replace it before Run.
	now func() time.Time
	// loops counts the leader loops running.
	loops atomic.Int32
	// batcher is the group commit of this member's current term as the
	// leader (lead sets and clears it); nil while it does not lead.
	batcher atomic.Pointer[batcher]
	// beats is the memory of heartbeats of this member's current term as
	// the leader (lead sets and clears it); nil while it does not lead.
	beats atomic.Pointer[heartbeats]
	// patterns are the routes served, in order (each has its accessTable
	// row).
	patterns []string

	mu sync.Mutex
	// pending holds, while this member leads, why queued steps could not
	// be placed (the placement loop's last CapacityError); the queue
	// expiry loop quotes it.
	pending map[cluster.StepID]string
}

// New validates cfg and wires a member. It starts nothing: Run does.
func New(cfg Config, logger *slog.Logger) (*Server, error) {
	switch {
	case cfg.ID == "":
		return nil, errors.New("scheduler: empty member id")
	case cfg.DataDir == "":
		return nil, errors.New("scheduler: empty data dir")
	case cfg.Bootstrap && len(cfg.Join) > 0:
		return nil, errors.New("scheduler: bootstrap and join are exclusive: bootstrap the first member, join the others to it")
	case cfg.NodeTTL <= 0:
		return nil, fmt.Errorf("scheduler: node ttl %v: must be positive", cfg.NodeTTL)
	case cfg.QueueTimeout <= 0 || cfg.QueueTimeout > MaxQueueTimeout:
		return nil, fmt.Errorf("scheduler: queue timeout %v: want more than 0, at most %v", cfg.QueueTimeout, MaxQueueTimeout)
	case cfg.StartTimeout <= 0 || cfg.StartTimeout > MaxStartTimeout:
		return nil, fmt.Errorf("scheduler: start timeout %v: want more than 0, at most %v", cfg.StartTimeout, MaxStartTimeout)
	case cfg.StepRetention <= 0 || cfg.StepRetention > MaxStepRetention:
		return nil, fmt.Errorf("scheduler: step retention %v: want more than 0, at most %v", cfg.StepRetention, MaxStepRetention)
	case cfg.CreateTimeout < cfg.StartTimeout || cfg.CreateTimeout > MaxCreateTimeout:
		return nil, fmt.Errorf("scheduler: create timeout %v: want at least the start timeout %v, at most %v", cfg.CreateTimeout, cfg.StartTimeout, MaxCreateTimeout)
	case cfg.MaxWait <= 0:
		return nil, fmt.Errorf("scheduler: max wait %v: must be positive", cfg.MaxWait)
	}
	if err := cfg.HTTP.validate(); err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	if err := checkHostPort(cfg.RaftAddr); err != nil {
		return nil, fmt.Errorf("scheduler: raft address: %w", err)
	}
	if err := checkHostPort(cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("scheduler: http address: %w", err)
	}
	if err := checkTLS(cfg); err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	envKey := cfg.EnvKey
	if envKey == nil {
		var err error
		if envKey, err = envseal.Generate(); err != nil {
			return nil, fmt.Errorf("scheduler: %w", err)
		}
		logger.Warn("no env key given: sealing step environment values with an ephemeral key; "+
			"another member, or this one after a restart, cannot open them (pass --env-key)", "member", cfg.ID)
	}
	blobs, ownBlobs := cfg.Blobs, false
	if blobs == nil && cfg.BlobStore != "" {
		scheme := "https"
		if cfg.TLS == nil {
			scheme = "http"
		}
		// An S3 store's bucket is looked up (and made) here: bounded.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var err error
		if blobs, err = blob.Open(ctx, cfg.BlobStore, cfg.DataDir, scheme+"://"+cfg.HTTPAddr, logger); err != nil {
			return nil, fmt.Errorf("scheduler: --blob-store %s: %w", cfg.BlobStore, err)
		}
		ownBlobs = true
	}
	rc := cfg.Raft
	rc.ID, rc.DataDir, rc.Addr, rc.Bootstrap, rc.TLS = cfg.ID, cfg.DataDir, cfg.RaftAddr, cfg.Bootstrap, cfg.TLS
	fsm := NewFSM(logger.With("member", cfg.ID))
	r, err := NewRaft(rc, fsm, logger, cfg.Testing.Raft) // it adds the member itself
	if err != nil {
		if ownBlobs {
			blobs.Close()
		}
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	s := &Server{
		cfg:    cfg,
		logger: logger.With("component", "server", "member", cfg.ID),
		fsm:    fsm,
		raft:   r,
		fwd:    &http.Client{Transport: memberTransport(cfg.TLS)},
		envKey: envKey,
		now:    func() time.Time { return time.Now().UTC() },

		blobs:     blobs,
		ownBlobs:  ownBlobs,
		manifests: newManifestCache(manifestCacheEntries),
	}
	if cfg.Testing.Now != nil {
		s.now = cfg.Testing.Now
	}
	s.metrics = newMetrics(s)
	s.handler = s.routes()
	if cfg.Testing.Wrap != nil {
		s.handler = cfg.Testing.Wrap(s.handler)
	}
	return s, nil
}

// checkHostPort checks that addr is host:port with a specific host, one
// that other members can dial.
func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: want HOST:PORT: %w", addr, err)
	}
	if port == "" {
		return fmt.Errorf("%q: no port", addr)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%q: other members dial this address: give a specific host, not a wildcard", addr)
	}
	return nil
}

// Handler returns the member's HTTP API, for tests that serve it
// themselves.
func (s *Server) Handler() http.Handler { return s.handler }

// FSM returns the member's state machine.
func (s *Server) FSM() *FSM { return s.fsm }

// Raft returns the member's Raft component.
func (s *Server) Raft() *Raft { return s.raft }

// Run serves until ctx ends: it starts Raft, listens on HTTPAddr, joins
// the cluster if configured to, and runs the leader loops whenever this
// member leads. When ctx ends it stops taking requests, waits up to
// ShutdownTimeout for those in flight (long polls answer at once), stops
// the leader loops and then Raft, and returns nil. An error means the
// member could not start or Raft failed.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("scheduler: listen on %s: %w", s.cfg.HTTPAddr, err)
	}
	defer ln.Close()
	if s.cfg.TLS != nil {
		// Every identity of the cluster CA may connect; the route table
		// decides what it may do. http.Server bounds the handshake with
		// ReadHeaderTimeout.
		ln = tls.NewListener(ln, s.cfg.TLS.ServerConfig(pki.AnyIdentity))
	}

	// Raft outlives everything else: writes in flight and the leader loops
	// need it until they end.
	raftCtx, stopRaft := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRaft()
	raftDone := make(chan error, 1)
	go func() { raftDone <- s.raft.Run(raftCtx) }()

	g, gctx := errgroup.WithContext(ctx)
	// The read and write deadlines are the route's (withDeadlines): a
	// long poll lasts minutes, a snapshot may be 256 MiB.
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.HTTP.Header,
		IdleTimeout:       s.cfg.HTTP.Idle,
		// Handlers see gctx end when Run stops: long polls answer at once.
		BaseContext: func(net.Listener) context.Context { return gctx },
		ErrorLog:    slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
	}
	g.Go(func() error {
		s.logger.Info("serving http", "address", ln.Addr().String(), "tls", s.cfg.TLS != nil)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("scheduler: serve http: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			s.logger.Warn("http shutdown", "error", err)
			srv.Close()
		}
		return nil
	})
	g.Go(func() error { return s.watchLeadership(gctx) })
	g.Go(func() error {
		select {
		case err := <-raftDone:
			raftDone <- err
			if err == nil {
				err = errors.New("scheduler: raft stopped unexpectedly")
			}
			return err
		case <-gctx.Done():
			return nil
		}
	})
	if len(s.cfg.Join) > 0 {
		g.Go(func() error { s.join(gctx); return nil })
	}
	g.Go(func() error { s.reloadLoop(gctx); return nil })
	err = g.Wait()
	stopRaft()
	if rerr := <-raftDone; err == nil {
		err = rerr
	}
	s.fwd.CloseIdleConnections()
	if s.ownBlobs {
		s.blobs.Close()
	}
	s.logger.Info("scheduler member stopped")
	return err
}
