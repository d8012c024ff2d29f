package main

import (
	"flag"
	"io"
	"testing"

	"github.com/rodon-compute/rodon/internal/grammartest"
)

// TestGrammar: schedctl reads the table's sizes and ids as the other
// entry points do (internal/grammartest): run's --memory, --id and
// --workspace, and the ID of step, cancel, logs (step ids) and node
// drain and undrain (node ids).
func TestGrammar(t *testing.T) {
	request := func(args ...string) (int64, error) {
		r := newRunCmd()
		fs := flag.NewFlagSet("schedctl run", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		r.flags(fs)
		if err := fs.Parse(append(args, "--", "true")); err != nil {
			return 0, err
		}
		req, err := r.request(fs.Args())
		return req.MemoryBytes, err
	}
	t.Run("run", func(t *testing.T) {
		grammartest.Run(t, grammartest.Entry{
			grammartest.Size:   func(_ *testing.T, s string) (int64, error) { return request("--memory=" + s) },
			grammartest.StepID: func(_ *testing.T, s string) (int64, error) { _, err := request("--id=" + s); return 0, err },
			grammartest.WorkspaceID: func(_ *testing.T, s string) (int64, error) {
				_, err := request("--workspace=" + s)
				return 0, err
			},
		})
	})
	t.Run("arguments", func(t *testing.T) {
		grammartest.Run(t, grammartest.Entry{
			grammartest.StepID: func(_ *testing.T, s string) (int64, error) { return 0, wantStepID([]string{s}) },
			grammartest.NodeID: func(_ *testing.T, s string) (int64, error) { return 0, wantNodeID([]string{s}) },
		})
	})
}
