package agentd

import (
	"context"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

// adoptOrphans finds sandboxes left by an earlier agent of this node. An
// attempt the scheduler still assigns here is waited for again and its exit
// reported (output written while no agent ran is not collected); any other
// is destroyed.
func (a *Agent) adoptOrphans(ctx context.Context) {
	orphans, err := a.rt.Orphans(ctx)
	if err != nil {
		a.logger.Warn("look for sandboxes of an earlier agent", "error", err)
		return
	}
	if len(orphans) == 0 {
		return
	}
	wanted := map[cluster.StepAttempt]cluster.Step{}
	if _, steps, err := a.sched.Assignments(ctx, a.cfg.Node, 0, 0); err == nil {
		for _, st := range steps {
			wanted[cluster.StepAttempt{Step: st.ID, Attempt: st.Attempts}] = st
		}
	} else {
		a.logger.Warn("read assignments to adopt sandboxes", "error", err)
	}
	for _, o := range orphans {
		sb := o.Sandbox
		key := cluster.StepAttempt{Step: sb.Step().ID, Attempt: sb.Step().Attempt}
		st, ok := wanted[key]
		if ok && sb.Resume(ctx) == nil {
			a.logger.Info("found the sandbox of an assigned step again; waiting for its exit", "step", key.Step, "attempt", key.Attempt, "running", o.Running)
			r := newStepRun(a, st)
			a.mu.Lock()
			a.steps[st.ID] = r
			a.mu.Unlock()
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				defer a.forget(r.id)
				rec, err := r.wait(ctx, sb)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					rec = failedRecord(r.id, err)
				}
				rec.Reason = joinReason(rec.Reason, "agent restarted during the step; output after the restart was not collected")
				r.finish(ctx, nil, sb, rec)
			}()
			continue
		}
		a.logger.Info("destroying the sandbox of a step no longer assigned here", "step", key.Step, "attempt", key.Attempt)
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		if err := sb.Destroy(dctx); err != nil {
			a.logger.Warn("destroy orphaned sandbox", "step", key.Step, "error", err)
		}
		cancel()
	}
}

func joinReason(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
