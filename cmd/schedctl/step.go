package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

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
		kv.row("reason:", printable(s.Reason))
	}
	if s.Cause != "" {
		kv.row("cause:", s.Cause)
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
	if sec := s.Spec.Secrets; sec != nil {
		// Names only: values never reach the scheduler.
		kv.row("secrets:", strings.Join(sec.Names, " ")+" (from "+sec.Gateway+")")
	}
	if s.Spec.Workspace != "" {
		ws := s.Spec.Workspace
		if s.Spec.BaseRevision != "" {
			ws += " from " + s.Spec.BaseRevision
		}
		kv.row("workspace:", ws)
	}
	if s.Revision != "" {
		kv.row("revision:", s.Revision)
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
			desc += ", unverified: " + printable(c.Unverified)
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
	var files *api.FilesChanged
	for _, e := range s.Events {
		t.row("  "+fmtTime(e.Time), printable(e.Kind), printable(e.Message))
		if e.Kind == api.EventFilesChanged {
			files = e.Files
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	if files != nil {
		printFiles(w, files)
	}
	return nil
}

// printFiles writes the paths of a files_changed event's payload, one a
// line after its sign (+ added, ~ modified, - removed), each as printable
// shows it, so that no name reads as two.
func printFiles(w io.Writer, fc *api.FilesChanged) {
	fmt.Fprintln(w, "\nfiles changed:")
	for _, l := range []struct {
		sign  string
		paths []string
	}{{"+", fc.Added}, {"~", fc.Modified}, {"-", fc.Removed}} {
		for _, p := range l.paths {
			fmt.Fprintf(w, "  %s %s\n", l.sign, printable(p))
		}
	}
	if fc.More > 0 {
		fmt.Fprintf(w, "  and %d more\n", fc.More)
	}
	if len(fc.Added)+len(fc.Modified)+len(fc.Removed)+fc.More == 0 {
		fmt.Fprintln(w, "  none")
	}
}

// printable is s as a terminal shows it safely on one line: as it is when
// it is valid UTF-8 of printable characters (spaces included) that does
// not start with a quote or end in a space; else quoted with Go's escapes
// (strconv.Quote), so that a control character, a newline or a tab is
// seen as its escape and cannot move the cursor, end the line or shift a
// column.
func printable(s string) string {
	if !utf8.ValidString(s) || strings.HasPrefix(s, `"`) || strings.HasPrefix(s, " ") || strings.HasSuffix(s, " ") {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if r != ' ' && !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// fmtLimits describes step limits (a step's in force, or a node's
// maxima): pids, timeout, workspace size and output cap.
func fmtLimits(l api.Limits) string {
	return fmt.Sprintf("pids %d, timeout %v, workspace %s, output %s",
		l.Pids, time.Duration(l.Timeout), fmtBytes(l.WorkspaceBytes), fmtBytes(l.OutputBytes))
}
