package main

import (
	"io"
	"testing"

	"github.com/rodon-compute/rodon/agentd"
	"github.com/rodon-compute/rodon/internal/grammartest"
)

// TestGrammar: agentd's flags read the table's sizes and ids as the other
// entry points do (internal/grammartest): run's --memory and --id, and
// serve's --memory, --log-budget, --min-free-disk and --node-id.
func TestGrammar(t *testing.T) {
	run := func(args ...string) (agentd.Step, error) {
		var f runFlags
		fs := newFlagSet("run", io.Discard)
		registerRunFlags(fs, &f)
		if err := parseFlags(fs, append(args, "--", "true")); err != nil {
			return agentd.Step{}, err
		}
		return f.step(fs.Args())
	}
	serve := func(args ...string) (serveFlags, agentd.AgentConfig, error) {
		var f serveFlags
		fs := newFlagSet("serve", io.Discard)
		registerServeFlags(fs, &f)
		if err := parseFlags(fs, append([]string{"--scheduler", "http://127.0.0.1:7100", "--node-id", "n1"}, args...)); err != nil {
			return f, agentd.AgentConfig{}, err
		}
		cfg, _, err := f.agentConfig()
		return f, cfg, err
	}
	grammartest.Run(t, grammartest.Entry{
		grammartest.Size: func(_ *testing.T, s string) (int64, error) {
			st, err := run("--memory=" + s)
			return st.Limits.MemoryBytes, err
		},
		grammartest.StepID: func(_ *testing.T, s string) (int64, error) { _, err := run("--id=" + s); return 0, err },
		grammartest.NodeID: func(_ *testing.T, s string) (int64, error) { _, _, err := serve("--node-id=" + s); return 0, err },
	})
	for _, flag := range []string{"--memory", "--log-budget", "--min-free-disk"} {
		t.Run("serve "+flag, func(t *testing.T) {
			grammartest.Run(t, grammartest.Entry{grammartest.Size: func(_ *testing.T, s string) (int64, error) {
				f, cfg, err := serve(flag + "=" + s)
				return map[string]int64{"--memory": cfg.Capacity.MemoryBytes, "--log-budget": int64(f.logBudget),
					"--min-free-disk": int64(f.minFreeDisk.Amount)}[flag], err
			}})
		})
	}
}
