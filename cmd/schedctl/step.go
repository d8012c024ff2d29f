package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// stepCmd is `schedctl step ID`: one step's record, with its phases,
// cancel and events.
type stepCmd struct{}

func (*stepCmd) synopsis() string    { return "step ID [-o json]" }
func (*stepCmd) flags(*flag.FlagSet) {}

func (*stepCmd) run(ctx context.Context, c *cli, args []string) (int, error) {
	if err := wantStepID(args); err != nil {
		return 0, err
	}
	sc, err := c.client()
	if err != nil {
		return 0, err
	}
	st, err := sc.Step(ctx, args[0])
	if err != nil {
		return 0, err
	}
	if c.g.json() {
		return 0, printJSON(c.stdout, st)
	}
	return 0, printStep(c.stdout, st)
}

// printStep writes a step's record for people.
func printStep(w io.Writer, s api.Step) error {
	kv := newTable(w)
	kv.row("id:", s.ID)
	kv.row("state:", s.State)
	if s.ExitCode != nil {
		kv.row("exit code:", fmtExitCode(s.ExitCode))
	}
	if s.TerminatedBy != "" {
		kv.row("terminated by:", s.TerminatedBy)
	}
	if s.Reason != "" {
		kv.row("reason:", s.Reason)
	}
	kv.row("node:", s.Node)
	kv.row("attempts:", fmt.Sprint(s.Attempts))
	idem := "no (at most once)"
	if s.Idempotent {
		idem = "yes (re-placed if its node is lost)"
	}
	kv.row("idempotent:", idem)
	kv.row("command:", fmtArgv(s.Spec.Args, 0))
	kv.row("image:", s.Spec.Image)
	if len(s.Spec.EnvNames) > 0 {
		// Names only: the scheduler never returns the values.
		kv.row("env:", strings.Join(s.Spec.EnvNames, " "))
	}
	kv.row("resources:", fmt.Sprintf("%s cpu, %s memory", fmtCPU(s.Spec.CPU), fmtBytes(s.Spec.MemoryBytes)))
	kv.row("limits:", fmtLimits(api.Limits{Pids: s.Spec.Pids, Timeout: s.Spec.Timeout,
		WorkspaceBytes: s.Spec.WorkspaceBytes, OutputBytes: s.Spec.OutputBytes}))
	if c := s.Cancel; c != nil {
		desc := "requested " + fmtTime(c.RequestedAt)
		switch {
		case !c.ConfirmedAt.IsZero():
			desc += ", confirmed " + fmtTime(c.ConfirmedAt)
		case c.Unverified != "":
			desc += ", unverified: " + c.Unverified
		default:
			desc += ", not confirmed yet"
		}
		kv.row("cancel:", desc)
	}
	p := s.Phases
	for _, ph := range []struct {
		name string
		t    string
	}{
		{"queued", fmtTime(p.Queued)}, {"placed", fmtTime(p.Placed)}, {"created", fmtTime(p.Created)},
		{"started", fmtTime(p.Started)}, {"first output", fmtTime(p.FirstOutput)},
		{"exited", fmtTime(p.Exited)}, {"cleaned up", fmtTime(p.CleanedUp)},
	} {
		if ph.t != "" {
			kv.row(ph.name+":", ph.t)
		}
	}
	if err := kv.flush(); err != nil {
		return err
	}
	if len(s.Events) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nevents:")
	t := newTable(w, "  TIME", "KIND", "MESSAGE")
	for _, e := range s.Events {
		t.row("  "+fmtTime(e.Time), e.Kind, strings.ReplaceAll(e.Message, "\n", " "))
	}
	return t.flush()
}

// fmtLimits describes step limits (a step's in force, or a node's
// maxima): pids, timeout, workspace size and output cap.
func fmtLimits(l api.Limits) string {
	return fmt.Sprintf("pids %d, timeout %v, workspace %s, output %s",
		l.Pids, time.Duration(l.Timeout), fmtBytes(l.WorkspaceBytes), fmtBytes(l.OutputBytes))
}
