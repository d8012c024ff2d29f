package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

// Run runs one step from start to cleanup: Create, Start, Wait (ending the
// step at its timeout), Quiesce (nothing of the sandbox runs any more),
// ReadBack of the workspace, and Destroy. Cancelling
// ctx cancels the step (terminated_by=user); Run still waits for the exit
// that containerd reports and for cleanup before it returns.
//
// The record's state is exited, cancelled, or failed when the step could
// not be started; err is non-nil only when no truthful record can be given
// (containerd unreachable) or the step is invalid.
func (r *Runtime) Run(ctx context.Context, st Step, stdout, stderr io.Writer) (cluster.ExitRecord, error) {
	return r.RunWithEvents(ctx, st, stdout, stderr, nil)
}

// RunWithEvents is Run, and calls onEvent (if not nil) with the step's
// egress events once the step has exited: one per reason the filter denied
// packets for, with the count and the last destination.
func (r *Runtime) RunWithEvents(ctx context.Context, st Step, stdout, stderr io.Writer, onEvent func(cluster.Event)) (cluster.ExitRecord, error) {
	queued := time.Now().UTC()
	sb, err := r.Create(ctx, st)
	if err != nil {
		if errors.Is(err, ErrNoImage) || errors.Is(err, errInvalid) || errors.Is(err, ErrWorkspaceTooLarge) || errors.Is(err, ErrLowDisk) {
			return failed(r.logger, st.ID, queued, err), nil
		}
		return cluster.ExitRecord{}, err
	}
	// Cleanup must run even when the caller has given up.
	cleanupCtx := context.WithoutCancel(ctx)
	rec, runErr := r.runIn(ctx, sb, st, stdout, stderr)
	if onEvent != nil && sb.net != nil {
		var t deniedTracker
		c, err := sb.Denied()
		if err != nil {
			runErr = errors.Join(runErr, fmt.Errorf("read egress counters: %w", err))
		}
		for _, d := range t.events(c, time.Now().UTC()) {
			onEvent(d.event)
		}
	}
	if err := sb.Quiesce(cleanupCtx); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("stop sandbox after the step: %w", err))
	} else if runErr == nil && rec.State != cluster.StateFailed {
		if _, err := sb.ReadBack(); err != nil {
			runErr = fmt.Errorf("copy workspace back: %w", err)
		}
	}
	dctx, cancel := context.WithTimeout(cleanupCtx, 2*time.Minute)
	defer cancel()
	if err := sb.Destroy(dctx); err != nil {
		return rec, errors.Join(runErr, fmt.Errorf("clean up sandbox %s: %w", st.ID, err))
	}
	rec.Phases.Queued = queued
	rec.Phases.CleanedUp = time.Now().UTC()
	return rec, runErr
}

func (r *Runtime) runIn(ctx context.Context, sb *Sandbox, st Step, stdout, stderr io.Writer) (cluster.ExitRecord, error) {
	if err := sb.Start(ctx, stdout, stderr); err != nil {
		if errors.Is(err, ErrStartFailed) {
			rec := failed(r.logger, st.ID, time.Time{}, err)
			rec.Phases.Created = sb.phases.Created
			return rec, nil
		}
		return cluster.ExitRecord{}, err
	}
	// The wait outlives ctx: a cancelled caller still gets the exit that
	// containerd reports for the cancelled step.
	return sb.Supervise(context.WithoutCancel(ctx), st.Timeout, ctx.Done(), func() cluster.TerminatedBy { return cluster.ByUser })
}
