package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/bundles"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/oci"
)

// A stepRun is one attempt of a step on this node, from assignment to
// cleanup. Its run goroutine is the only one that touches the sandbox's
// lifecycle; cancel and abandon only signal it.
type stepRun struct {
	a       *Agent
	id      cluster.StepID
	attempt int
	spec    cluster.StepSpec
	// limits are the limits in force (the spec's, defaults for zeros);
	// limitsErr says why the node refuses them.
	limits    cluster.Limits
	limitsErr error

	// started is closed once the step's process runs (sb is set then).
	started chan struct{}
	// trees are the attempt's workspace and library on the host, owned
	// by the goroutine that runs the attempt.
	trees trees

	// secrets are the values of the step's secrets once fetched, and
	// secretEnv the environment entries holding them (shared with the
	// sandbox's step); both owned by the goroutine that runs the attempt,
	// and cleared by forgetSecrets when it ends.
	secrets   map[string]string
	secretEnv []string

	// ended is set once the exit was reported: the attempt only cleans
	// up from then, and heartbeats no longer list it (the scheduler,
	// which has its end, would call it unwanted and the agent would
	// drop its cleaned_up report).
	ended atomic.Bool

	// reported is closed when the last report sent beside the step's
	// start (starting, sandbox_warm) is done; they go in order, and run
	// waits for them before the running report or the exit (awaitReports).
	// Only run's goroutine sends them.
	reported chan struct{}

	mu        sync.Mutex
	sb        *Sandbox      // once created
	stop      chan struct{} // closed by cancel or abandon
	why       cluster.TerminatedBy
	abandoned bool
}

func newStepRun(a *Agent, st cluster.Step) *stepRun {
	r := &stepRun{a: a, id: st.ID, attempt: st.Attempts, spec: st.Spec, stop: make(chan struct{}), started: make(chan struct{})}
	r.limits, r.limitsErr = stepLimits(st.Spec, a.cfg.MaxLimits)
	return r
}

func (r *stepRun) signal(why cluster.TerminatedBy, abandon bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.why != "" {
		return
	}
	r.why, r.abandoned = why, abandon
	close(r.stop)
}

func (r *stepRun) cancel()  { r.signal(cluster.ByUser, false) }
func (r *stepRun) abandon() { r.signal(cluster.ByPlatform, true) }

func (r *stepRun) stopped() (cluster.TerminatedBy, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.why, r.abandoned
}

// run takes the attempt from placed to cleaned up. If ctx ends (the agent
// stops) while the step runs, run returns and leaves the sandbox to the
// next agent.
func (r *stepRun) run(ctx context.Context) {
	defer r.a.forget(r.id)
	defer r.awaitReports() // none outlives the attempt's goroutine
	r.a.metrics.running.Inc()
	defer r.a.metrics.running.Dec()
	logger := r.a.logger.With("step", r.id, "attempt", r.attempt)
	r.a.logs.Remove(r.id) // an earlier attempt's log on this node
	lg, err := r.a.logs.CreateLimited(r.id, min(r.limits.OutputBytes, r.a.cfg.MaxLimits.OutputBytes))
	if err != nil {
		r.finish(ctx, nil, nil, r.failedRecord(fmt.Errorf("create output log: %w", err)))
		return
	}
	defer lg.Close()
	defer r.forgetSecrets()
	// Beside the sandbox's making: one commit fewer before the step runs.
	r.async(func() { r.phase(ctx, cluster.StateStarting, cluster.Phases{}) })
	st, err := r.step(ctx)
	if err != nil {
		r.finish(ctx, lg, nil, r.failedRecord(err))
		return
	}
	createStart := time.Now()
	sb, err := r.sandboxFor(ctx, st, lg)
	if err != nil {
		r.finish(ctx, lg, nil, r.failedRecord(sandboxFailure(err)))
		return
	}
	r.a.metrics.create.Observe(time.Since(createStart).Seconds())
	r.mu.Lock()
	r.sb = sb
	r.mu.Unlock()
	// The created time goes with the running report (or the exit record
	// if the start fails): one commit fewer before the step runs.
	// The mask's call site (secrets.go, maskOutput): every byte of the
	// step's output goes through it before the log has it.
	values := r.secretValues()
	stdout, stderr := maskOutput(values, lg.Stdout()), maskOutput(values, lg.Stderr())
	// flushMasks writes what the masks held back (a tail that may start a
	// value) before the log is finished.
	flushMasks := func() {
		for _, w := range []io.Writer{stdout, stderr} {
			if c, ok := w.(io.Closer); ok {
				if err := c.Close(); err != nil {
					logger.Warn("flush the step's masked output", "error", err)
				}
			}
		}
	}
	err = sb.Start(ctx, stdout, stderr)
	r.awaitReports()
	if err != nil {
		flushMasks()
		rec := r.failedRecord(err)
		rec.Phases.Created = sb.phases.Created
		r.finish(ctx, lg, sb, rec)
		return
	}
	close(r.started)
	// The process has its environment: from here the values are kept
	// for the mask only.
	clear(r.secretEnv)
	r.secretEnv = nil
	r.phase(ctx, cluster.StateRunning, cluster.Phases{Created: sb.phases.Created, Started: sb.phases.Started})
	stopWatch := r.watchDenied(ctx, lg, sb)
	rec, err := r.wait(ctx, sb)
	stopWatch()
	if ctx.Err() == nil {
		flushMasks()
	}
	if err != nil {
		if ctx.Err() != nil {
			logger.Info("agent stopping; the step's sandbox stays for the next agent")
			return
		}
		rec = r.failedRecord(fmt.Errorf("wait for the step: %w", err))
		rec.TerminatedBy = cluster.ByPlatform
	}
	if why, _ := r.stopped(); why == "" && (st.Workspace == "" || st.WorkspaceReadOnly) {
		// Nothing comes back from this sandbox, so the exit containerd
		// reported is the step's whole result: it is reported at once,
		// and the sandbox is stopped and destroyed after it (cleaned_up
		// says when). A cancelled step keeps the order below: its cancel
		// is confirmed only once the whole sandbox is gone.
		r.record(ctx, lg, rec)
		if err := sb.Quiesce(context.WithoutCancel(ctx)); err != nil {
			logger.Warn("stop sandbox after the step", "error", err)
		}
		r.cleanup(ctx, sb)
		return
	}
	// Nothing of the sandbox runs from here: what the workspace holds is
	// final, and the exit (and a cancel's confirmation) is reported only
	// after it was read back. Halt proves it in milliseconds; Quiesce
	// (stop the pod, delete its task) is the slower way if it cannot.
	err = sb.Halt()
	if err != nil {
		logger.Warn("halt the sandbox after the step; stopping it instead", "error", err)
		err = sb.Quiesce(context.WithoutCancel(ctx))
	}
	if err != nil {
		logger.Warn("stop sandbox after the step", "error", err)
		rec.Reason = joinReason(rec.Reason, "the sandbox could not be stopped after the step, so its workspace was not copied back")
	} else if rec.State != cluster.StateFailed && st.Workspace != "" && !st.WorkspaceReadOnly {
		rec.Workspace = r.readBack(ctx, lg, sb)
	}
	r.finish(ctx, lg, sb, rec)
}

// step builds the runtime's step from the spec, its workspace and library
// materialised on the host.
func (r *stepRun) step(ctx context.Context) (Step, error) {
	st := Step{
		ID: r.id, Image: bundles.Ref(r.spec.Image), Args: r.spec.Args, Env: r.spec.Env,
		Limits:         oci.Limits{CPU: r.spec.CPU, MemoryBytes: r.spec.MemoryBytes, Pids: r.limits.Pids},
		WorkspaceBytes: r.limits.WorkspaceBytes,
		Timeout:        r.limits.Timeout, Attempt: r.attempt, NoInternet: r.spec.NoInternet, TTY: r.spec.TTY,
		WorkspaceReadOnly: r.workspaceReadOnly(),
	}
	if r.limitsErr != nil {
		return st, failure(api.CauseInvalidStep, r.limitsErr.Error(), nil)
	}
	if r.spec.EnvError != "" {
		return st, failure(api.CauseInvalidStep, "environment: "+r.spec.EnvError, nil)
	}
	if r.spec.Workspace != "" && r.spec.WorkspaceAccess == nil {
		// No workspace lives on a node: without the URLs of its revision
		// the step cannot see it.
		return st, failure(api.CauseInvalidStep, fmt.Sprintf("the assignment names workspace %s but carries no access to it (is the scheduler older than the node?)", r.spec.Workspace), nil)
	}
	if err := r.prepareTrees(ctx, &st); err != nil {
		return st, err
	}
	if sec := r.spec.Secrets; sec != nil {
		// Last before the sandbox: the ticket is single use.
		values, err := fetchSecrets(ctx, r.a.cfg.SecretsClient, r.id, r.attempt, sec)
		if err != nil {
			return st, err
		}
		env := make([]string, 0, len(r.spec.Env)+len(sec.Names))
		env = append(env, r.spec.Env...)
		for _, n := range sec.Names {
			env = append(env, n+"="+values[n])
		}
		r.secrets, r.secretEnv, st.Env = values, env, env
	}
	return st, nil
}

// secretValues returns the values of the step's secrets (nil without).
func (r *stepRun) secretValues() []string {
	if len(r.secrets) == 0 {
		return nil
	}
	out := make([]string, 0, len(r.secrets))
	for _, v := range r.secrets {
		out = append(out, v)
	}
	return out
}

// forgetSecrets drops the step's secret values and the environment
// entries that hold them, once the step ended (Go strings cannot be
// overwritten: every reference this agent held is cleared).
func (r *stepRun) forgetSecrets() {
	clear(r.secrets)
	clear(r.secretEnv)
	r.secrets, r.secretEnv = nil, nil
}

// workspaceReadOnly says the step's workspace is read-only: it is copied
// in, mounted read-only, and neither read back nor reported.
func (r *stepRun) workspaceReadOnly() bool {
	return r.spec.WorkspaceReadOnly || r.spec.WorkspaceAccess != nil && r.spec.WorkspaceAccess.ReadOnly
}

// deniedPoll is how often the egress counters of a running step are read.
const deniedPoll = 500 * time.Millisecond

// watchDenied turns the egress filter's counters of sb into step events,
// in the output log and to the scheduler, while the step runs. The returned
// func stops the watch after one last read, so that packets denied just
// before the exit are reported too.
func (r *stepRun) watchDenied(ctx context.Context, lg *logstore.Log, sb *Sandbox) func() {
	if sb.net == nil {
		return func() {}
	}
	var t deniedTracker
	poll := func() {
		c, err := sb.Denied()
		if err != nil {
			r.a.logger.Warn("read egress counters", "step", r.id, "error", err)
			return
		}
		des := t.events(c, time.Now().UTC())
		if len(des) == 0 {
			return
		}
		evs := make([]cluster.Event, 0, len(des))
		for _, d := range des {
			if err := lg.Event(d.event); err != nil {
				r.a.logger.Warn("record egress event", "step", r.id, "error", err)
			}
			r.a.metrics.denied.WithLabelValues(d.reason.String()).Add(float64(d.delta))
			evs = append(evs, d.event)
		}
		r.report(ctx, "events", func(ctx context.Context) error {
			return r.a.sched.StepEvents(ctx, cluster.StepEvents{Step: r.id, Node: r.a.cfg.Node, Attempt: r.attempt, Events: evs})
		})
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(deniedPoll)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				poll()
				return
			case <-tick.C:
				poll()
			}
		}
	}()
	return func() { close(stop); <-done }
}

// wait waits for the step's exit, ending it at its timeout or when it is
// cancelled or abandoned.
func (r *stepRun) wait(ctx context.Context, sb *Sandbox) (cluster.ExitRecord, error) {
	return sb.Supervise(ctx, r.limits.Timeout, r.stop, func() cluster.TerminatedBy {
		why, _ := r.stopped()
		return why
	})
}

// finish records the exit in the output log, reports it (unless the
// scheduler abandoned the attempt), confirms a cancel, and destroys the
// sandbox.
func (r *stepRun) finish(ctx context.Context, lg *logstore.Log, sb *Sandbox, rec cluster.ExitRecord) {
	r.record(ctx, lg, rec)
	r.cleanup(ctx, sb)
}

// record records the exit in the output log and reports it (unless the
// scheduler abandoned the attempt), with a cancel's confirmation.
func (r *stepRun) record(ctx context.Context, lg *logstore.Log, rec cluster.ExitRecord) {
	r.awaitReports()
	why, abandoned := r.stopped()
	if lg != nil {
		// The output held back (the tail past the output cap) goes into
		// the log first, and the scheduler hears how much was dropped
		// before it hears of the exit.
		ev, truncated, err := lg.Finish()
		if err != nil {
			r.a.logger.Warn("append held-back output", "step", r.id, "error", err)
		}
		if truncated && !abandoned {
			r.report(ctx, "events", func(ctx context.Context) error {
				return r.a.sched.StepEvents(ctx, cluster.StepEvents{Step: r.id, Node: r.a.cfg.Node, Attempt: r.attempt, Events: []cluster.Event{ev}})
			})
		}
		if err := lg.Exit(rec); err != nil {
			r.a.logger.Warn("record exit in output log", "step", r.id, "error", err)
		}
	}
	r.a.metrics.steps.WithLabelValues(string(rec.State), string(rec.TerminatedBy)).Inc()
	if !abandoned {
		r.report(ctx, "exit", func(ctx context.Context) error {
			return r.a.sched.StepExit(ctx, cluster.StepExit{Node: r.a.cfg.Node, Attempt: r.attempt, Record: rec})
		})
		r.ended.Store(true)
		if why == cluster.ByUser && rec.State != cluster.StateFailed {
			r.report(ctx, "cancel confirmation", func(ctx context.Context) error {
				return r.a.sched.ConfirmCancel(ctx, cluster.ConfirmCancel{Step: r.id, Node: r.a.cfg.Node, Attempt: r.attempt})
			})
		}
	}
}

// cleanup destroys the sandbox (sb may be nil) and the attempt's trees,
// and reports the cleaned_up phase.
func (r *stepRun) cleanup(ctx context.Context, sb *Sandbox) {
	_, abandoned := r.stopped()
	// The attempt's trees go once the exit is reported, after the
	// sandbox that mounts them.
	defer r.removeTrees()
	if sb == nil {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	cleanupStart := time.Now()
	if err := sb.Destroy(dctx); err != nil {
		r.a.logger.Warn("destroy sandbox", "step", r.id, "error", err)
		return
	}
	r.a.metrics.cleanup.Observe(time.Since(cleanupStart).Seconds())
	// An attempt abandoned after its exit was reported (a heartbeat's
	// answer crossing the exit report) still reports its cleanup.
	if !abandoned || r.ended.Load() {
		r.phase(ctx, "", cluster.Phases{CleanedUp: time.Now().UTC()})
	}
}

func (r *stepRun) phase(ctx context.Context, state cluster.StepState, p cluster.Phases) {
	r.report(ctx, "phase", func(ctx context.Context) error {
		return r.a.sched.StepPhase(ctx, cluster.StepPhase{Step: r.id, Node: r.a.cfg.Node, Attempt: r.attempt, State: state, Phases: p})
	})
}

// async sends a report (send calls r.report) after those sent by async
// before it, without waiting for it.
func (r *stepRun) async(send func()) {
	prev, done := r.reported, make(chan struct{})
	r.reported = done
	go func() {
		defer close(done)
		if prev != nil {
			<-prev
		}
		send()
	}()
}

// awaitReports waits until the reports sent by async are done.
func (r *stepRun) awaitReports() {
	if r.reported != nil {
		<-r.reported
	}
}

// reportGrace is how long reports may still be sent after the agent was
// told to stop, so that an exit that happened just before is not lost.
const reportGrace = 10 * time.Second

// report sends one report to the scheduler, retrying while it fails (a
// leader change, a scheduler briefly unreachable) until it is accepted or
// refused for good (a stale attempt), or the agent has been stopping for
// reportGrace.
func (r *stepRun) report(ctx context.Context, what string, send func(context.Context) error) {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(reportGrace, cancel) })
	defer stop()
	for {
		err := send(rctx)
		switch {
		case err == nil:
			return
		case errors.Is(err, ErrReportRefused):
			r.a.logger.Warn("scheduler refused a report", "what", what, "step", r.id, "attempt", r.attempt, "error", err)
			return
		}
		select {
		case <-rctx.Done():
			r.a.logger.Warn("report not delivered before the agent stopped", "what", what, "step", r.id, "attempt", r.attempt, "error", err)
			return
		case <-time.After(r.a.cfg.Heartbeat / 2):
		}
	}
}

// ErrReportRefused is what a Scheduler's report methods wrap when the
// scheduler refused a report for good (4xx): it is not retried.
var ErrReportRefused = errors.New("report refused")

// failedRecord is the exit record of the step failed with err, which
// goes to the node's log.
func (r *stepRun) failedRecord(err error) cluster.ExitRecord {
	return failed(r.a.logger, r.id, time.Time{}, err)
}

func (r *stepRun) sandbox() *Sandbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sb
}
