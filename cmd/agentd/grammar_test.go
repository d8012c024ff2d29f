package main

import (
	"io"
	"testing"

	"github.com/rodon-compute/rodon/internal/grammartest"
)

// TestGrammar: agentd's flags read the table's sizes and ids as the other
// entry points do (internal/grammartest): run's --memory and --id, and
// serve's --memory, --log-budget, --min-free-disk and --node-id.
func TestGrammar(t *testing.T) {
	run := func(args ...string) (runFlags, error) {
		var f runFlags
		fs := newFlagSet("run", io.Discard)
		registerRunFlags(fs, &f)
		if err := parseFlags(fs, append(args, "--", "true")); err != nil {
			return f, err
		}
		_, err := f.step(fs.Args())
		return f, err
	}
	serve := func(args ...string) (serveFlags, error) {
		var f serveFlags
		fs := newFlagSet("serve", io.Discard)
		registerServeFlags(fs, &f)
		if err := parseFlags(fs, append([]string{"--scheduler", "http://127.0.0.1:7100", "--node-id", "n1"}, args...)); err != nil {
			return f, err
		}
		_, _, err := f.agentConfig()
		return f, err
	}
	t.Run("run", func(t *testing.T) {
		grammartest.Run(t, grammartest.Entry{
			grammartest.Size: func(_ *testing.T, s string) (int64, error) {
				var f runFlags
				fs := newFlagSet("run", io.Discard)
				registerRunFlags(fs, &f)
				if err := parseFlags(fs, []string{"--memory=" + s, "--", "true"}); err != nil {
					return 0, err
				}
				st, err := f.step(fs.Args())
				return st.Limits.MemoryBytes, err
			},
			grammartest.StepID: func(_ *testing.T, s string) (int64, error) { _, err := run("--id=" + s); return 0, err },
		})
	})
	t.Run("serve", func(t *testing.T) {
		grammartest.Run(t, grammartest.Entry{
			grammartest.Size: func(_ *testing.T, s string) (int64, error) {
				var f serveFlags
				fs := newFlagSet("serve", io.Discard)
				registerServeFlags(fs, &f)
				if err := parseFlags(fs, []string{"--scheduler", "http://127.0.0.1:7100", "--node-id", "n1", "--memory=" + s}); err != nil {
					return 0, err
				}
				cfg, _, err := f.agentConfig()
				return cfg.Capacity.MemoryBytes, err
			},
			grammartest.NodeID: func(_ *testing.T, s string) (int64, error) { _, err := serve("--node-id=" + s); return 0, err },
		})
	})
	t.Run("log-budget", func(t *testing.T) {
		grammartest.Run(t, grammartest.Entry{grammartest.Size: func(_ *testing.T, s string) (int64, error) {
			f, err := serve("--log-budget=" + s)
			return int64(f.logBudget), err
		}})
	})
	t.Run("min-free-disk", func(t *testing.T) {
		grammartest.Run(t, grammartest.Entry{grammartest.Size: func(_ *testing.T, s string) (int64, error) {
			f, err := serve("--min-free-disk=" + s)
			return int64(f.minFreeDisk.Amount), err
		}})
	})
}
