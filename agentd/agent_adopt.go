package agentd

import (
	"context"
	"fmt"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// adoptOrphans finds sandboxes left by an earlier agent of this node. An
// attempt the scheduler still assigns here is waited for again and its exit
// reported (output written while no agent ran is not collected); any other
// is destroyed. It returns the sandbox ids of the attempts adopted, whose
// trees stay.
func (a *Agent) adoptOrphans(ctx context.Context) (adopted map[string]bool) {
	adopted = map[string]bool{}
	orphans, err := a.rt.Orphans(ctx)
	if err != nil {
		a.logger.Warn("look for sandboxes of an earlier agent", "error", err)
		return adopted
	}
	wanted := map[cluster.StepAttempt]cluster.Step{}
	var steps []cluster.Step
	for {
		_, steps, err = a.sched.Assignments(ctx, a.cfg.Node, 0, 0)
		if err == nil {
			break
		}
		a.logger.Warn("read assignments to adopt sandboxes; retrying", "error", err)
		select {
		case <-ctx.Done():
			return adopted
		case <-time.After(a.cfg.Heartbeat):
		}
	}
	for _, st := range steps {
		wanted[cluster.StepAttempt{Step: st.ID, Attempt: st.Attempts}] = st
	}
	defer a.reportVanished(ctx, steps)
	for _, o := range orphans {
		sb := o.Sandbox
		key := cluster.StepAttempt{Step: sb.Step().ID, Attempt: sb.Step().Attempt}
		st, ok := wanted[key]
		if ok && sb.Resume(ctx) == nil {
			a.logger.Info("found the sandbox of an assigned step again; waiting for its exit", "step", key.Step, "attempt", key.Attempt, "running", o.Running)
			r := newStepRun(a, st)
			r.sb = sb
			close(r.started)
			adopted[sb.treeID()] = true
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
					rec = failed(a.logger, r.id, time.Time{}, err)
				}
				rec.Reason = joinReason(rec.Reason, "agent restarted during the step; output after the restart was not collected")
				// As for any step: nothing of the sandbox runs when its
				// workspace is read back and its exit reported.
				if err := sb.Quiesce(context.WithoutCancel(ctx)); err != nil {
					rec.Reason = joinReason(rec.Reason, "the sandbox could not be stopped after the step, so its workspace was not copied back: "+err.Error())
				} else if rec.State != cluster.StateFailed && sb.Step().Workspace != "" && !sb.Step().WorkspaceReadOnly && !r.workspaceReadOnly() {
					rec.Workspace = r.readBack(ctx, nil, sb)
				}
				r.finish(ctx, nil, sb, rec)
			}()
			continue
		}
		if key.Step == "" {
			// A pooled sandbox no step claimed: nothing proves none ran.
			a.logger.Info("destroying a pooled sandbox of an earlier agent", "sandbox", sb.ID())
		} else {
			a.logger.Info("destroying the sandbox of a step no longer assigned here", "step", key.Step, "attempt", key.Attempt)
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		if err := sb.Destroy(dctx); err != nil {
			a.logger.Warn("destroy orphaned sandbox", "step", key.Step, "error", err)
		}
		cancel()
	}
	return adopted
}

func joinReason(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// reportVanished ends the attempts an earlier agent of this node had
// started (starting or running) that have no sandbox now: they are not run
// again (at-most-once), and their record says why instead of staying
// starting or running forever.
func (a *Agent) reportVanished(ctx context.Context, assigned []cluster.Step) {
	for _, st := range assigned {
		if st.Node != a.cfg.Node || (st.State != cluster.StateStarting && st.State != cluster.StateRunning) {
			continue
		}
		key := cluster.StepAttempt{Step: st.ID, Attempt: st.Attempts}
		a.mu.Lock()
		_, running := a.steps[st.ID]
		if !running {
			a.done[key] = true
		}
		a.mu.Unlock()
		if running {
			continue
		}
		rec := failed(nil, st.ID, time.Time{}, failure(api.CauseAgentRestarted,
			fmt.Sprintf("agentd restarted while the step was %s and its sandbox was gone; it is not run again (at most once)", st.State), nil))
		if st.State == cluster.StateStarting && st.Spec.Secrets != nil {
			// Its secrets may have been fetched by the earlier agent: the
			// ticket is single use, and the step never runs without them.
			rec = failed(nil, st.ID, time.Time{}, secretsFailure("agentd restarted before the step started, and its secrets are delivered once", nil))
		}
		a.logger.Warn("an attempt started by an earlier agent has no sandbox; reporting it failed", "step", st.ID, "attempt", st.Attempts, "state", st.State)
		r := newStepRun(a, st)
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			r.report(ctx, "exit", func(ctx context.Context) error {
				return a.sched.StepExit(ctx, cluster.StepExit{Node: a.cfg.Node, Attempt: st.Attempts, Record: rec})
			})
		}()
	}
}
