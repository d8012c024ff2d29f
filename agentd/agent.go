package agentd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rodon-compute/rodon/agentd/blobcache"
	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/ticker"
)

// Scheduler is what the agent needs of the scheduler's agent API (see
// docs/PROTOCOL.md); scheduler/client implements it.
type Scheduler interface {
	Register(ctx context.Context, req cluster.RegisterNode) (cluster.Node, error)
	Heartbeat(ctx context.Context, req cluster.Heartbeat) (cluster.HeartbeatResult, error)
	Assignments(ctx context.Context, node cluster.NodeID, index uint64, wait time.Duration) (uint64, []cluster.Step, error)
	StepPhase(ctx context.Context, req cluster.StepPhase) error
	StepEvents(ctx context.Context, req cluster.StepEvents) error
	StepExit(ctx context.Context, req cluster.StepExit) error
	ConfirmCancel(ctx context.Context, req cluster.ConfirmCancel) error
	// Uploads answers PUT URLs for the blobs of a workspace result the
	// store lacks (docs/design/workspaces.md "Results").
	Uploads(ctx context.Context, req cluster.UploadsRequest) (cluster.UploadsResponse, error)
}

// assignmentChanger is the optional capability of a Scheduler to answer
// the assignments long poll with only the steps changed after index
// (docs/PROTOCOL.md, "Assignments"); scheduler/client has it. When
// changes is false, steps are every live step, as Assignments answers,
// and live is nil.
type assignmentChanger interface {
	AssignmentChanges(ctx context.Context, node cluster.NodeID, index uint64, wait time.Duration) (next uint64, steps []cluster.Step, live []cluster.StepAttempt, changes bool, err error)
}

// AgentConfig configures `agentd serve`.
type AgentConfig struct {
	Node cluster.NodeID
	// Address is where this agent serves step streams, as the scheduler
	// tells clients.
	Address  netip.AddrPort
	Capacity cluster.Resources
	Labels   map[string]string
	// MaxStarting caps the steps starting at once on this node.
	MaxStarting int
	// Heartbeat is the interval between heartbeats; the scheduler's node
	// TTL must be a few of them.
	Heartbeat time.Duration
	// ProbeImage is the canary image of the capability probe.
	ProbeImage string
	// Reprobe is how long a node the probe found degraded waits before
	// the probe runs again; each failure doubles it, up to maxReprobe.
	// Zero is DefaultReprobe; more than maxReprobe waits maxReprobe. A
	// node the probe found ready is not probed again.
	Reprobe time.Duration
	// BlobCacheBytes bounds the node's blob cache, DATA-DIR/blob-cache
	// (agentd serve --blob-cache-size; blobcache.DefaultMaxBytes if zero).
	BlobCacheBytes int64
	// BlobClient fetches and puts blobs by their presigned URLs (nil:
	// http.DefaultClient): the scheduler's own blob URLs are served on
	// its mutual-TLS listener.
	BlobClient *http.Client
	// SecretsClient fetches steps' secrets from the gateway's cluster
	// listener: mutual TLS with this node's agent certificate, accepting
	// only a gateway. Nil (plaintext mode): a step with secrets fails
	// with cause secrets_unavailable.
	SecretsClient *http.Client
	// PollWait is how long one assignments long poll may block.
	PollWait time.Duration
	// Degraded are reasons known before the probe that make the node
	// degraded, such as an egress filter that could not be loaded.
	Degraded []string
	// MaxLimits are the largest step limits this node accepts (agentd
	// serve --max-pids, --max-timeout, --max-workspace, --max-output),
	// registered with the scheduler; an assignment past them fails with
	// the limit named. Zero fields are cluster.MaxLimits'.
	MaxLimits cluster.Limits
}

// DefaultAgentConfig returns the defaults of `agentd serve`.
func DefaultAgentConfig() AgentConfig {
	return AgentConfig{
		MaxStarting:    cluster.DefaultMaxStarting,
		Heartbeat:      2 * time.Second,
		ProbeImage:     "rodon.local/base:latest",
		Reprobe:        DefaultReprobe,
		PollWait:       30 * time.Second,
		MaxLimits:      cluster.MaxLimits,
		BlobCacheBytes: blobcache.DefaultMaxBytes,
	}
}

// Agent is one node's agent: it registers, heartbeats, receives its
// assignments by long poll, runs each step in a sandbox through the
// Runtime, streams output into the log store, and reports phases and
// exits. Create it with NewAgent and run it with Run.
type Agent struct {
	cfg     AgentConfig
	rt      *Runtime
	sched   Scheduler
	logs    *logstore.Store
	logger  *slog.Logger
	metrics *Metrics
	// cache is the node's blob cache (DATA-DIR/blob-cache).
	cache *blobcache.Cache
	// pool, if set before Run, is the node's warm pool: Run runs it once
	// the sandboxes of an earlier agent are dealt with; its owner closes
	// it after Run returned.
	pool *Pool

	// probed is the health the capability probe last found, set by the
	// probe loop. health adds the reasons known before it (cfg.Degraded)
	// and what the disk and pool checks find at each heartbeat; it is set
	// by Run's goroutine only.
	probeMu sync.Mutex
	probed  cluster.Health
	health  cluster.Health
	// seenIndex is the index of the last assignments answer, sent with
	// each heartbeat (cluster.Heartbeat.SeenIndex).
	seenIndex atomic.Uint64

	mu sync.Mutex
	// steps are the attempts this agent runs, by step id.
	steps map[cluster.StepID]*stepRun
	// done holds attempts that ran here, so that none runs twice.
	done map[cluster.StepAttempt]bool
	wg   sync.WaitGroup
}

// NewAgent wires an agent; it starts nothing.
func NewAgent(cfg AgentConfig, rt *Runtime, sched Scheduler, logs *logstore.Store, logger *slog.Logger) (*Agent, error) {
	switch {
	case cluster.ValidateNodeID(cfg.Node) != nil:
		return nil, fmt.Errorf("agent config: %w", cluster.ValidateNodeID(cfg.Node))
	case !cfg.Address.IsValid():
		return nil, errors.New("agent config: no stream address")
	case cfg.Heartbeat <= 0:
		return nil, fmt.Errorf("agent config: heartbeat interval %v must be positive", cfg.Heartbeat)
	case cfg.BlobCacheBytes < 0:
		return nil, fmt.Errorf("agent config: blob cache size %d: must not be negative", cfg.BlobCacheBytes)
	case cfg.Reprobe < 0:
		return nil, fmt.Errorf("agent config: reprobe interval %v must not be negative", cfg.Reprobe)
	}
	if cfg.Reprobe == 0 {
		cfg.Reprobe = DefaultReprobe
	}
	cfg.MaxLimits = nodeMaxLimits(cfg.MaxLimits)
	if err := cfg.MaxLimits.Check(cluster.MaxLimits); err != nil {
		return nil, fmt.Errorf("agent config: node maximum %w", err)
	}
	metrics := NewMetrics()
	var cacheDir string
	if rt != nil { // nil only in tests of the agent's HTTP API, never Run
		cacheDir = filepath.Join(rt.cfg.DataDir, "blob-cache")
	}
	cache, err := blobcache.New(blobcache.Config{
		Dir: cacheDir, MaxBytes: cfg.BlobCacheBytes,
		Client: cfg.BlobClient, Metrics: metrics.blobs,
	}, logger)
	if err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	return &Agent{
		cfg:     cfg,
		rt:      rt,
		sched:   sched,
		logs:    logs,
		logger:  logger.With("component", "agent", "node", cfg.Node),
		metrics: metrics,
		cache:   cache,
		steps:   map[cluster.StepID]*stepRun{},
		done:    map[cluster.StepAttempt]bool{},
	}, nil
}

// Run probes the node, registers it, and then heartbeats and runs its
// assignments until ctx ends. On return no goroutine of the agent is left;
// sandboxes of running steps are left to containerd, and a restarted agent
// finds them again.
func (a *Agent) Run(ctx context.Context) error {
	if n, err := a.rt.SweepLeases(ctx); err != nil {
		a.logger.Warn("sweep create leases", "error", err)
	} else if n > 0 {
		a.logger.Info("released snapshots of sandboxes an earlier agent never finished creating", "leases", n)
	}
	if removed, err := a.rt.SweepNetworks(ctx); err != nil {
		a.logger.Warn("sweep sandbox networks", "error", err)
	} else if len(removed) > 0 {
		a.logger.Info("removed sandbox networks left by an earlier agent", "removed", removed)
	}
	if removed, err := a.rt.SweepWorkspaces(ctx); err != nil {
		a.logger.Warn("sweep workspace filesystems", "error", err)
	} else if len(removed) > 0 {
		a.logger.Info("removed workspace filesystems of sandboxes an earlier agent did not finish destroying", "removed", removed)
	}
	if err := a.cache.Load(); err != nil {
		return err
	}
	a.setProbed(a.rt.probe(ctx, a.cfg.ProbeImage, a.pool != nil)) // through a claim with a pool
	a.checkHealth()
	if err := a.register(ctx); err != nil {
		return err
	}
	a.sweepTrees(a.adoptOrphans(ctx))
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); a.heartbeatLoop(ctx) }()
	go func() { defer wg.Done(); a.assignmentLoop(ctx) }()
	go func() { defer wg.Done(); a.reprobeLoop(ctx) }()
	if a.pool != nil {
		// After the sweeps: they keep only what containerd has.
		wg.Add(1)
		go func() { defer wg.Done(); a.pool.Run(ctx) }()
	}
	wg.Wait()
	a.wg.Wait()
	return nil
}

func (a *Agent) register(ctx context.Context) error {
	req := cluster.RegisterNode{
		Node: a.cfg.Node, Address: a.cfg.Address, Capacity: a.cfg.Capacity,
		Labels: a.cfg.Labels, Health: a.health, MaxStarting: a.cfg.MaxStarting,
		MaxLimits: a.cfg.MaxLimits,
	}
	for {
		_, err := a.sched.Register(ctx, req)
		if err == nil {
			a.logger.Info("registered", "state", a.health.State)
			return nil
		}
		a.logger.Warn("register with the scheduler", "error", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(a.cfg.Heartbeat):
		}
	}
}

// checkHealth sets the node's health: the probe's, degraded further by
// each of its file systems (data directory with the blob cache, output logs)
// below its free space or inode threshold. It logs every change.
func (a *Agent) checkHealth() {
	h := a.probeHealth()
	if len(a.cfg.Degraded) > 0 {
		h = cluster.Health{State: cluster.NodeDegraded, Reasons: append(slices.Clone(a.cfg.Degraded), h.Reasons...)}
	}
	if disk := a.rt.DiskReasons(a.logs.Dir()); len(disk) > 0 {
		h = cluster.Health{State: cluster.NodeDegraded, Reasons: append(slices.Clone(h.Reasons), disk...)}
	}
	if pool := a.pool.Health(); len(pool) > 0 {
		h = cluster.Health{State: cluster.NodeDegraded, Reasons: append(slices.Clone(h.Reasons), pool...)}
	}
	if h.State == a.health.State && slices.Equal(h.Reasons, a.health.Reasons) {
		return
	}
	a.health = h
	if h.State != cluster.NodeReady {
		a.logger.Warn("node degraded", "reasons", h.Reasons)
		a.metrics.degraded.Set(1)
	} else {
		a.logger.Info("node ready")
		a.metrics.degraded.Set(0)
	}
}

// DefaultReprobe is the first wait before a degraded node's probe runs
// again; maxReprobe bounds the doubled waits after it.
const (
	DefaultReprobe = 15 * time.Second
	maxReprobe     = 5 * time.Minute
)

func (a *Agent) probeHealth() cluster.Health {
	a.probeMu.Lock()
	defer a.probeMu.Unlock()
	return a.probed
}

func (a *Agent) setProbed(h cluster.Health) {
	a.probeMu.Lock()
	defer a.probeMu.Unlock()
	a.probed = h
}

// reprobeLoop runs the capability probe again while it finds the node
// degraded, waiting cfg.Reprobe and then twice as long after each failure
// (up to maxReprobe), so that a canary that failed once (containerd slow
// at boot, a sandbox removed under it, a control fixed since) does not
// keep the node out of service until agentd restarts. The heartbeat picks
// up each finding. Once the probe finds the node ready, it stops.
func (a *Agent) reprobeLoop(ctx context.Context) {
	wait := min(a.cfg.Reprobe, maxReprobe)
	for a.probeHealth().State != cluster.NodeReady {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		h := a.rt.probe(ctx, a.cfg.ProbeImage, a.pool != nil)
		if ctx.Err() != nil {
			return // a probe cut short says nothing of the node
		}
		a.setProbed(h)
		wait = min(2*wait, maxReprobe)
		if h.State != cluster.NodeReady {
			a.logger.Warn("capability probe still fails", "reasons", h.Reasons, "next_in", wait)
		} else {
			a.logger.Info("capability probe passes again")
		}
	}
}

func (a *Agent) heartbeatLoop(ctx context.Context) {
	ticker.Every(ctx, a.cfg.Heartbeat, func() bool {
		a.checkHealth()
		// running before the index: a step it lists came from an answer
		// at or below the index read after it.
		running := a.running()
		res, err := a.sched.Heartbeat(ctx, cluster.Heartbeat{Node: a.cfg.Node, Health: a.health, Running: running,
			SeenIndex: a.seenIndex.Load(), Pool: a.pool.Status()})
		if err != nil {
			if ctx.Err() == nil {
				a.logger.Warn("heartbeat", "error", err)
			}
			return true
		}
		for _, u := range res.Unwanted {
			a.abandon(u)
		}
		return true
	})
}

// running lists the attempts this agent still has a sandbox for, but
// those whose exit the scheduler has (they are only being cleaned up).
func (a *Agent) running() []cluster.StepAttempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]cluster.StepAttempt, 0, len(a.steps))
	for _, r := range a.steps {
		if r.ended.Load() {
			continue
		}
		out = append(out, cluster.StepAttempt{Step: r.id, Attempt: r.attempt})
	}
	return out
}

// assignmentLoop long-polls the node's assignments until ctx ends and
// acts on each answer: it starts the new attempts, cancels those the
// scheduler asks, and forgets the finished ones no longer assigned. With
// a Scheduler that answers changes, an answer holds only the steps
// changed since the previous one, and the live attempts.
func (a *Agent) assignmentLoop(ctx context.Context) {
	changer, _ := a.sched.(assignmentChanger)
	var index uint64
	for ctx.Err() == nil {
		var (
			next    uint64
			steps   []cluster.Step
			live    []cluster.StepAttempt
			changes bool
			err     error
		)
		if changer != nil {
			next, steps, live, changes, err = changer.AssignmentChanges(ctx, a.cfg.Node, index, a.cfg.PollWait)
		} else {
			next, steps, err = a.sched.Assignments(ctx, a.cfg.Node, index, a.cfg.PollWait)
		}
		if err != nil {
			if ctx.Err() == nil {
				a.logger.Warn("watch assignments", "error", err)
				select {
				case <-ctx.Done():
				case <-time.After(a.cfg.Heartbeat):
				}
			}
			continue
		}
		index = next
		a.seenIndex.Store(next)
		for _, st := range steps {
			a.apply(ctx, st)
		}
		if !changes {
			live = make([]cluster.StepAttempt, len(steps))
			for i, st := range steps {
				live[i] = cluster.StepAttempt{Step: st.ID, Attempt: st.Attempts}
			}
		}
		a.pruneDone(live)
	}
}

// apply acts on one assigned step: starts it if new, cancels it if the
// scheduler asks.
func (a *Agent) apply(ctx context.Context, st cluster.Step) {
	a.mu.Lock()
	r, ok := a.steps[st.ID]
	key := cluster.StepAttempt{Step: st.ID, Attempt: st.Attempts}
	if !ok && st.State == cluster.StatePlaced && st.Node == a.cfg.Node && !a.done[key] {
		a.done[key] = true
		r = newStepRun(a, st)
		a.steps[st.ID] = r
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			r.run(ctx)
		}()
	}
	a.mu.Unlock()
	if r != nil && r.attempt == st.Attempts && st.Cancel.Pending() {
		r.cancel()
	}
}

// Metrics returns the agent's metrics, for registration.
func (a *Agent) Metrics() *Metrics { return a.metrics }

// pruneDone forgets finished attempts the scheduler no longer assigns
// here (assigned are the live attempts): an attempt leaves the
// assignments only once its end is recorded, and it never comes back, so
// done stays as small as the assignments.
func (a *Agent) pruneDone(assigned []cluster.StepAttempt) {
	keep := make(map[cluster.StepAttempt]bool, len(assigned))
	for _, k := range assigned {
		keep[k] = true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for k := range a.done {
		if _, running := a.steps[k.Step]; !keep[k] && !running {
			delete(a.done, k)
		}
	}
}

// abandon kills and cleans up an attempt the scheduler no longer wants,
// without reporting on it.
func (a *Agent) abandon(u cluster.StepAttempt) {
	a.mu.Lock()
	r, ok := a.steps[u.Step]
	a.mu.Unlock()
	if ok && r.attempt == u.Attempt && !r.ended.Load() { // an ended one is being cleaned up already
		a.logger.Info("scheduler no longer wants step; stopping it", "step", u.Step, "attempt", u.Attempt)
		r.abandon()
	}
}

func (a *Agent) forget(id cluster.StepID) {
	a.mu.Lock()
	delete(a.steps, id)
	a.mu.Unlock()
}

// ErrNoSuchStep is returned by Input and Resize for a step this agent does
// not run now.
var ErrNoSuchStep = errors.New("step not running on this node")

// inputStartWait is how long input for a step this agent is still starting
// waits for its process (a page sends a resize as soon as it connects).
const inputStartWait = 10 * time.Second

func (a *Agent) sandboxOf(id cluster.StepID) (*Sandbox, error) {
	a.mu.Lock()
	r, ok := a.steps[id]
	a.mu.Unlock()
	if !ok {
		return nil, ErrNoSuchStep
	}
	select {
	case <-r.started:
	case <-r.stop:
		return nil, ErrNotInteractive
	case <-time.After(inputStartWait):
		return nil, fmt.Errorf("%w: the step did not start within %v", ErrNotInteractive, inputStartWait)
	}
	sb := r.sandbox()
	if sb == nil {
		return nil, ErrNoSuchStep
	}
	return sb, nil
}

// Input writes data to the terminal of a running TTY step.
func (a *Agent) Input(id cluster.StepID, data []byte) error {
	sb, err := a.sandboxOf(id)
	if err != nil {
		return err
	}
	return sb.Input(data)
}

// Resize sets the terminal size of a running TTY step.
func (a *Agent) Resize(ctx context.Context, id cluster.StepID, cols, rows int) error {
	sb, err := a.sandboxOf(id)
	if err != nil {
		return err
	}
	return sb.Resize(ctx, cols, rows)
}

func (a *Agent) blobClient() *http.Client {
	if a.cfg.BlobClient == nil {
		return http.DefaultClient
	}
	return a.cfg.BlobClient
}

// sweepTrees removes the attempts' trees an earlier agent left, but those
// of the attempts adopted (by sandbox id).
func (a *Agent) sweepTrees(adopted map[string]bool) {
	dir := treesDir(a.rt.cfg)
	ents, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			a.logger.Warn("sweep the attempts' trees", "error", err)
		}
		return
	}
	var removed []string
	for _, e := range ents {
		if adopted[e.Name()] {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			a.logger.Warn("remove an earlier agent's tree", "tree", e.Name(), "error", err)
			continue
		}
		removed = append(removed, e.Name())
	}
	if len(removed) > 0 {
		a.logger.Info("removed the trees of attempts an earlier agent did not finish", "removed", removed)
	}
}
