// Package agentd is the node agent: it runs each step in a gVisor sandbox
// created for it and destroyed after it, through containerd and a runsc shim.
//
// The runtime model (see ../shared/RUNTIME-NOTES.md for why): every step gets
// a pod sandbox whose own process is a long-lived pause, and the step's
// command runs in it as a task exec. The step is never the sandbox's init,
// so gVisor's fast-exit race cannot misreport its exit code, and the pod is
// destroyed with everything the step left behind once the step has exited.
//
// Every sandbox's /workspace is a filesystem of its own, of the step's
// workspace size (quota.go), and the step's limits always have a value
// (cluster.DefaultLimits for what a step leaves zero).
//
// Call order on a Runtime: New, then Create for a Sandbox, Sandbox.Start,
// Sandbox.Wait, Sandbox.Quiesce (nothing of the sandbox runs any more),
// Sandbox.ReadBack of the workspace, and always Sandbox.Destroy. The exit
// is reported only after the read-back. Runtime.Run does all of it for one
// step. Orphans finds sandboxes left by an agent that died.
//
// A Pool (pool.go, agentd serve --warm-pool-memory) keeps sandboxes
// prepared ahead of demand, up to their running pause and for no step.
// A step takes one (Pool.Take) and Runtime.Claim binds it, which Create
// does at once for a cold sandbox; from there the call order is the same,
// and the sandbox is destroyed after its one step.
//
// Server is the whole node daemon (`agentd serve`): DefaultConfig, New,
// then Run, which runs the Agent, its HTTP server, the log sweeper, the
// control-plane denylist and the reloads on one errgroup until its context
// ends or one of them fails (server.go).
package agentd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/rodon-compute/rodon/netpolicy"
)

// Labels on every container agentd creates. They are how a restarted agent
// finds its sandboxes again.
const (
	LabelManaged   = "rodon.managed"
	LabelStep      = "rodon.step"
	LabelOwner     = "rodon.owner"
	LabelWorkspace = "rodon.workspace"
	LabelAttempt   = "rodon.attempt"
	LabelNode      = "rodon.node"
	// LabelWorkspaceBytes is the size of the sandbox's workspace
	// filesystem, for a restarted agent's reservations and read-back.
	LabelWorkspaceBytes = "rodon.workspace_bytes"
	// LabelNetwork is "egress" on a sandbox with its own network
	// (netpolicy), so that a restarted agent attaches its filter again or
	// tears the network down.
	LabelNetwork = "rodon.network"
	// LabelWorkspaceReadOnly is "true" on a sandbox whose workspace is
	// read-only (Step.WorkspaceReadOnly): found again, it is not read back.
	LabelWorkspaceReadOnly = "rodon.workspace_read_only"
)

// RuntimeConfig configures the containerd runtime layer.
type RuntimeConfig struct {
	// Address is containerd's socket.
	Address string
	// Namespace is the containerd namespace of all Rodon objects.
	Namespace string
	// RuntimeType is the containerd runtime of sandboxes: our own shim
	// io.containerd.rodon.v1 by default; the stock io.containerd.runsc.v1
	// works on hosts where root has CAP_SYS_RESOURCE.
	RuntimeType string
	// RuntimeConfigPath, if set, is a TOML file of runsc flags
	// ([runsc_config]) handed to the shim, for example to enable runsc's
	// debug logs.
	RuntimeConfigPath string
	// Node names the node this runtime works for; sandboxes are labelled
	// with it, and Orphans only takes sandboxes of the same node (several
	// agents may share one containerd in tests).
	Node string
	// DataDir holds workspace copies and IO fifos.
	DataDir string
	// CgroupParent is the cgroup under which each sandbox gets <parent>/<id>.
	CgroupParent string
	// PauseBinary is the static binary run as each sandbox's own process
	// (cmd/rodon-pause, installed by scripts/install-deps).
	PauseBinary string
	// KillGrace is how long a step has between SIGTERM and SIGKILL when it
	// is cancelled; TimeoutGrace the same when it hits its timeout.
	KillGrace    time.Duration
	TimeoutGrace time.Duration
	// Network, if set, gives every sandbox whose step is not NoInternet its
	// own namespace, veth and egress filter (the public internet only).
	// Without it every sandbox has loopback only. The runtime does not
	// close it.
	Network *netpolicy.Egress
	// MinFreeDisk and MinFreeInodes are the floors of free space and
	// inodes on the node's file systems: a workspace that would take the
	// data directory below them is refused, a read-back that would take
	// the workspace store below them is not done, and the agent reports
	// the node degraded while one is below them.
	MinFreeDisk, MinFreeInodes Threshold
}

// DefaultRuntimeConfig returns the configuration used on a standard install
// (scripts/install-deps).
func DefaultRuntimeConfig() RuntimeConfig {
	return RuntimeConfig{
		Address:       "/run/rodon/containerd/containerd.sock",
		Namespace:     "rodon",
		RuntimeType:   "io.containerd.rodon.v1",
		DataDir:       "/var/lib/rodon/agentd",
		CgroupParent:  "/rodon",
		PauseBinary:   "/opt/rodon/bin/rodon-pause",
		KillGrace:     10 * time.Second,
		TimeoutGrace:  500 * time.Millisecond,
		MinFreeDisk:   DefaultMinFreeDisk,
		MinFreeInodes: DefaultMinFreeInodes,
	}
}

// Runtime creates, runs and destroys step sandboxes. It is safe for
// concurrent use.
type Runtime struct {
	cfg    RuntimeConfig
	client *containerd.Client
	logger *slog.Logger
	owner  string

	mu sync.Mutex
	// images are the mounted workspace images, with their quotas.
	images map[string]int64
	// wsLocks serialize the copies into and out of each host workspace.
	wsLocks map[string]*wsLock
}

type wsLock struct {
	mu    sync.Mutex
	users int
}

// lockWorkspace serializes copies of the host workspace dir: a step's
// read-back never swaps a tree another step is being copied from.
func (r *Runtime) lockWorkspace(dir string) (unlock func()) {
	r.mu.Lock()
	l := r.wsLocks[dir]
	if l == nil {
		l = &wsLock{}
		r.wsLocks[dir] = l
	}
	l.users++
	r.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		r.mu.Lock()
		if l.users--; l.users == 0 {
			delete(r.wsLocks, dir)
		}
		r.mu.Unlock()
	}
}

// rcuExpeditedFile makes the kernel's RCU grace periods expedited when it
// holds 1 (scripts/install-deps, step 6b).
const rcuExpeditedFile = "/sys/kernel/rcu_expedited"

// rcuNormalFile, holding 1, makes every grace period a normal one,
// expedited or not.
const rcuNormalFile = "/sys/kernel/rcu_normal"

// NewRuntime connects to containerd. It starts no goroutine; Close releases
// the connection. It warns when RCU grace periods are not expedited.
func NewRuntime(ctx context.Context, cfg RuntimeConfig, logger *slog.Logger) (*Runtime, error) {
	switch {
	case cfg.Address == "":
		return nil, errors.New("runtime config: empty containerd address")
	case cfg.Namespace == "":
		return nil, errors.New("runtime config: empty containerd namespace")
	case cfg.RuntimeType == "":
		return nil, errors.New("runtime config: empty runtime type")
	case !filepath.IsAbs(cfg.DataDir):
		return nil, fmt.Errorf("runtime config: data dir %q is not an absolute path", cfg.DataDir)
	}
	if fi, err := os.Stat(cfg.PauseBinary); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("pause binary %q: not found (install it with scripts/install-deps)", cfg.PauseBinary)
	}
	if _, err := os.Stat(cfg.Address); err != nil {
		return nil, fmt.Errorf("containerd socket %s: %w (is Rodon's containerd running? see scripts/install-deps)", cfg.Address, err)
	}
	for _, d := range []string{workspacesDir(cfg), fifoDir(cfg), ctlDir(cfg)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create data dir: %w", err)
		}
	}
	client, err := containerd.New(cfg.Address,
		containerd.WithDefaultNamespace(cfg.Namespace),
		containerd.WithTimeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("connect to containerd at %s: %w", cfg.Address, err)
	}
	if _, err := client.Version(ctx); err != nil {
		client.Close()
		return nil, fmt.Errorf("connect to containerd at %s: %w", cfg.Address, err)
	}
	owner, err := selfOwner()
	if err != nil {
		client.Close()
		return nil, err
	}
	r := &Runtime{
		cfg:     cfg,
		client:  client,
		logger:  logger.With("component", "runtime"),
		owner:   owner,
		images:  map[string]int64{},
		wsLocks: map[string]*wsLock{},
	}
	if v, err := os.ReadFile(rcuExpeditedFile); err == nil && strings.TrimSpace(string(v)) == "0" {
		r.logger.Warn("RCU grace periods are not expedited: every runsc, gofer, sentry and shim start-up waits one "+
			"(about 10 ms), a cold sandbox about 100 ms in all; scripts/install-deps sets it",
			"file", rcuExpeditedFile, "value", 0)
	}
	if v, err := os.ReadFile(rcuNormalFile); err == nil && strings.TrimSpace(string(v)) == "1" {
		r.logger.Warn("RCU grace periods are forced normal, which overrides expedited ones: "+
			"every runsc, gofer, sentry and shim start-up waits one (about 10 ms)",
			"file", rcuNormalFile, "value", 1)
	}
	return r, nil
}

// Close releases the containerd connection. Sandboxes keep running.
func (r *Runtime) Close() error { return r.client.Close() }

func (r *Runtime) nsCtx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, r.cfg.Namespace)
}

func workspacesDir(cfg RuntimeConfig) string { return filepath.Join(cfg.DataDir, "workspaces") }
func fifoDir(cfg RuntimeConfig) string       { return filepath.Join(cfg.DataDir, "fifo") }
func ctlDir(cfg RuntimeConfig) string        { return filepath.Join(cfg.DataDir, "ctl") }
