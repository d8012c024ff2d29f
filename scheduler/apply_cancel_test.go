package scheduler

import (
	"testing"

	"github.com/rodon-compute/rodon/cluster"
)

func cancel(id cluster.StepID, sec int) cluster.RequestCancel {
	return cluster.RequestCancel{Step: id, At: at(sec)}
}

func confirm(id cluster.StepID, node cluster.NodeID, attempt, sec int) cluster.ConfirmCancel {
	return cluster.ConfirmCancel{Step: id, Node: node, Attempt: attempt, At: at(sec)}
}

func lose(node cluster.NodeID, sec int) cluster.MarkNodeLost {
	return cluster.MarkNodeLost{Node: node, Reason: "no heartbeat for 30s", At: at(sec)}
}

func TestApplyCancel(t *testing.T) {
	ran := running("s1", false)
	base := cluster.Step{ID: "s1", Node: "n1", Attempts: 1,
		Phases: cluster.Phases{Queued: at(1), Placed: at(2), Created: at(3), Started: at(4)}}
	requested := base
	requested.State, requested.Cancel = cluster.StateRunning, &cluster.Cancel{RequestedAt: at(5)}
	cancelled := base
	cancelled.State, cancelled.ExitCode, cancelled.TerminatedBy = cluster.StateCancelled, ptr(143), cluster.ByUser
	cancelled.Phases.Exited = at(9)
	cancelled.Cancel = &cluster.Cancel{RequestedAt: at(5)}
	confirmed := cancelled
	confirmed.Cancel = &cluster.Cancel{RequestedAt: at(5), ConfirmedAt: at(11)}
	lost := base
	lost.State, lost.TerminatedBy = cluster.StateLost, cluster.ByNodeLost
	lost.Reason = "node n1 lost (no heartbeat for 30s) with attempt 1 running; not re-run: a cancel was requested"
	lost.Cancel = &cluster.Cancel{RequestedAt: at(5), Unverified: "node n1 is down: the step's process could not be confirmed gone"}
	lostLater := lost
	lostLater.Reason = "node n1 lost (no heartbeat for 30s) with attempt 1 running; not re-run: the step is not idempotent (at most once)"
	lostLater.Cancel = &cluster.Cancel{RequestedAt: at(40), Unverified: lost.Cancel.Unverified}
	lostConfirmed := lost
	lostConfirmed.Cancel = &cluster.Cancel{RequestedAt: at(5), ConfirmedAt: at(60)}

	exitCancelled := exit("s1", "n1", 1, cluster.StateCancelled, 143)
	runStepCases(t, []stepCase{
		{
			name: "queued", setup: cmds(submit("s1", false)), cmd: cancel("s1", 5),
			want: cluster.Step{ID: "s1", State: cluster.StateCancelled, Attempts: 1, TerminatedBy: cluster.ByUser,
				Reason: "cancelled before it was placed", Phases: cluster.Phases{Queued: at(1)},
				Cancel: &cluster.Cancel{RequestedAt: at(5), ConfirmedAt: at(5)}},
			wantEvents: []string{"queued", "cancel_requested", "cancel_confirmed"},
		},
		{name: "running", setup: ran, cmd: cancel("s1", 5), want: requested},
		{name: "repeated", setup: concat(ran, cmds(cancel("s1", 5))), cmd: cancel("s1", 6), want: requested},
		{name: "exited", setup: concat(ran, cmds(exit("s1", "n1", 1, cluster.StateExited, 0))), cmd: cancel("s1", 11), wantErr: ErrTerminal},
		{name: "unknown", cmd: cancel("s1", 5), wantErr: ErrNotFound},
		{name: "exit after cancel", setup: concat(ran, cmds(cancel("s1", 5))), cmd: exitCancelled, want: cancelled},
		{name: "confirm before exit", setup: concat(ran, cmds(cancel("s1", 5))), cmd: confirm("s1", "n1", 1, 8), wantErr: ErrTransition},
		{name: "confirm after exit", setup: concat(ran, cmds(cancel("s1", 5), exitCancelled)), cmd: confirm("s1", "n1", 1, 11),
			want: confirmed, wantEvents: []string{"queued", "placed", "starting", "started", "cancel_requested", "exited", "cancel_confirmed"}},
		{name: "confirm twice", setup: concat(ran, cmds(cancel("s1", 5), exitCancelled, confirm("s1", "n1", 1, 11))),
			cmd: confirm("s1", "n1", 1, 12), want: confirmed},
		{name: "confirm without cancel", setup: concat(ran, cmds(exit("s1", "n1", 1, cluster.StateExited, 0))),
			cmd: confirm("s1", "n1", 1, 11), wantErr: ErrTransition},
		{name: "confirm from other node", setup: concat(ran, cmds(cancel("s1", 5), exitCancelled)),
			cmd: confirm("s1", "n2", 1, 11), wantErr: ErrStale},
		{name: "node lost after cancel", setup: concat(ran, cmds(cancel("s1", 5))), cmd: lose("n1", 30), want: lost,
			wantEvents: []string{"queued", "placed", "starting", "started", "cancel_requested", "lost", "cancel_unverified"}},
		{name: "cancel after node lost", setup: concat(ran, cmds(lose("n1", 30))), cmd: cancel("s1", 40), want: lostLater},
		{name: "confirm after node returns", setup: concat(ran, cmds(cancel("s1", 5), lose("n1", 30))),
			cmd: confirm("s1", "n1", 1, 60), want: lostConfirmed},
	})
}
