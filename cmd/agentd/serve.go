package main

import (
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/agentd"
	"github.com/rodon-compute/rodon/agentd/blobcache"
	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/cli"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/size"
)

// serveFlags are the flags of `agentd serve`.
type serveFlags struct {
	runtimeFlags
	schedulers string
	nodeID     string
	listen     string
	cpu        float64
	memory     string
	blobCache  sizeFlag
	retention  time.Duration
	logBudget  sizeFlag
	heartbeat  time.Duration
	tls        cli.TLSFlags
	// The node's maxima of step limits (cluster.Limits).
	maxPids      int64
	maxTimeout   time.Duration
	maxWorkspace sizeFlag
	maxOutput    sizeFlag
	// The warm pool (agentd.PoolConfig).
	poolMemory  sizeFlag
	poolClasses int
	poolMaxAge  time.Duration
	poolMin     int
}

func serveCmd(args []string, stdout, stderr io.Writer) (int, error) {
	var f serveFlags
	fs := newFlagSet("serve", stderr)
	registerServeFlags(fs, &f)
	if err := parseFlags(fs, args); err != nil {
		return 0, err
	}
	if fs.NArg() > 0 {
		return 0, fmt.Errorf("%w: unexpected arguments %q", cli.ErrUsage, fs.Args())
	}
	cfg, urls, err := f.agentConfig()
	if err != nil {
		return 0, err
	}
	logger, err := cli.Logger(stderr, f.logLevel)
	if err != nil {
		return 0, err
	}
	// SIGHUP reloads the TLS files and the platform CIDRs; caught from
	// here on so that an early one does not kill the agent.
	ctx, hup, stop := cli.Signals()
	defer stop()
	id, err := pki.NewIdentity(pki.RoleAgent, string(cfg.Node))
	if err != nil {
		return 0, fmt.Errorf("%w: --node-id: %v", cli.ErrUsage, err)
	}
	src, err := f.tls.Source(pki.RoleAgent, id, logger, append([]string{f.listen}, urls...)...)
	if err != nil {
		return 0, err
	}
	if urls, err = cli.SchedulerURLs(strings.Join(urls, ","), "--scheduler", "agentd", src != nil); err != nil {
		return 0, err
	}
	scfg, err := f.serverConfig(cfg, urls, src, hup)
	if err != nil {
		return 0, err
	}
	srv, err := agentd.New(scfg, logger)
	if err != nil {
		return 0, err
	}
	return 0, srv.Run(ctx)
}

// serverConfig is the daemon's configuration from the flags, the agent's
// configuration and the loaded TLS files (nil with --plaintext).
func (f *serveFlags) serverConfig(cfg agentd.AgentConfig, urls []string, src *pki.Source, hup <-chan os.Signal) (agentd.Config, error) {
	c := agentd.DefaultConfig()
	c.Agent, c.Schedulers, c.TLS, c.Reload = cfg, urls, src, hup
	f.node = string(cfg.Node)
	c.Runtime = f.config()
	ecfg, ok, err := f.net.egressConfig()
	if err != nil {
		return c, err
	}
	if ok {
		c.Egress = &ecfg
		c.Platform = f.net.platformCIDRs
	}
	c.Logs.Dir = filepath.Join(f.dataDir, "logs")
	c.Logs.Retention = f.retention
	// A short retention is kept to closely: sweep at a quarter of it (at
	// least every second, at most every minute).
	c.Logs.SweepInterval = min(c.Logs.SweepInterval, max(time.Second, f.retention/4))
	c.Logs.Budget = int64(f.logBudget)
	if f.poolMemory < 0 || f.poolMemory > 0 && int64(f.poolMemory) >= c.Agent.Capacity.MemoryBytes {
		return c, fmt.Errorf("%w: --warm-pool-memory %s: want 0 (off) up to less than the node's memory for steps (%s)", cli.ErrUsage, f.poolMemory.String(), size.Format(c.Agent.Capacity.MemoryBytes))
	}
	if f.poolClasses <= 0 {
		return c, fmt.Errorf("%w: --warm-pool-classes %d: want at least 1", cli.ErrUsage, f.poolClasses)
	}
	if f.poolMaxAge <= 0 {
		return c, fmt.Errorf("%w: --warm-pool-max-age %v: must be positive", cli.ErrUsage, f.poolMaxAge)
	}
	if f.poolMin < 0 || f.poolMin > 0 && f.poolMemory == 0 {
		return c, fmt.Errorf("%w: --warm-pool-min %d: want 0 or more, with a --warm-pool-memory to hold them", cli.ErrUsage, f.poolMin)
	}
	c.Pool.MemoryBudget, c.Pool.MaxClasses, c.Pool.MaxAge = int64(f.poolMemory), f.poolClasses, f.poolMaxAge
	c.Pool.MinReady = f.poolMin
	c.Pool.DefaultImage = c.Agent.ProbeImage
	// What the pool may take is not offered to steps.
	c.Agent.Capacity.MemoryBytes -= c.Pool.MemoryBudget
	return c, nil
}

// registerServeFlags registers the flags of `agentd serve` on fs.
func registerServeFlags(fs *flag.FlagSet, f *serveFlags) {
	f.register(fs)
	fs.StringVar(&f.schedulers, "scheduler", "", "scheduler members' https:// URLs, comma-separated (required; http:// with --plaintext)")
	fs.StringVar(&f.nodeID, "node-id", "", "this node's id (required)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:7200", "IP:PORT to serve step streams on (told to the scheduler)")
	fs.Float64Var(&f.cpu, "cpu", 0, "CPU cores offered to steps (default: all)")
	fs.StringVar(&f.memory, "memory", "", "memory offered to steps, such as 8g (default: all but 1 GiB)")
	f.blobCache = blobcache.DefaultMaxBytes
	fs.Var(&f.blobCache, "blob-cache-size", "`SIZE` the node's cache of workspace blobs (DATA-DIR/blob-cache) may take; past it the least recently used go")
	fs.DurationVar(&f.retention, "log-retention", logstore.DefaultRetention, "how long a finished step's output is kept on the node")
	f.logBudget = logstore.DefaultBudget
	fs.Var(&f.logBudget, "log-budget", "`SIZE` all steps' output logs may take together on disk; past it the oldest finished ones go before their retention ends")
	fs.DurationVar(&f.heartbeat, "heartbeat", 2*time.Second, "heartbeat interval")
	lo, hi := cluster.MinLimits, cluster.MaxLimits
	fs.Int64Var(&f.maxPids, "max-pids", hi.Pids, fmt.Sprintf("largest pids limit a step may have on this node (%d to %d)", lo.Pids, hi.Pids))
	fs.DurationVar(&f.maxTimeout, "max-timeout", hi.Timeout, fmt.Sprintf("longest timeout a step may have on this node (%v to %v)", lo.Timeout, hi.Timeout))
	f.maxWorkspace, f.maxOutput = sizeFlag(hi.WorkspaceBytes), sizeFlag(hi.OutputBytes)
	fs.Var(&f.maxWorkspace, "max-workspace", fmt.Sprintf("largest workspace `SIZE` a step may have on this node (%s to %s)", size.Format(lo.WorkspaceBytes), size.Format(hi.WorkspaceBytes)))
	fs.Var(&f.maxOutput, "max-output", fmt.Sprintf("largest output cap (`SIZE`) a step may have on this node (%s to %s)", size.Format(lo.OutputBytes), size.Format(hi.OutputBytes)))
	pd := agentd.DefaultPoolConfig()
	f.poolMemory = sizeFlag(pd.MemoryBudget)
	fs.Var(&f.poolMemory, "warm-pool-memory", "`SIZE` of memory the warm pool of sandboxes made ahead of steps may use, taken from the memory offered to steps (0: no pool)")
	fs.IntVar(&f.poolClasses, "warm-pool-classes", pd.MaxClasses, "most classes (image, network, workspace size, pids) the warm pool keeps sandboxes of")
	fs.DurationVar(&f.poolMaxAge, "warm-pool-max-age", pd.MaxAge, "how long a pooled sandbox waits for a step before it is replaced")
	fs.IntVar(&f.poolMin, "warm-pool-min", pd.MinReady, "sandboxes of the node's default class the warm pool keeps ready whatever the demand it saw, within its memory (for bursts larger than the pool has learnt)")
	f.tls.Register(fs)
}

func (f *serveFlags) agentConfig() (agentd.AgentConfig, []string, error) {
	cfg := agentd.DefaultAgentConfig()
	if f.schedulers == "" {
		return cfg, nil, fmt.Errorf("%w: --scheduler: give the scheduler members' URLs", cli.ErrUsage)
	}
	urls := strings.Split(f.schedulers, ",")
	if err := cluster.ValidateNodeID(cluster.NodeID(f.nodeID)); err != nil {
		return cfg, nil, fmt.Errorf("%w: --node-id: %v", cli.ErrUsage, err)
	}
	cfg.Node = cluster.NodeID(f.nodeID)
	ap, err := netip.ParseAddrPort(f.listen)
	if err != nil {
		return cfg, nil, fmt.Errorf("%w: --listen %q: want IP:PORT", cli.ErrUsage, f.listen)
	}
	cfg.Address = ap
	cfg.Capacity.CPU = f.cpu
	if cfg.Capacity.CPU == 0 {
		cfg.Capacity.CPU = float64(runtime.NumCPU())
	} else if cfg.Capacity.CPU < 0 {
		return cfg, nil, fmt.Errorf("%w: --cpu %v: must be positive", cli.ErrUsage, f.cpu)
	}
	if f.memory != "" {
		m, err := size.Parse(f.memory)
		if err != nil {
			return cfg, nil, fmt.Errorf("%w: --memory: %v", cli.ErrUsage, err)
		}
		cfg.Capacity.MemoryBytes = m
	} else {
		cfg.Capacity.MemoryBytes = agentd.HostMemory() - 1<<30
	}
	if f.heartbeat <= 0 {
		return cfg, nil, fmt.Errorf("%w: --heartbeat %v: must be positive", cli.ErrUsage, f.heartbeat)
	}
	cfg.Heartbeat = f.heartbeat
	if f.blobCache <= 0 {
		return cfg, nil, fmt.Errorf("%w: --blob-cache-size %s: must be positive", cli.ErrUsage, f.blobCache.String())
	}
	cfg.BlobCacheBytes = int64(f.blobCache)
	if f.retention <= 0 {
		return cfg, nil, fmt.Errorf("%w: --log-retention %v: must be positive", cli.ErrUsage, f.retention)
	}
	if f.logBudget <= 0 {
		return cfg, nil, fmt.Errorf("%w: --log-budget %s: must be positive", cli.ErrUsage, f.logBudget.String())
	}
	cfg.MaxLimits = cluster.Limits{Pids: f.maxPids, Timeout: f.maxTimeout, WorkspaceBytes: int64(f.maxWorkspace), OutputBytes: int64(f.maxOutput)}
	if err := checkLimitFlags(cfg.MaxLimits, "--max-pids", "--max-timeout", "--max-workspace", "--max-output"); err != nil {
		return cfg, nil, err
	}
	return cfg, urls, nil
}

// checkLimitFlags checks limits given by flags against the table's bounds
// (cluster.MinLimits to cluster.MaxLimits), naming the flag of the first
// one outside them; a limit without a flag name is not checked.
func checkLimitFlags(m cluster.Limits, pids, timeout, workspace, output string) error {
	lo, hi := cluster.MinLimits, cluster.MaxLimits
	dur := func(v int64) string { return time.Duration(v).String() }
	for _, c := range []struct {
		flag      string
		v, lo, hi int64
		show      func(int64) string
	}{
		{pids, m.Pids, lo.Pids, hi.Pids, func(v int64) string { return strconv.FormatInt(v, 10) }},
		{timeout, int64(m.Timeout), int64(lo.Timeout), int64(hi.Timeout), dur},
		{workspace, m.WorkspaceBytes, lo.WorkspaceBytes, hi.WorkspaceBytes, size.Format},
		{output, m.OutputBytes, lo.OutputBytes, hi.OutputBytes, size.Format},
	} {
		if c.flag != "" && (c.v < c.lo || c.v > c.hi) {
			return fmt.Errorf("%w: %s %s: want %s to %s", cli.ErrUsage, c.flag, c.show(c.v), c.show(c.lo), c.show(c.hi))
		}
	}
	return nil
}
