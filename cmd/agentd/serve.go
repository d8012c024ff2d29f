package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rodon-compute/rodon/agentd"
	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/cli"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/size"
)

// serveFlags are the flags of `agentd serve`.
type serveFlags struct {
	runtimeFlags
	schedulers    string
	nodeID        string
	listen        string
	cpu           float64
	memory        string
	workspaceRoot string
	retention     time.Duration
	logBudget     sizeFlag
	heartbeat     time.Duration
	tls           cli.TLSFlags
	// The node's maxima of step limits (cluster.Limits).
	maxPids      int64
	maxTimeout   time.Duration
	maxWorkspace sizeFlag
	maxOutput    sizeFlag
}

func serveCmd(args []string, stdout, stderr io.Writer) (int, error) {
	var f serveFlags
	fs := newFlagSet("serve", stderr)
	registerServeFlags(fs, &f)
	if err := parseFlags(fs, args); err != nil {
		return 0, err
	}
	if fs.NArg() > 0 {
		return 0, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	cfg, urls, err := f.agentConfig()
	if err != nil {
		return 0, err
	}
	logger, err := cli.Logger(stderr, f.logLevel)
	if err != nil {
		return 0, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// SIGHUP reloads the TLS files and the platform CIDRs; caught from
	// here on so that an early one does not kill the agent.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	id, err := pki.NewIdentity(pki.RoleAgent, string(cfg.Node))
	if err != nil {
		return 0, fmt.Errorf("%w: --node-id: %v", errUsage, err)
	}
	src, err := f.tls.Source(pki.RoleAgent, id, logger, append([]string{f.listen}, urls...)...)
	if err != nil {
		return 0, err
	}
	if urls, err = cli.SchedulerURLs(strings.Join(urls, ","), "--scheduler", "agentd", src != nil); err != nil {
		return 0, err
	}
	return 0, serve(ctx, f, cfg, urls, src, hup, logger)
}

// registerServeFlags registers the flags of `agentd serve` on fs.
func registerServeFlags(fs *flag.FlagSet, f *serveFlags) {
	f.register(fs)
	fs.StringVar(&f.schedulers, "scheduler", "", "scheduler members' https:// URLs, comma-separated (required; http:// with --plaintext)")
	fs.StringVar(&f.nodeID, "node-id", "", "this node's id (required)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:7200", "IP:PORT to serve step streams on (told to the scheduler)")
	fs.Float64Var(&f.cpu, "cpu", 0, "CPU cores offered to steps (default: all)")
	fs.StringVar(&f.memory, "memory", "", "memory offered to steps, such as 8g (default: all but 1 GiB)")
	fs.StringVar(&f.workspaceRoot, "workspace-root", "", "directory of the workspaces steps name (default: DATA-DIR/workspace-store)")
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
	f.tls.Register(fs)
}

func (f *serveFlags) agentConfig() (agentd.AgentConfig, []string, error) {
	cfg := agentd.DefaultAgentConfig()
	if f.schedulers == "" {
		return cfg, nil, fmt.Errorf("%w: --scheduler: give the scheduler members' URLs", errUsage)
	}
	urls := strings.Split(f.schedulers, ",")
	if err := cluster.ValidateNodeID(cluster.NodeID(f.nodeID)); err != nil {
		return cfg, nil, fmt.Errorf("%w: --node-id: %v", errUsage, err)
	}
	cfg.Node = cluster.NodeID(f.nodeID)
	ap, err := netip.ParseAddrPort(f.listen)
	if err != nil {
		return cfg, nil, fmt.Errorf("%w: --listen %q: want IP:PORT", errUsage, f.listen)
	}
	cfg.Address = ap
	cfg.Capacity.CPU = f.cpu
	if cfg.Capacity.CPU == 0 {
		cfg.Capacity.CPU = float64(runtime.NumCPU())
	} else if cfg.Capacity.CPU < 0 {
		return cfg, nil, fmt.Errorf("%w: --cpu %v: must be positive", errUsage, f.cpu)
	}
	if f.memory != "" {
		m, err := size.Parse(f.memory)
		if err != nil {
			return cfg, nil, fmt.Errorf("%w: --memory: %v", errUsage, err)
		}
		cfg.Capacity.MemoryBytes = m
	} else {
		cfg.Capacity.MemoryBytes = hostMemory() - 1<<30
	}
	if f.heartbeat <= 0 {
		return cfg, nil, fmt.Errorf("%w: --heartbeat %v: must be positive", errUsage, f.heartbeat)
	}
	cfg.Heartbeat = f.heartbeat
	cfg.WorkspaceRoot = f.workspaceRoot
	if cfg.WorkspaceRoot == "" {
		cfg.WorkspaceRoot = filepath.Join(f.dataDir, "workspace-store")
	}
	if f.retention <= 0 {
		return cfg, nil, fmt.Errorf("%w: --log-retention %v: must be positive", errUsage, f.retention)
	}
	if f.logBudget <= 0 {
		return cfg, nil, fmt.Errorf("%w: --log-budget %s: must be positive", errUsage, f.logBudget.String())
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
			return fmt.Errorf("%w: %s %s: want %s to %s", errUsage, c.flag, c.show(c.v), c.show(c.lo), c.show(c.hi))
		}
	}
	return nil
}

// hostMemory reads MemTotal from /proc/meminfo, in bytes.
func hostMemory() int64 {
	fh, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// serve runs the agent, its log store janitor, its control-plane denylist
// and its HTTP server until ctx ends, then stops them within a bounded
// time. src is nil in plaintext mode.
func serve(ctx context.Context, f serveFlags, cfg agentd.AgentConfig, urls []string, src *pki.Source, hup <-chan os.Signal, logger *slog.Logger) error {
	f.node = string(cfg.Node)
	rcfg := f.config()
	ecfg, _, err := f.net.egressConfig()
	if err != nil {
		return err
	}
	sched, err := newSchedulerClient(urls, src)
	if err != nil {
		return err
	}
	defer sched.close()
	egress, err := f.net.openEgress(logger)
	var cp *agentd.ControlPlane
	if err != nil {
		// The node registers as degraded and gets no steps.
		logger.Error("sandbox network unavailable", "error", err)
		cfg.Degraded = append(cfg.Degraded, err.Error())
	} else if egress != nil {
		defer egress.Close()
		rcfg.Network = egress
		logger.Info("sandbox network ready", "resolvers", egress.Resolvers(), "node_addrs", egress.NodeAddrs())
		// The control plane is denied before the first sandbox (the
		// probe's canary) starts, and no assigned step starts before
		// the scheduler's list of it arrived.
		if cp, err = newControlPlane(ctx, ecfg, urls, sched, egress, logger); err != nil {
			return err
		}
		sched.ready = controlPlaneReady(cp)
	}
	rt, err := agentd.NewRuntime(ctx, rcfg, logger)
	if err != nil {
		return err
	}
	defer rt.Close()
	lcfg := logstore.DefaultConfig()
	lcfg.Dir = filepath.Join(f.dataDir, "logs")
	lcfg.Retention = f.retention
	// A short retention is kept to closely: sweep at a quarter of it (at
	// least every second, at most every minute).
	lcfg.SweepInterval = min(lcfg.SweepInterval, max(time.Second, f.retention/4))
	lcfg.Budget = int64(f.logBudget)
	logs, err := logstore.New(lcfg, logger)
	if err != nil {
		return err
	}
	agent, err := agentd.NewAgent(cfg, rt, sched, logs, logger)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Address.String())
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Address, err)
	}
	acc := access{authenticated: src != nil}
	if src != nil {
		// Any cluster identity may connect; the routes check roles.
		ln = tls.NewListener(ln, src.ServerConfig(pki.AnyIdentity))
	}
	if cp != nil {
		acc.seenGateway = cp.SeenGateway
	}
	var extra []prometheus.Collector
	if src != nil {
		extra = append(extra, src.Collector())
	}
	mux, err := newAgentMux(logs, agent, acc, logger, extra...)
	if err != nil {
		ln.Close()
		return err
	}
	// Streams end with the agent: BaseContext is ctx.
	srv := newAgentServer(ctx, mux, agentTimeouts, logger)

	var wg sync.WaitGroup
	errc := make(chan error, 4)
	wg.Add(1)
	go func() { defer wg.Done(); reloadOnHUP(ctx, hup, src, &f.net, cp, logger) }()
	if cp != nil {
		wg.Add(1)
		go func() { defer wg.Done(); errc <- cp.Run(ctx) }()
	}
	wg.Add(3)
	go func() { defer wg.Done(); errc <- agent.Run(ctx) }()
	go func() { defer wg.Done(); errc <- logs.Run(ctx) }()
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("serve streams: %w", err)
		}
	}()
	logger.Info("agentd serving", "node", cfg.Node, "listen", cfg.Address.String(), "schedulers", urls, "tls", src != nil)
	<-ctx.Done()
	// Drain with a fresh, bounded context.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	wg.Wait()
	close(errc)
	var errs []error
	for err := range errc {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// reloadOnHUP, on every SIGHUP until ctx ends, reloads the TLS files (when
// src is not nil) and re-reads the platform CIDRs (--platform-cidrs and
// --platform-file) into the control-plane denylist (when cp is not nil);
// running sandboxes get the new list at once. A failed reload keeps what
// was loaded.
func reloadOnHUP(ctx context.Context, hup <-chan os.Signal, src *pki.Source, f *networkFlags, cp *agentd.ControlPlane, logger *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		if src != nil {
			if err := src.Reload(); err != nil {
				logger.Error("reload TLS files; keeping the loaded certificate", "error", err)
			} else {
				logger.Info("tls files reloaded", "identity", src.Identity().String(), "not_after", src.NotAfter())
			}
		}
		if cp == nil {
			continue
		}
		p, err := f.platformCIDRs()
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
