package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	icli "github.com/rodon-compute/rodon/internal/cli"
	"github.com/rodon-compute/rodon/internal/size"
	"github.com/rodon-compute/rodon/internal/stepfollow"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// confirmWait is how long `schedctl run` waits, after the step ended, for
// the node to confirm a cancel that was requested.
const confirmWait = 30 * time.Second

// runCmd is `schedctl run [FLAGS] -- ARGV...`: it submits a step, prints
// its stdout and stderr live to its own (with -o json: the stream's frames,
// one JSON object per line, on stdout), and exits with the step's exit
// code as the scheduler recorded it (128+signal when a signal killed it),
// or 1 with the reason when the step failed, was lost or expired.
//
// The first interrupt (Ctrl-C) cancels the step and keeps waiting for its
// confirmed end; the second stops waiting (the cancel stands).
type runCmd struct {
	id            string
	image         string
	cpu           float64
	memory        string
	timeout       time.Duration
	pids          int64
	workspaceSize string
	outputCap     string
	noInternet    bool
	env           icli.EnvFlag
	workspace     string
	baseRevision  string
	readOnly      bool
	tty           bool
	idempotent    bool
}

func newRunCmd() *runCmd { return &runCmd{} }

func (*runCmd) takesArgv()         {}
func (*runCmd) handlesInterrupts() {}

func (*runCmd) synopsis() string {
	return "run [--image NAME] [--cpu N] [--memory SIZE] [--timeout D] [--pids N] [--workspace-size SIZE] [--output-cap SIZE] [--no-internet] [--env K=V]... [--workspace ws-ID [--base-revision rev-ID] [--workspace-read-only]] [--tty] [--idempotent] [--id ID] -- ARGV..."
}

func (r *runCmd) flags(fs *flag.FlagSet) {
	fs.StringVar(&r.image, "image", "base", "image: base, python, or a containerd image reference")
	fs.Float64Var(&r.cpu, "cpu", cluster.DefaultRequest.CPU, "CPU cores reserved and allowed, such as 0.5")
	fs.StringVar(&r.memory, "memory", fmtSize(cluster.DefaultRequest.MemoryBytes), "memory reserved and allowed, such as 512m or 2g (1g and 1Gi are 2^30 bytes, 1G is 10^9)")
	def, hi := cluster.DefaultLimits, cluster.MaxLimits
	fs.DurationVar(&r.timeout, "timeout", 0, fmt.Sprintf("wall-clock limit, such as 10m (0: the default, %v; at most %v)", def.Timeout, hi.Timeout))
	fs.Int64Var(&r.pids, "pids", 0, fmt.Sprintf("limit of the step's processes and threads (0: the default, %d; at most %d)", def.Pids, hi.Pids))
	fs.StringVar(&r.workspaceSize, "workspace-size", "", fmt.Sprintf("size limit of the step's workspace, such as 2g (default %s; at most %s)",
		fmtSize(def.WorkspaceBytes), fmtSize(hi.WorkspaceBytes)))
	fs.StringVar(&r.outputCap, "output-cap", "", fmt.Sprintf("output kept of the step, head and tail, such as 128m (default %s; at most %s)",
		fmtSize(def.OutputBytes), fmtSize(hi.OutputBytes)))
	fs.BoolVar(&r.noInternet, "no-internet", false, "deny all network access")
	fs.Var(&r.env, "env", "environment variable K=V (repeatable)")
	fs.StringVar(&r.workspace, "workspace", "", "a workspace of the store (ws-...): the step sees a copy of its head (or of --base-revision) at /workspace, and its changes become a revision")
	fs.StringVar(&r.baseRevision, "base-revision", "", "the revision of --workspace the step starts from (rev-...; default: the head)")
	fs.BoolVar(&r.readOnly, "workspace-read-only", false, "mount --workspace read-only: the step makes no revision")
	fs.BoolVar(&r.tty, "tty", false, "give the step a terminal")
	fs.BoolVar(&r.idempotent, "idempotent", false, "the step may run again if its node is lost (default: at most once)")
	fs.StringVar(&r.id, "id", "", "step id (default: a random one)")
}

// fmtSize writes a byte count as the size flags take it (64MiB, 1GiB).
func fmtSize(n int64) string {
	if s := fmtBytes(n); strings.HasSuffix(s, "i") {
		return s + "B"
	}
	return fmt.Sprint(n)
}

// request builds and checks the step request from the flags.
func (r *runCmd) request(argv []string) (api.StepRequest, error) {
	req := api.StepRequest{
		ID:         r.id,
		Image:      r.image,
		Args:       argv,
		Env:        r.env,
		CPU:        r.cpu,
		Timeout:    api.Duration(r.timeout),
		Pids:       r.pids,
		NoInternet: r.noInternet,
		TTY:        r.tty,
		Idempotent: r.idempotent,
	}
	switch {
	case len(argv) == 0:
		return req, fmt.Errorf("%w: no command given: schedctl run [FLAGS] -- ARGV...", errUsage)
	case r.image == "":
		return req, fmt.Errorf("%w: --image: empty", errUsage)
	case !(r.cpu > 0):
		return req, fmt.Errorf("%w: --cpu %v: want a positive number of cores", errUsage, r.cpu)
	case r.timeout < 0:
		return req, fmt.Errorf("%w: --timeout %v: must not be negative", errUsage, r.timeout)
	case r.pids < 0:
		return req, fmt.Errorf("%w: --pids %d: must not be negative", errUsage, r.pids)
	}
	// The scheduler checks the limits against the cluster's table and
	// names the field; here only the sizes are parsed.
	for _, f := range []struct {
		name, value string
		dst         *int64
	}{{"--workspace-size", r.workspaceSize, &req.WorkspaceBytes}, {"--output-cap", r.outputCap, &req.OutputBytes}} {
		if f.value == "" {
			continue
		}
		n, err := size.Parse(f.value)
		if err != nil {
			return req, fmt.Errorf("%w: %s: %v", errUsage, f.name, err)
		}
		*f.dst = n
	}
	m, err := size.Parse(r.memory)
	if err != nil {
		return req, fmt.Errorf("%w: --memory: %v", errUsage, err)
	}
	if m <= 0 {
		return req, fmt.Errorf("%w: --memory %s: want a positive size", errUsage, r.memory)
	}
	req.MemoryBytes = m
	if r.workspace != "" {
		// A workspace of the store, by its id: never a host path.
		if err := cluster.ValidateWorkspaceID(r.workspace); err != nil {
			return req, fmt.Errorf("%w: --workspace: %v (a workspace of the store, such as the gateway's ws-... ids)", errUsage, err)
		}
		req.Workspace = r.workspace
	}
	if r.baseRevision != "" {
		if r.workspace == "" {
			return req, fmt.Errorf("%w: --base-revision needs --workspace", errUsage)
		}
		if err := cluster.ValidateRevisionID(r.baseRevision); err != nil {
			return req, fmt.Errorf("%w: --base-revision: %v", errUsage, err)
		}
		req.BaseRevision = r.baseRevision
	}
	if r.readOnly {
		if r.workspace == "" {
			return req, fmt.Errorf("%w: --workspace-read-only needs --workspace", errUsage)
		}
		req.WorkspaceReadOnly = true
	}
	if req.ID != "" {
		if err := cluster.ValidateStepID(cluster.StepID(req.ID)); err != nil {
			return req, fmt.Errorf("%w: --id: %v", errUsage, err)
		}
	} else {
		// Chosen here so that a submission whose answer was lost can be
		// retried without running the step twice.
		var b [6]byte
		rand.Read(b[:])
		req.ID = "run-" + hex.EncodeToString(b[:])
	}
	return req, nil
}

func (r *runCmd) run(ctx context.Context, c *cli, argv []string) (int, error) {
	req, err := r.request(argv)
	if err != nil {
		return 0, err
	}
	sc, err := c.client()
	if err != nil {
		return 0, err
	}
	warn := c.warnf("run")

	// Until the scheduler accepted the step, an interrupt just stops.
	sctx, release := c.interruptible(ctx)
	st, err := sc.SubmitStep(sctx, req)
	if client.IsCode(err, api.CodeConflict) && r.id == "" {
		// An earlier try of this request (same random ID) succeeded.
		st, err = sc.Step(sctx, req.ID)
	}
	if err = release(err); err != nil {
		if errors.Is(err, errInterrupted) {
			warn("interrupted while submitting step %s; see \"schedctl step %s\"", req.ID, req.ID)
			return exitInterrupted, nil
		}
		return 0, fmt.Errorf("submit step: %w", err)
	}

	// The watch, the interrupt handler and the cancel it sends end with
	// the session (a second interrupt detaches: ctx ends).
	sess, ctx := stepfollow.Start(ctx, c.follow(sc, warn), st)
	defer sess.Close()
	sess.HandleInterrupts(ctx, c.interrupts, func(ctx context.Context) {
		warn("cancelling step %s (interrupt again to stop waiting; the cancel stands)", st.ID)
		_, err := sc.CancelStep(ctx, st.ID, "interrupted in schedctl run")
		if err != nil && ctx.Err() == nil && !client.IsStatus(err, http.StatusConflict) {
			warn("cancel step %s: %v", st.ID, err)
		}
	})

	exit, err := sess.Follow(ctx)
	if err == nil || errors.Is(err, stepfollow.ErrNoStream) {
		if err != nil && exit == nil {
			if cur, _ := sess.Current(); cur.Node != "" {
				warn("output may be incomplete: %v", err)
			}
		}
		err = nil
		st, err = sess.WaitFor(ctx, api.Step.Terminal)
		if err == nil && !cancelSettled(st) {
			cctx, cancel := context.WithTimeout(ctx, confirmWait)
			var cerr error
			st, cerr = sess.WaitFor(cctx, cancelSettled)
			cancel()
			if cerr != nil && ctx.Err() == nil {
				warn("the cancel of step %s is not confirmed yet; see \"schedctl step %s\"", st.ID, st.ID)
			}
		}
	}
	if sess.Detached() {
		warn("stopped waiting for step %s; see \"schedctl step %s\"", st.ID, st.ID)
		return exitInterrupted, nil
	}
	if err != nil {
		return 0, fmt.Errorf("step %s: %w", st.ID, err)
	}
	return exitStatus(st, c.stderr), nil
}

// exitStatus is what `schedctl run` exits with for a terminal step: its
// exit code, or 1 when it has none. Ends other than a plain exit are
// explained on w.
func exitStatus(s api.Step, w io.Writer) int {
	var notes []string
	if s.Reason != "" {
		notes = append(notes, s.Reason)
	}
	if c := s.Cancel; c != nil {
		switch {
		case !c.ConfirmedAt.IsZero():
			notes = append(notes, "cancel confirmed")
		case c.Unverified != "":
			notes = append(notes, "cancel unverified: "+c.Unverified)
		default:
			notes = append(notes, "cancel not confirmed yet")
		}
	}
	if s.State == "lost" && !s.Idempotent {
		notes = append(notes, "not re-run: the step is not idempotent")
	}
	why := ""
	if len(notes) > 0 {
		why = ": " + strings.Join(notes, "; ")
	}
	switch {
	case (s.State == "exited" || s.State == "cancelled") && s.ExitCode != nil:
		if s.TerminatedBy != "" && s.TerminatedBy != "exit" {
			fmt.Fprintf(w, "schedctl run: step %s %s by %s with exit code %d%s\n", s.ID, s.State, s.TerminatedBy, *s.ExitCode, why)
		}
		return *s.ExitCode
	}
	fmt.Fprintf(w, "schedctl run: step %s %s%s\n", s.ID, s.State, why)
	return exitError
}

// cancelSettled reports whether a step's cancel, if any, is confirmed or
// known to be unverifiable.
func cancelSettled(s api.Step) bool {
	return s.Cancel == nil || !s.Cancel.ConfirmedAt.IsZero() || s.Cancel.Unverified != ""
}
