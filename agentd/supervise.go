package agentd

import (
	"context"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

// Supervise waits for the step's exit like Wait, and ends the step on the
// way: at timeout (if positive) with terminated_by=timeout, and when stop
// is closed with the cause why() names. The exit record still comes only
// from containerd. ctx bounds the wait itself; when it ends first,
// Supervise returns ctx's error and leaves the step running.
func (s *Sandbox) Supervise(ctx context.Context, timeout time.Duration, stop <-chan struct{}, why func() cluster.TerminatedBy) (cluster.ExitRecord, error) {
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	type result struct {
		rec cluster.ExitRecord
		err error
	}
	done := make(chan result, 1)
	go func() {
		rec, err := s.Wait(ctx)
		done <- result{rec, err}
	}()
	for {
		select {
		case res := <-done:
			return res.rec, res.err
		case <-deadline:
			deadline = nil
			if err := s.Kill(ctx, cluster.ByTimeout, s.rt.cfg.TimeoutGrace); err != nil {
				s.rt.logger.Warn("kill step at its timeout", "step", s.step.ID, "error", err)
			}
		case <-stop:
			stop = nil
			cause := why()
			if err := s.Kill(ctx, cause, s.rt.cfg.KillGrace); err != nil {
				s.rt.logger.Warn("kill step", "step", s.step.ID, "cause", cause, "error", err)
			}
		}
	}
}
