package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/agentd"
	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/cluster"
)

// parseServe parses `agentd serve` flags as serveCmd does, up to the
// agent's configuration.
func parseServe(t *testing.T, args ...string) (serveFlags, agentd.AgentConfig, error) {
	t.Helper()
	var f serveFlags
	fs := newFlagSet("serve", io.Discard)
	registerServeFlags(fs, &f)
	if err := parseFlags(fs, append([]string{"--scheduler", "http://127.0.0.1:7100", "--node-id", "n1"}, args...)); err != nil {
		return f, agentd.AgentConfig{}, err
	}
	cfg, _, err := f.agentConfig()
	return f, cfg, err
}

// TestServeLimitFlags: the node's maxima default to cluster.MaxLimits, may
// be lowered, and are refused outside the table's bounds naming the flag;
// the log retention and budget have their documented defaults.
func TestServeLimitFlags(t *testing.T) {
	f, cfg, err := parseServe(t)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxLimits != cluster.MaxLimits {
		t.Errorf("default maxima = %+v, want cluster.MaxLimits %+v", cfg.MaxLimits, cluster.MaxLimits)
	}
	if f.retention != 7*24*time.Hour || int64(f.logBudget) != logstore.DefaultBudget {
		t.Errorf("defaults --log-retention %v, --log-budget %d; want 168h and %d", f.retention, f.logBudget, int64(logstore.DefaultBudget))
	}
	if f.minFreeDisk.String() != "10%" || f.minFreeInodes.String() != "5%" {
		t.Errorf("defaults --min-free-disk %s, --min-free-inodes %s; want 10%% and 5%%", f.minFreeDisk.String(), f.minFreeInodes.String())
	}
	_, cfg, err = parseServe(t, "--max-pids", "256", "--max-timeout", "10m", "--max-workspace", "2g", "--max-output", "1m")
	if want := (cluster.Limits{Pids: 256, Timeout: 10 * time.Minute, WorkspaceBytes: 2 << 30, OutputBytes: 1 << 20}); err != nil || cfg.MaxLimits != want {
		t.Errorf("lowered maxima = %+v, %v; want %+v", cfg.MaxLimits, err, want)
	}
	for _, tt := range []struct{ flag, value string }{
		{"--max-pids", "8193"}, {"--max-pids", "15"},
		{"--max-timeout", "25h"}, {"--max-timeout", "0s"},
		{"--max-workspace", "65g"}, {"--max-workspace", "1k"},
		{"--max-output", "2g"}, {"--max-output", "1k"},
	} {
		_, _, err := parseServe(t, tt.flag, tt.value)
		if err == nil || !strings.Contains(err.Error(), tt.flag+" ") {
			t.Errorf("serve %s %s = %v, want a usage error naming the flag", tt.flag, tt.value, err)
		}
	}
	if _, _, err := parseServe(t, "--min-free-disk", "120%"); err == nil {
		t.Errorf("serve --min-free-disk 120%% = nil error, want one")
	}
}

// TestRunLimitFlags: agentd run takes its defaults from the same table,
// and refuses what is outside it, naming the flag.
func TestRunLimitFlags(t *testing.T) {
	parse := func(args ...string) (agentd.Step, error) {
		var f runFlags
		fs := newFlagSet("run", io.Discard)
		registerRunFlags(fs, &f)
		if err := parseFlags(fs, args); err != nil {
			return agentd.Step{}, err
		}
		return f.step(fs.Args())
	}
	st, err := parse("--", "true")
	if err != nil {
		t.Fatal(err)
	}
	d := cluster.DefaultLimits
	if st.Limits.Pids != d.Pids || st.Timeout != d.Timeout || st.WorkspaceBytes != d.WorkspaceBytes {
		t.Errorf("agentd run defaults: pids %d, timeout %v, workspace %d; want %d, %v, %d", st.Limits.Pids, st.Timeout, st.WorkspaceBytes, d.Pids, d.Timeout, d.WorkspaceBytes)
	}
	for _, args := range [][]string{{"--pids", "0"}, {"--pids", "9000"}, {"--timeout", "0s"}, {"--timeout", "48h"}, {"--workspace-size", "100g"}} {
		if _, err := parse(append(args, "--", "true")...); err == nil || !strings.Contains(err.Error(), args[0]+" ") {
			t.Errorf("agentd run %q = %v, want a usage error naming %s", args, err, args[0])
		}
	}
}

// TestServePoolFlags: the warm pool is off by default; a budget is taken
// from the memory offered to steps; bad values are refused naming the flag.
func TestServePoolFlags(t *testing.T) {
	serve := func(args ...string) (agentd.Config, error) {
		f, cfg, err := parseServe(t, append([]string{"--memory", "8g"}, args...)...)
		if err != nil {
			return agentd.Config{}, err
		}
		f.net.mode = "none"
		return f.serverConfig(cfg, []string{"http://127.0.0.1:7100"}, nil, nil)
	}
	c, err := serve()
	if err != nil || c.Pool.MemoryBudget != 0 || c.Agent.Capacity.MemoryBytes != 8<<30 {
		t.Errorf("serve (defaults): pool %+v, memory %d, %v; want the pool off and all 8g offered", c.Pool, c.Agent.Capacity.MemoryBytes, err)
	}
	c, err = serve("--warm-pool-memory", "1g", "--warm-pool-classes", "3", "--warm-pool-max-age", "5m", "--warm-pool-min", "4")
	if err != nil || c.Pool.MemoryBudget != 1<<30 || c.Pool.MaxClasses != 3 || c.Pool.MaxAge != 5*time.Minute || c.Pool.MinReady != 4 || c.Agent.Capacity.MemoryBytes != 7<<30 {
		t.Errorf("serve with a 1g pool: pool %+v, memory %d, %v; want it and 7g offered", c.Pool, c.Agent.Capacity.MemoryBytes, err)
	}
	for _, tt := range []struct{ flag, value string }{
		{"--warm-pool-memory", "9g"}, {"--warm-pool-classes", "0"}, {"--warm-pool-max-age", "0s"},
		{"--warm-pool-min", "-1"}, {"--warm-pool-min", "3"}, // the second without a pool
	} {
		if _, err := serve(tt.flag, tt.value); err == nil || !strings.Contains(err.Error(), tt.flag+" ") {
			t.Errorf("serve %s %s = %v, want a usage error naming the flag", tt.flag, tt.value, err)
		}
	}
}
