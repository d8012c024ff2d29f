package main

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/rodon-compute/rodon/agentd"
	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/bundles"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/cli"
	"github.com/rodon-compute/rodon/internal/size"
	"github.com/rodon-compute/rodon/oci"
)

// runFlags are the flags of `agentd run`.
type runFlags struct {
	runtimeFlags
	image      string
	cpu        float64
	memory     string
	pids       int64
	timeout    time.Duration
	wsSize     sizeFlag
	workspace  string
	env        cli.EnvFlag
	id         string
	record     string
	noInternet bool
}

func runCmd(args []string, stdout, stderr io.Writer) (int, error) {
	var f runFlags
	fs := newFlagSet("run", stderr)
	registerRunFlags(fs, &f)
	if err := parseFlags(fs, args); err != nil {
		return 0, err
	}
	st, err := f.step(fs.Args())
	if err != nil {
		return 0, err
	}
	// Signals cancel the step; the exit record still comes from containerd.
	ctx, rt, _, closeRT, err := f.open(stderr)
	if err != nil {
		return 0, err
	}
	defer closeRT()
	rt.SweepOrphans(ctx)

	rec, err := rt.RunWithEvents(ctx, st, stdout, stderr, func(e cluster.Event) {
		fmt.Fprintf(stderr, "agentd run: %s\n", e.Message)
	})
	if rec.State == "" {
		return 0, err
	}
	if f.record != "" {
		if werr := writeRecord(f.record, rec); werr != nil {
			err = errors.Join(err, werr)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "agentd run: %v\n", err)
	}
	return exitStatus(rec, stderr), nil
}

// registerRunFlags registers the flags of `agentd run` on fs.
func registerRunFlags(fs *flag.FlagSet, f *runFlags) {
	f.register(fs)
	fs.StringVar(&f.image, "image", "base", "image: base, python, or a containerd image reference")
	fs.Float64Var(&f.cpu, "cpu", 0, "CPU limit in cores (0: unlimited)")
	fs.StringVar(&f.memory, "memory", "", "memory limit, such as 512m or 2g (empty: unlimited)")
	def, lo, hi := cluster.DefaultLimits, cluster.MinLimits, cluster.MaxLimits
	fs.Int64Var(&f.pids, "pids", def.Pids, fmt.Sprintf("limit on the step's processes and threads (%d to %d)", lo.Pids, hi.Pids))
	fs.DurationVar(&f.timeout, "timeout", def.Timeout, fmt.Sprintf("wall-clock timeout, such as 30s (%v to %v)", lo.Timeout, hi.Timeout))
	f.wsSize = sizeFlag(def.WorkspaceBytes)
	fs.Var(&f.wsSize, "workspace-size", fmt.Sprintf("`SIZE` of the step's /workspace: writes past it fail with ENOSPC (%s to %s)", size.Format(lo.WorkspaceBytes), size.Format(hi.WorkspaceBytes)))
	fs.StringVar(&f.workspace, "workspace", "", "host directory the step sees (a copy of) at /workspace")
	fs.Var(&f.env, "env", "environment variable K=V (repeatable)")
	fs.StringVar(&f.id, "id", "", "step id (default: random)")
	fs.StringVar(&f.record, "record", "", "write the step's exit record as JSON to this file")
	fs.BoolVar(&f.noInternet, "no-internet", false, "give the step no network but loopback")
}

// step builds and checks the step from the flags and the command.
func (f *runFlags) step(argv []string) (agentd.Step, error) {
	if len(argv) == 0 {
		return agentd.Step{}, fmt.Errorf("%w: no command given: agentd run [FLAGS] -- ARGV...", cli.ErrUsage)
	}
	id := f.id
	if id == "" {
		var b [6]byte
		rand.Read(b[:])
		id = "run-" + hex.EncodeToString(b[:])
	}
	// The same table of limits as the scheduler's: defaults, and bounds
	// (output is printed, not kept, so there is no output cap here).
	lim := cluster.Limits{Pids: f.pids, Timeout: f.timeout, WorkspaceBytes: int64(f.wsSize)}
	if err := checkLimitFlags(lim, "--pids", "--timeout", "--workspace-size", ""); err != nil {
		return agentd.Step{}, err
	}
	st := agentd.Step{
		ID:             cluster.StepID(id),
		Image:          bundles.Ref(f.image),
		Args:           argv,
		Env:            f.env,
		Timeout:        lim.Timeout,
		Limits:         oci.Limits{CPU: f.cpu, Pids: lim.Pids},
		WorkspaceBytes: lim.WorkspaceBytes,
		NoInternet:     f.noInternet,
	}
	if f.memory != "" {
		m, err := size.Parse(f.memory)
		if err != nil {
			return st, fmt.Errorf("%w: --memory: %v", cli.ErrUsage, err)
		}
		st.Limits.MemoryBytes = m
	}
	if f.workspace != "" {
		abs, err := filepath.Abs(f.workspace)
		if err != nil {
			return st, fmt.Errorf("%w: --workspace: %v", cli.ErrUsage, err)
		}
		if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
			return st, fmt.Errorf("%w: --workspace %s: not a directory", cli.ErrUsage, f.workspace)
		}
		st.Workspace = abs
	}
	if err := st.Validate(); err != nil {
		return st, fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	return st, nil
}

func writeRecord(file string, rec cluster.ExitRecord) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(file, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write exit record: %w", err)
	}
	return nil
}

// exitStatus is what `agentd run` exits with: the step's own code, 127 when
// its command was not found, 125 when it failed to start otherwise. Ends
// other than a plain exit are explained on stderr.
func exitStatus(rec cluster.ExitRecord, stderr io.Writer) int {
	switch {
	case rec.State == cluster.StateFailed:
		fmt.Fprintf(stderr, "agentd run: step %s failed: %s\n", rec.Step, rec.Reason)
		if rec.Cause == api.CauseCommandNotFound || rec.Cause == api.CauseImageNotFound {
			return exitNotFound
		}
		return exitInternal
	case rec.TerminatedBy != cluster.ByExit:
		fmt.Fprintf(stderr, "agentd run: step %s ended by %s: %s (exit %d)\n", rec.Step, rec.TerminatedBy, cmp.Or(rec.Reason, string(rec.TerminatedBy)), rec.ExitCode)
	}
	return rec.ExitCode
}
