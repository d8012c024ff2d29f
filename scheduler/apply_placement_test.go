package scheduler

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/cluster"
)

func TestApplyUnplaceable(t *testing.T) {
	cause := cluster.Unplaceable{Missing: []cluster.Shortfall{{Resource: "memory", Want: 64 * gib, Largest: 8 * gib}}}
	reason := "no node has 64GiB of memory; the largest has 8GiB"
	failed := cluster.Step{ID: "s1", State: cluster.StateFailed, TerminatedBy: cluster.ByPlatform, Attempts: 1,
		Reason: reason, Unplaceable: &cause, Phases: cluster.Phases{Queued: at(1)}}
	atSubmit := submit("s1", false)
	atSubmit.Unplaceable, atSubmit.Reason = &cause, reason
	later := cluster.StepUnplaceable{Step: "s1", Attempt: 1, Cause: cause, Reason: reason, At: at(5)}
	runStepCases(t, []stepCase{
		{name: "at submission", cmd: atSubmit, want: failed, wantEvents: []string{"queued", "unplaceable"}},
		{name: "queued", setup: cmds(submit("s1", false)), cmd: later, want: failed, wantEvents: []string{"queued", "unplaceable"}},
		{name: "placed meanwhile", setup: cmds(register("n1", 4, 8*gib), submit("s1", false), place("s1", "n1")), cmd: later, wantErr: ErrTransition},
		{name: "another attempt", setup: cmds(submit("s1", false)),
			cmd: cluster.StepUnplaceable{Step: "s1", Attempt: 2, Cause: cause, At: at(5)}, wantErr: ErrTransition},
		{name: "unknown step", cmd: later, wantErr: ErrNotFound},
	})
	f := newTestFSM(t)
	f.mustApply(t, atSubmit)
	s := f.step(t, "s1")
	if e := s.Events[len(s.Events)-1]; e.Unplaceable == nil || e.Unplaceable.Resource != "memory" || e.Message != reason || s.EndedAt != at(1) {
		t.Errorf("unplaceable event %+v, ended at %v; want reason memory, the message, ended at submission", e, s.EndedAt)
	}
}

func TestApplyStepsWaiting(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, register("n1", 1, gib), submit("s1", false), submit("s2", false), submit("placed", false), place("placed", "n1"))
	wait := func(id cluster.StepID, reason string, sec int) cluster.StepsWaiting {
		return cluster.StepsWaiting{Waits: []cluster.Wait{{Step: id, Attempt: 1, Reason: reason, Message: "waiting: " + reason}}, At: at(sec)}
	}
	waits := func(id cluster.StepID) []string {
		var out []string
		for _, e := range f.step(t, id).Events {
			if e.Kind == cluster.EventWaiting && e.Waiting != nil {
				out = append(out, e.Waiting.Reason)
			}
		}
		return out
	}
	f.mustApply(t, wait("s1", cluster.WaitCapacity, 2))
	before := f.step(t, "s1").ModifyIndex
	// The same reason again changes nothing; a new one is recorded.
	f.mustApply(t, wait("s1", cluster.WaitCapacity, 3))
	if got := f.step(t, "s1"); got.ModifyIndex != before {
		t.Errorf("a repeated wait changed the step (modify index %d, was %d)", got.ModifyIndex, before)
	}
	f.mustApply(t, wait("s1", cluster.WaitNotReady, 4), wait("s1", cluster.WaitCapacity, 5))
	if got := waits("s1"); !cmp.Equal(got, []string{"capacity", "not_ready", "capacity"}) {
		t.Errorf("waits of s1 = %v, want capacity, not_ready, capacity", got)
	}
	// Several in one entry; one no longer queued, or of another attempt,
	// is skipped.
	f.mustApply(t, cluster.StepsWaiting{Waits: []cluster.Wait{
		{Step: "s2", Attempt: 1, Reason: cluster.WaitNoNode, Message: "m"},
		{Step: "placed", Attempt: 1, Reason: cluster.WaitNoNode, Message: "m"},
		{Step: "s1", Attempt: 2, Reason: cluster.WaitNoNode, Message: "m"},
		{Step: "gone", Attempt: 1, Reason: cluster.WaitNoNode, Message: "m"},
	}, At: at(6)})
	if got := waits("s2"); !cmp.Equal(got, []string{"no_node"}) {
		t.Errorf("waits of s2 = %v, want no_node", got)
	}
	if got := waits("placed"); got != nil {
		t.Errorf("a placed step got waiting events %v", got)
	}
	if got := waits("s1"); len(got) != 3 {
		t.Errorf("a wait of another attempt was recorded: %v", got)
	}
	// A step queued again starts afresh.
	f.mustApply(t, cluster.SetNodeState{Node: "n1", State: cluster.NodeReady, At: at(7)}, submit("again", true),
		wait("again", cluster.WaitCapacity, 7), cluster.RequestCancel{Step: "placed", At: at(7)},
		exit("placed", "n1", 1, cluster.StateCancelled, 143), place("again", "n1"), lose("n1", 8))
	f.mustApply(t, cluster.StepsWaiting{Waits: []cluster.Wait{{Step: "again", Attempt: 2, Reason: cluster.WaitCapacity, Message: "m"}}, At: at(9)})
	if got := waits("again"); !cmp.Equal(got, []string{"capacity", "capacity"}) || f.step(t, "again").Attempts != 2 {
		t.Errorf("waits of a step queued again = %v, want capacity before and after", got)
	}
	checkErr(t, "bad wait", f.applyErr(t, cluster.StepsWaiting{Waits: []cluster.Wait{{Step: "s1", Attempt: 1}}}), ErrInvalid)
}

func TestApplyStartTimeout(t *testing.T) {
	timeout := func(state cluster.StepState) cluster.StartTimeout {
		return cluster.StartTimeout{Step: "s1", Node: "n1", Attempt: 1, State: state, Reason: "node n1 did not report it starting within 2m0s", At: at(130)}
	}
	requeued := cluster.Step{ID: "s1", State: cluster.StateQueued, Attempts: 2, Phases: cluster.Phases{Queued: at(130)}}
	failed := cluster.Step{ID: "s1", State: cluster.StateFailed, TerminatedBy: cluster.ByPlatform, Node: "n1", Attempts: 1,
		Reason: "node n1 did not report it starting within 2m0s; not re-run: the step is not idempotent (at most once)",
		Phases: cluster.Phases{Queued: at(1), Placed: at(2)}}
	failedStarting := failed
	failedStarting.Phases.Created = at(3)
	placedIdem := cmds(register("n1", 4, 8*gib), submit("s1", true), place("s1", "n1"))
	placedOnce := cmds(register("n1", 4, 8*gib), submit("s1", false), place("s1", "n1"))
	cancelled := concat(placedOnce, cmds(cluster.RequestCancel{Step: "s1", At: at(5)}))
	cancelledFailed := failed
	cancelledFailed.Reason = "node n1 did not report it starting within 2m0s; not re-run: a cancel was requested"
	cancelledFailed.Cancel = &cluster.Cancel{RequestedAt: at(5), Unverified: "node n1 never started the step nor confirmed it gone"}
	runStepCases(t, []stepCase{
		{name: "idempotent placed: queued again", setup: placedIdem, cmd: timeout(cluster.StatePlaced), want: requeued,
			wantEvents: []string{"queued", "placed", "not_started", "requeued"}, wantUsage: map[cluster.NodeID]Usage{}},
		{name: "at most once: failed", setup: placedOnce, cmd: timeout(cluster.StatePlaced), want: failed,
			wantEvents: []string{"queued", "placed", "not_started"}, wantUsage: map[cluster.NodeID]Usage{}},
		{name: "starting", setup: concat(placedOnce, cmds(phase("s1", "n1", 1, cluster.StateStarting))), cmd: timeout(cluster.StateStarting),
			want: failedStarting},
		{name: "a cancel pending stays unverified", setup: cancelled, cmd: timeout(cluster.StatePlaced), want: cancelledFailed},
		{name: "started meanwhile", setup: concat(placedOnce, cmds(phase("s1", "n1", 1, cluster.StateStarting))),
			cmd: timeout(cluster.StatePlaced), wantErr: ErrTransition},
		{name: "running", setup: running("s1", false), cmd: timeout(cluster.StateStarting), wantErr: ErrTransition},
		{name: "another attempt", setup: placedOnce,
			cmd: cluster.StartTimeout{Step: "s1", Node: "n1", Attempt: 2, State: cluster.StatePlaced}, wantErr: ErrTransition},
		{name: "bad state", setup: placedOnce, cmd: timeout(cluster.StateRunning), wantErr: ErrInvalid},
	})
	// The requeued attempt's old one is unwanted on its node.
	f := newTestFSM(t)
	f.mustApply(t, placedIdem...)
	f.mustApply(t, timeout(cluster.StatePlaced))
	res := f.apply(t, cluster.Heartbeat{Node: "n1", Health: cluster.Health{State: cluster.NodeReady},
		Running: []cluster.StepAttempt{{Step: "s1", Attempt: 1}}, At: at(131)})
	if hr, ok := res.(*cluster.HeartbeatResult); !ok || len(hr.Unwanted) != 1 {
		t.Errorf("heartbeat after the start timeout = %+v, want attempt 1 of s1 unwanted", res)
	}
}

// TestEndedAt checks that every way to a terminal state records the
// leader's time of it, and that the compaction's order follows it.
func TestEndedAt(t *testing.T) {
	ran := running("s1", false)
	for _, tc := range []struct {
		name string
		cmds []cluster.Command
		want time.Time
	}{
		{"exit", concat(ran, cmds(exit("s1", "n1", 1, cluster.StateExited, 0))), at(10)},
		{"cancel while queued", cmds(submit("s1", false), cluster.RequestCancel{Step: "s1", At: at(4)}), at(4)},
		{"lost", concat(ran, cmds(lose("n1", 30))), at(30)},
		{"expired", cmds(submit("s1", false), cluster.Expire{Step: "s1", At: at(3600)}), at(3600)},
		{"start timeout", concat(ran[:3], cmds(cluster.StartTimeout{Step: "s1", Node: "n1", Attempt: 1, State: cluster.StatePlaced, At: at(130)})), at(130)},
		{"unplaceable", cmds(submit("s1", false), cluster.StepUnplaceable{Step: "s1", Attempt: 1, Cause: cluster.Unplaceable{NoSingleNode: true}, At: at(2)}), at(2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFSM(t)
			f.mustApply(t, tc.cmds...)
			if s := f.step(t, "s1"); !s.State.Terminal() || !s.EndedAt.Equal(tc.want) {
				t.Errorf("step is %s, ended at %v; want terminal, ended at %v", s.State, s.EndedAt, tc.want)
			}
		})
	}
}
