package scheduler

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rodon-compute/rodon/cluster"
)

func TestApplyNode(t *testing.T) {
	ready := cluster.Node{ID: "n1", Address: register("n1", 4, 8*gib).Address,
		Capacity: cluster.Resources{CPU: 4, MemoryBytes: 8 * gib}, State: cluster.NodeReady,
		Health: cluster.Health{State: cluster.NodeReady}, MaxStarting: cluster.DefaultMaxStarting,
		MaxLimits: cluster.MaxLimits, Registered: t0, LastHeartbeat: t0}
	degraded := ready
	degraded.State, degraded.Health = cluster.NodeDegraded, cluster.Health{State: cluster.NodeDegraded, Reasons: []string{"ebpf: cannot attach"}}
	regDegraded := register("n1", 4, 8*gib)
	regDegraded.Health = degraded.Health
	draining := ready
	draining.State, draining.Drain = cluster.NodeDraining, &cluster.Drain{RequestedAt: at(5), Deadline: at(65)}
	drain := cluster.SetNodeState{Node: "n1", State: cluster.NodeDraining, Deadline: at(65), At: at(5)}
	down := ready
	down.State, down.DownSince, down.DownReason = cluster.NodeDown, at(30), "no heartbeat for 30s"
	back := ready
	back.LastHeartbeat = at(40)
	beat := cluster.Heartbeat{Node: "n1", Health: cluster.Health{State: cluster.NodeReady}, At: at(40)}
	badCap := register("n1", 0, gib)
	noReason := register("n1", 4, 8*gib)
	noReason.Health.State = cluster.NodeDegraded
	reg := register("n1", 4, 8*gib)
	// A node's maxima: zero fields are the cluster's; outside the table's
	// bounds they are refused.
	regMax := register("n1", 4, 8*gib)
	regMax.MaxLimits = cluster.Limits{Pids: 256, OutputBytes: 1 << 20}
	withMax := ready
	withMax.MaxLimits = cluster.Limits{Pids: 256, Timeout: cluster.MaxLimits.Timeout, WorkspaceBytes: cluster.MaxLimits.WorkspaceBytes, OutputBytes: 1 << 20}
	overMax, underMax := register("n1", 4, 8*gib), register("n1", 4, 8*gib)
	overMax.MaxLimits.WorkspaceBytes = cluster.MaxLimits.WorkspaceBytes + 1
	underMax.MaxLimits.Pids = cluster.MinLimits.Pids - 1

	for _, tc := range []struct {
		name    string
		setup   []cluster.Command
		cmd     cluster.Command
		wantErr error
		want    cluster.Node
	}{
		{name: "register", cmd: reg, want: ready},
		{name: "register degraded", cmd: regDegraded, want: degraded},
		{name: "register maxima", cmd: regMax, want: withMax},
		{name: "register maxima over the cluster's", cmd: overMax, wantErr: ErrInvalid},
		{name: "register maxima under the minima", cmd: underMax, wantErr: ErrInvalid},
		{name: "register zero cpu", cmd: badCap, wantErr: ErrInvalid},
		{name: "register degraded without reason", cmd: noReason, wantErr: ErrInvalid},
		{name: "register bad id", cmd: cluster.RegisterNode{Node: "N 1", Address: reg.Address, Capacity: reg.Capacity,
			Health: reg.Health}, wantErr: ErrInvalid},
		{name: "re-register while draining", setup: cmds(reg, drain), cmd: reg, want: draining},
		{name: "heartbeat unknown", cmd: beat, wantErr: ErrNotFound},
		{name: "heartbeat", setup: cmds(reg), cmd: beat, want: back},
		{name: "heartbeat brings a down node back", setup: cmds(reg, lose("n1", 30)), cmd: beat, want: back},
		{name: "drain", setup: cmds(reg), cmd: drain, want: draining},
		{name: "undrain", setup: cmds(reg, drain), cmd: cluster.SetNodeState{Node: "n1", State: cluster.NodeReady, At: at(6)}, want: ready},
		{name: "degrade", setup: cmds(reg), cmd: cluster.SetNodeState{Node: "n1", State: cluster.NodeDegraded,
			Reasons: degraded.Health.Reasons, At: at(6)}, want: degraded},
		{name: "degrade without reason", setup: cmds(reg), cmd: cluster.SetNodeState{Node: "n1", State: cluster.NodeDegraded}, wantErr: ErrInvalid},
		{name: "unknown state", setup: cmds(reg), cmd: cluster.SetNodeState{Node: "n1", State: "asleep"}, wantErr: ErrInvalid},
		{name: "set state of unknown node", cmd: drain, wantErr: ErrNotFound},
		{name: "set down", setup: cmds(reg), cmd: cluster.SetNodeState{Node: "n1", State: cluster.NodeDown,
			Reasons: []string{"no heartbeat for 30s"}, At: at(30)}, want: down},
		{name: "lost", setup: cmds(reg), cmd: lose("n1", 30), want: down},
		{name: "lost twice", setup: cmds(reg, lose("n1", 30)), cmd: lose("n1", 31), want: down},
		{name: "lost unknown", cmd: lose("n1", 30), wantErr: ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFSM(t)
			f.mustApply(t, tc.setup...)
			before := f.State().Nodes()
			err := f.applyErr(t, tc.cmd)
			checkErr(t, "apply "+tc.cmd.CommandType().String(), err, tc.wantErr)
			if tc.wantErr != nil {
				if diff := cmp.Diff(before, f.State().Nodes(), equateAddr); diff != "" {
					t.Errorf("nodes changed by a failed command (-before +after):\n%s", diff)
				}
				return
			}
			got := f.node(t, "n1")
			if diff := cmp.Diff(tc.want, got, equateAddr, cmpopts.IgnoreFields(cluster.Node{}, "CreateIndex", "ModifyIndex")); diff != "" {
				t.Errorf("node n1 (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHeartbeatUnwanted(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, running("s1", false)...)
	f.mustApply(t, running("s2", true)[1:]...)
	f.mustApply(t, running("s3", false)[1:]...)
	f.mustApply(t, exit("s3", "n1", 1, cluster.StateExited, 0))
	// n1 is lost and comes back: s1 was lost, s2 re-queued as attempt 2.
	f.mustApply(t, lose("n1", 30))
	got := f.apply(t, cluster.Heartbeat{Node: "n1", Health: cluster.Health{State: cluster.NodeReady}, At: at(40),
		Running: []cluster.StepAttempt{{Step: "s2", Attempt: 1}, {Step: "s1", Attempt: 1}, {Step: "s3", Attempt: 1}, {Step: "zz", Attempt: 1}}})
	want := &cluster.HeartbeatResult{Unwanted: []cluster.StepAttempt{
		{Step: "s1", Attempt: 1}, {Step: "s2", Attempt: 1}, {Step: "s3", Attempt: 1}, {Step: "zz", Attempt: 1}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Heartbeat() (-want +got):\n%s", diff)
	}

	// A running step the scheduler wants stays wanted.
	f.mustApply(t, place("s2", "n1"))
	got = f.apply(t, cluster.Heartbeat{Node: "n1", Health: cluster.Health{State: cluster.NodeReady}, At: at(41),
		Running: []cluster.StepAttempt{{Step: "s2", Attempt: 2}}})
	if diff := cmp.Diff(&cluster.HeartbeatResult{}, got); diff != "" {
		t.Errorf("Heartbeat() (-want +got):\n%s", diff)
	}
}

func TestMarkNodeLost(t *testing.T) {
	started := cluster.Phases{Queued: at(1), Placed: at(2), Created: at(3), Started: at(4)}
	ran := func(idempotent bool) []cluster.Command { return running("s1", idempotent) }
	// Attempt 3 of an idempotent step: lost twice before.
	third := concat(ran(true), cmds(lose("n1", 30), register("n1", 4, 8*gib), place("s1", "n1"),
		lose("n1", 50), register("n1", 4, 8*gib), place("s1", "n1")))
	runStepCases(t, []stepCase{
		{
			name: "not idempotent", setup: ran(false), cmd: lose("n1", 30),
			want: cluster.Step{ID: "s1", State: cluster.StateLost, Node: "n1", Attempts: 1, TerminatedBy: cluster.ByNodeLost,
				Reason: "node n1 lost (no heartbeat for 30s) with attempt 1 running; not re-run: the step is not idempotent (at most once)",
				Phases: started},
			wantEvents: []string{"queued", "placed", "starting", "started", "lost"},
			wantUsage:  map[cluster.NodeID]Usage{},
		},
		{
			name: "idempotent", setup: ran(true), cmd: lose("n1", 30),
			want:       cluster.Step{ID: "s1", State: cluster.StateQueued, Attempts: 2, Phases: cluster.Phases{Queued: at(30)}},
			wantEvents: []string{"queued", "placed", "starting", "started", "requeued"},
			wantUsage:  map[cluster.NodeID]Usage{},
		},
		{
			name: "idempotent out of attempts", setup: third, cmd: lose("n1", 70),
			want: cluster.Step{ID: "s1", State: cluster.StateLost, Node: "n1", Attempts: 3, TerminatedBy: cluster.ByNodeLost,
				Reason: "node n1 lost (no heartbeat for 30s) with attempt 3 placed; not re-run: 3 attempts made",
				Phases: cluster.Phases{Queued: at(50), Placed: at(2)}},
		},
		{
			name: "exit of a lost step", setup: concat(ran(false), cmds(lose("n1", 30))), cmd: exit("s1", "n1", 1, cluster.StateExited, 0),
			want: cluster.Step{ID: "s1", State: cluster.StateLost, Node: "n1", Attempts: 1, TerminatedBy: cluster.ByNodeLost,
				Reason: "node n1 lost (no heartbeat for 30s) with attempt 1 running; not re-run: the step is not idempotent (at most once)",
				Phases: started},
			wantEvents: []string{"queued", "placed", "starting", "started", "lost", "late_report"},
		},
		{
			name: "exit of a re-queued attempt", setup: concat(ran(true), cmds(lose("n1", 30))), cmd: exit("s1", "n1", 1, cluster.StateExited, 0),
			want:       cluster.Step{ID: "s1", State: cluster.StateQueued, Attempts: 2, Phases: cluster.Phases{Queued: at(30)}},
			wantEvents: []string{"queued", "placed", "starting", "started", "requeued", "late_report"},
		},
		{
			name: "running report of a lost step", setup: concat(ran(false), cmds(lose("n1", 30))), cmd: phase("s1", "n1", 1, cluster.StateRunning),
			want: cluster.Step{ID: "s1", State: cluster.StateLost, Node: "n1", Attempts: 1, TerminatedBy: cluster.ByNodeLost,
				Reason: "node n1 lost (no heartbeat for 30s) with attempt 1 running; not re-run: the step is not idempotent (at most once)",
				Phases: started},
			wantEvents: []string{"queued", "placed", "starting", "started", "lost", "late_report"},
		},
	})
}
