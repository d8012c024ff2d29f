package scheduler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/raftlog"
)

// RaftConfig configures a Raft member of the scheduler.
type RaftConfig struct {
	// ID names the member, unique in the cluster (scheduler --node-id).
	ID string
	// DataDir holds raft.db (the log and stable store) and snapshots/.
	DataDir string
	// Addr is the host:port the Raft transport listens on and advertises
	// (scheduler --raft-addr). It must be reachable by the other members.
	Addr string
	// Bootstrap starts a new cluster with this member as its only voter,
	// unless DataDir already holds Raft state (then it does nothing).
	Bootstrap bool
	// TLS is the member's certificate: the transport built on Addr speaks
	// mutual TLS with members only. Nil is plain TCP (plaintext mode).
	TLS *pki.Source

	// Raft timing; see hashicorp/raft's Config.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// A snapshot is taken every SnapshotInterval when SnapshotThreshold
	// entries were logged since the last; TrailingLogs stay after it.
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64
	// SnapshotRetain is how many snapshots are kept on disk.
	SnapshotRetain int
	// TransportTimeout bounds one Raft RPC over TCP.
	TransportTimeout time.Duration
	// ApplyTimeout bounds Apply and membership changes whose context has
	// no deadline.
	ApplyTimeout time.Duration
}

// DefaultRaftConfig returns hashicorp/raft's defaults, which suit a LAN.
func DefaultRaftConfig() RaftConfig {
	d := raft.DefaultConfig()
	return RaftConfig{
		HeartbeatTimeout:   d.HeartbeatTimeout,
		ElectionTimeout:    d.ElectionTimeout,
		LeaderLeaseTimeout: d.LeaderLeaseTimeout,
		CommitTimeout:      d.CommitTimeout,
		SnapshotInterval:   d.SnapshotInterval,
		SnapshotThreshold:  d.SnapshotThreshold,
		TrailingLogs:       d.TrailingLogs,
		SnapshotRetain:     3,
		TransportTimeout:   10 * time.Second,
		ApplyTimeout:       10 * time.Second,
	}
}

// RaftDeps are what Run otherwise builds from RaftConfig: a TCP (TLS)
// transport on Addr, a BoltDB log and stable store and a file snapshot store under
// DataDir. A nil field is built; a given one stays its caller's to close.
// Tests pass raft's in-memory transport and stores.
type RaftDeps struct {
	Transport raft.Transport
	Logs      raft.LogStore
	Stable    raft.StableStore
	Snapshots raft.SnapshotStore
}

// Raft is one member of the scheduler's Raft cluster, replicating the log
// into an FSM. Build it with NewRaft, then call Run once; Apply and the
// other methods may be called from any goroutine, before Run (they wait
// for it to start) or after it returns (they fail with ErrStopped).
type Raft struct {
	cfg    RaftConfig
	fsm    *FSM
	logger *slog.Logger
	deps   RaftDeps

	// started is closed when Run has built the raft instance, or failed.
	started chan struct{}
	ran     atomic.Bool
	// wg counts the callers using the raft instance and the goroutines
	// that wait for futures on their behalf; Run waits for them after
	// shutting Raft down. Add is called only under mu with ra set, or
	// while the caller holds a count.
	wg sync.WaitGroup

	mu sync.Mutex
	ra *raft.Raft // nil before Run starts it and after it stops
}

// ErrStopped is returned by a Raft whose Run has returned or failed.
var ErrStopped = errors.New("raft member stopped")

// NewRaft validates cfg and returns a member that will replicate into fsm.
// It starts nothing; Run does.
func NewRaft(cfg RaftConfig, fsm *FSM, logger *slog.Logger, deps RaftDeps) (*Raft, error) {
	switch {
	case cfg.ID == "":
		return nil, errors.New("raft: empty member id")
	case cfg.DataDir == "" && (deps.Logs == nil || deps.Stable == nil || deps.Snapshots == nil):
		return nil, errors.New("raft: empty data dir")
	case cfg.Addr == "" && deps.Transport == nil:
		return nil, errors.New("raft: empty address")
	case fsm == nil:
		return nil, errors.New("raft: nil fsm")
	case cfg.ApplyTimeout <= 0:
		return nil, fmt.Errorf("raft: apply timeout %v: must be positive", cfg.ApplyTimeout)
	}
	return &Raft{
		cfg:     cfg,
		fsm:     fsm,
		logger:  logger.With("component", "raft", "member", cfg.ID),
		deps:    deps,
		started: make(chan struct{}),
	}, nil
}

// Run starts the member, bootstraps the cluster if configured to, and
// serves until ctx ends. Then it shuts Raft down, closes what it opened and
// returns nil; an error means the member could not start.
func (r *Raft) Run(ctx context.Context) (err error) {
	if !r.ran.CompareAndSwap(false, true) {
		return errors.New("raft: Run called twice")
	}
	var closers []io.Closer
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			if cerr := closers[i].Close(); cerr != nil && err == nil {
				err = fmt.Errorf("raft: close: %w", cerr)
			}
		}
	}()
	startedOnce := sync.OnceFunc(func() { close(r.started) })
	defer startedOnce()

	hl := raftlog.New(r.logger)
	d := r.deps
	if d.Logs == nil || d.Stable == nil || d.Snapshots == nil {
		if err := os.MkdirAll(r.cfg.DataDir, 0o700); err != nil {
			return fmt.Errorf("raft: create data dir: %w", err)
		}
	}
	if d.Logs == nil || d.Stable == nil {
		bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(r.cfg.DataDir, "raft.db")})
		if err != nil {
			return fmt.Errorf("raft: open log store: %w", err)
		}
		closers = append(closers, bolt)
		if d.Logs == nil {
			d.Logs = bolt
		}
		if d.Stable == nil {
			d.Stable = bolt
		}
	}
	if d.Snapshots == nil {
		snaps, err := raft.NewFileSnapshotStoreWithLogger(r.cfg.DataDir, r.cfg.SnapshotRetain, hl.Named("snapshots"))
		if err != nil {
			return fmt.Errorf("raft: open snapshot store: %w", err)
		}
		d.Snapshots = snaps
	}
	if d.Transport == nil {
		stream, err := listenRaft(r.cfg.Addr, r.cfg.TLS)
		if err != nil {
			return fmt.Errorf("raft: listen on %s: %w", r.cfg.Addr, err)
		}
		tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream: stream, MaxPool: 3, Timeout: r.cfg.TransportTimeout, Logger: hl.Named("transport"),
		})
		closers = append(closers, closeTransport{tr: tr, stream: stream})
		d.Transport = tr
	}

	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(r.cfg.ID)
	conf.Logger = hl
	conf.HeartbeatTimeout = r.cfg.HeartbeatTimeout
	conf.ElectionTimeout = r.cfg.ElectionTimeout
	conf.LeaderLeaseTimeout = r.cfg.LeaderLeaseTimeout
	conf.CommitTimeout = r.cfg.CommitTimeout
	conf.SnapshotInterval = r.cfg.SnapshotInterval
	conf.SnapshotThreshold = r.cfg.SnapshotThreshold
	conf.TrailingLogs = r.cfg.TrailingLogs
	if err := raft.ValidateConfig(conf); err != nil {
		return fmt.Errorf("raft: %w", err)
	}

	if r.cfg.Bootstrap {
		has, err := raft.HasExistingState(d.Logs, d.Stable, d.Snapshots)
		if err != nil {
			return fmt.Errorf("raft: read existing state: %w", err)
		}
		if !has {
			r.logger.Info("bootstrapping a new cluster", "address", d.Transport.LocalAddr())
			err := raft.BootstrapCluster(conf, d.Logs, d.Stable, d.Snapshots, d.Transport, raft.Configuration{
				Servers: []raft.Server{{Suffrage: raft.Voter, ID: conf.LocalID, Address: d.Transport.LocalAddr()}},
			})
			if err != nil {
				return fmt.Errorf("raft: bootstrap: %w", err)
			}
		}
	}

	ra, err := raft.NewRaft(conf, r.fsm, d.Logs, d.Stable, d.Snapshots, d.Transport)
	if err != nil {
		return fmt.Errorf("raft: start: %w", err)
	}
	r.mu.Lock()
	r.ra = ra
	r.mu.Unlock()
	startedOnce()
	r.logger.Info("raft member started", "address", d.Transport.LocalAddr())

	<-ctx.Done()

	r.mu.Lock()
	r.ra = nil
	r.mu.Unlock()
	// Shutdown resolves every pending future, so the waiters in wg end.
	if err := ra.Shutdown().Error(); err != nil {
		r.logger.Warn("raft shutdown", "error", err)
	}
	r.wg.Wait()
	r.logger.Info("raft member stopped")
	return nil
}

// acquire returns the running raft instance, waiting for Run to start it,
// and holds it running: Run does not return before release is called.
func (r *Raft) acquire(ctx context.Context) (ra *raft.Raft, release func(), err error) {
	select {
	case <-r.started:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ra == nil {
		return nil, nil, ErrStopped
	}
	r.wg.Add(1)
	return r.ra, r.wg.Done, nil
}
