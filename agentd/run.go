package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/treecopy"
)

// Run runs one step from start to cleanup: Create, Start, Wait (ending the
// step at its timeout), copying the workspace back, and Destroy. Cancelling
// ctx cancels the step (terminated_by=user); Run still waits for the exit
// that containerd reports and for cleanup before it returns.
//
// The record's state is exited, cancelled, or failed when the step could
// not be started; err is non-nil only when no truthful record can be given
// (containerd unreachable) or the step is invalid.
func (r *Runtime) Run(ctx context.Context, st Step, stdout, stderr io.Writer) (cluster.ExitRecord, error) {
	queued := time.Now().UTC()
	sb, err := r.Create(ctx, st)
	if err != nil {
		if errors.Is(err, ErrNoImage) || errors.Is(err, errInvalid) {
			return failed(st.ID, queued, err), nil
		}
		return cluster.ExitRecord{}, err
	}
	// Cleanup must run even when the caller has given up.
	cleanupCtx := context.WithoutCancel(ctx)
	rec, runErr := r.runIn(ctx, sb, st, stdout, stderr)
	if runErr == nil && st.Workspace != "" && rec.State != cluster.StateFailed {
		if err := treecopy.Mirror(sb.wsDir, st.Workspace); err != nil {
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
			rec := failed(st.ID, time.Time{}, err)
			rec.Phases.Created = sb.phases.Created
			return rec, nil
		}
		return cluster.ExitRecord{}, err
	}
	var timeout <-chan time.Time
	if st.Timeout > 0 {
		t := time.NewTimer(st.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	waitCtx, cancelWait := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWait()
	type result struct {
		rec cluster.ExitRecord
		err error
	}
	done := make(chan result, 1)
	go func() {
		rec, err := sb.Wait(waitCtx)
		done <- result{rec, err}
	}()
	cancelled := ctx.Done()
	for {
		select {
		case res := <-done:
			return res.rec, res.err
		case <-timeout:
			timeout = nil
			if err := sb.Kill(waitCtx, cluster.ByTimeout, r.cfg.TimeoutGrace); err != nil {
				r.logger.Warn("kill step at timeout", "step", st.ID, "error", err)
			}
		case <-cancelled:
			cancelled = nil
			if err := sb.Kill(waitCtx, cluster.ByUser, r.cfg.KillGrace); err != nil {
				r.logger.Warn("cancel step", "step", st.ID, "error", err)
			}
		}
	}
}

func failed(id cluster.StepID, queued time.Time, err error) cluster.ExitRecord {
	return cluster.ExitRecord{
		Step:         id,
		State:        cluster.StateFailed,
		ExitCode:     -1,
		TerminatedBy: cluster.ByPlatform,
		Reason:       err.Error(),
		Phases:       cluster.Phases{Queued: queued},
	}
}
