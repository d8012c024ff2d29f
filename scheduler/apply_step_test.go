package scheduler

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rodon-compute/rodon/cluster"
)

// ignoreBookkeeping leaves out what the step tables check separately
// (EndedAt: TestEndedAt).
var ignoreBookkeeping = cmpopts.IgnoreFields(cluster.Step{}, "Spec", "Events", "EventsDropped", "CreateIndex", "ModifyIndex", "EndedAt")

type stepCase struct {
	name       string
	setup      []cluster.Command
	cmd        cluster.Command
	wantErr    error
	want       cluster.Step // of step s1, when wantErr is nil
	wantEvents []string
	wantUsage  map[cluster.NodeID]Usage
}

// runStepCases applies each case's setup and command to a fresh FSM. A
// business error must leave the state as it was; a success must leave s1
// as want.
func runStepCases(t *testing.T, cases []stepCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFSM(t)
			f.mustApply(t, tc.setup...)
			before := f.State().Steps(StepFilter{})
			err := f.applyErr(t, tc.cmd)
			checkErr(t, "apply "+tc.cmd.CommandType().String(), err, tc.wantErr)
			if tc.wantErr != nil {
				if diff := cmp.Diff(before, f.State().Steps(StepFilter{})); diff != "" {
					t.Errorf("steps changed by a failed command (-before +after):\n%s", diff)
				}
				return
			}
			got := f.step(t, "s1")
			if diff := cmp.Diff(tc.want, got, ignoreBookkeeping); diff != "" {
				t.Errorf("step s1 (-want +got):\n%s", diff)
			}
			if tc.wantEvents != nil {
				if diff := cmp.Diff(tc.wantEvents, eventKinds(got)); diff != "" {
					t.Errorf("event kinds (-want +got):\n%s", diff)
				}
			}
			if tc.wantUsage != nil {
				if diff := cmp.Diff(tc.wantUsage, f.State().Usage()); diff != "" {
					t.Errorf("Usage() (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func concat(parts ...[]cluster.Command) []cluster.Command {
	var out []cluster.Command
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func cmds(c ...cluster.Command) []cluster.Command { return c }

func TestApplySubmitPlace(t *testing.T) {
	queued := cluster.Step{ID: "s1", State: cluster.StateQueued, Attempts: 1, Phases: cluster.Phases{Queued: at(1)}}
	placed := queued
	placed.State, placed.Node, placed.Phases.Placed = cluster.StatePlaced, "n1", at(2)
	bad := submit("s1", false)
	bad.Spec.CPU = -1
	small := cmds(cluster.RegisterNode{Node: "n1", Address: register("n1", 1, gib).Address,
		Capacity: cluster.Resources{CPU: 1, MemoryBytes: 2 * gib}, Health: cluster.Health{State: cluster.NodeReady}, MaxStarting: 1, At: t0})
	runStepCases(t, []stepCase{
		{name: "submit", cmd: submit("s1", false), want: queued, wantEvents: []string{"queued"}},
		{name: "submit twice", setup: cmds(submit("s1", false)), cmd: submit("s1", true), wantErr: ErrExists},
		{name: "submit negative cpu", cmd: bad, wantErr: ErrInvalid},
		{name: "submit bad id", cmd: cluster.SubmitStep{Step: "S 1", Spec: spec(1, gib, false)}, wantErr: ErrInvalid},
		{
			name: "place", setup: cmds(register("n1", 4, 8*gib), submit("s1", false)), cmd: place("s1", "n1"),
			want: placed, wantEvents: []string{"queued", "placed"},
			wantUsage: map[cluster.NodeID]Usage{"n1": {MilliCPU: 1000, MemoryBytes: gib, Starting: 1, Live: 1}},
		},
		{name: "place unknown step", setup: cmds(register("n1", 4, 8*gib)), cmd: place("s1", "n1"), wantErr: ErrNotFound},
		{name: "place unknown node", setup: cmds(submit("s1", false)), cmd: place("s1", "n2"), wantErr: ErrNotFound},
		{name: "place twice", setup: cmds(register("n1", 4, 8*gib), submit("s1", false), place("s1", "n1")),
			cmd: place("s1", "n1"), wantErr: ErrTransition},
		{
			name: "place on draining node",
			setup: cmds(register("n1", 4, 8*gib), submit("s1", false),
				cluster.SetNodeState{Node: "n1", State: cluster.NodeDraining, At: at(1)}),
			cmd: place("s1", "n1"), wantErr: ErrUnavailable,
		},
		{
			name:  "place beyond free memory",
			setup: concat(small, cmds(submit("s0", false), place("s0", "n1"), phase("s0", "n1", 1, cluster.StateRunning), submit("s1", false))),
			cmd:   place("s1", "n1"), wantErr: ErrCapacityExhausted,
		},
		{
			name: "place beyond start concurrency",
			setup: concat(small, cmds(cluster.SubmitStep{Step: "s0", Spec: spec(0.5, gib/2, false)}, place("s0", "n1"),
				cluster.SubmitStep{Step: "s1", Spec: spec(0.5, gib/2, false), At: at(1)})),
			cmd: place("s1", "n1"), wantErr: ErrCapacityExhausted,
		},
		{name: "place cancelled step", setup: cmds(register("n1", 4, 8*gib), submit("s1", false),
			cluster.RequestCancel{Step: "s1", At: at(1)}), cmd: place("s1", "n1"), wantErr: ErrTerminal},
	})
}

func TestApplyStepPhase(t *testing.T) {
	placed := cluster.Step{ID: "s1", State: cluster.StatePlaced, Node: "n1", Attempts: 1,
		Phases: cluster.Phases{Queued: at(1), Placed: at(2)}}
	starting := placed
	starting.State, starting.Phases.Created = cluster.StateStarting, at(3)
	run := starting
	run.State, run.Phases.Started = cluster.StateRunning, at(4)
	ranCleaned := run
	ranCleaned.Phases.CleanedUp = at(20)
	toPlaced := cmds(register("n1", 4, 8*gib), submit("s1", false), place("s1", "n1"))
	cleanup := phase("s1", "n1", 1, "")
	cleanup.Phases.CleanedUp = at(20)
	runStepCases(t, []stepCase{
		{name: "starting", setup: toPlaced, cmd: phase("s1", "n1", 1, cluster.StateStarting), want: starting,
			wantEvents: []string{"queued", "placed", "starting"}},
		{name: "running", setup: running("s1", false)[:4], cmd: phase("s1", "n1", 1, cluster.StateRunning), want: run,
			wantEvents: []string{"queued", "placed", "starting", "started"},
			wantUsage:  map[cluster.NodeID]Usage{"n1": {MilliCPU: 1000, MemoryBytes: gib, Live: 1}}},
		{name: "repeated", setup: running("s1", false), cmd: phase("s1", "n1", 1, cluster.StateRunning), want: run},
		{name: "backwards", setup: running("s1", false), cmd: phase("s1", "n1", 1, cluster.StateStarting), wantErr: ErrTransition},
		{name: "queued to running", setup: cmds(submit("s1", false)), cmd: phase("s1", "", 1, cluster.StateRunning), wantErr: ErrTransition},
		{name: "other node", setup: toPlaced, cmd: phase("s1", "n2", 1, cluster.StateStarting), wantErr: ErrStale},
		{name: "future attempt", setup: toPlaced, cmd: phase("s1", "n1", 2, cluster.StateStarting), wantErr: ErrStale},
		{name: "bad state", setup: toPlaced, cmd: phase("s1", "n1", 1, cluster.StateExited), wantErr: ErrInvalid},
		{name: "cleaned up", setup: running("s1", false), cmd: cleanup, want: ranCleaned},
		{name: "unknown step", cmd: phase("s1", "n1", 1, cluster.StateRunning), wantErr: ErrNotFound},
	})
}

func TestApplyStepExit(t *testing.T) {
	exited := cluster.Step{ID: "s1", State: cluster.StateExited, Node: "n1", Attempts: 1, ExitCode: ptr(3),
		TerminatedBy: cluster.ByExit, Phases: cluster.Phases{Queued: at(1), Placed: at(2), Created: at(3), Started: at(4), Exited: at(9)}}
	failed := cluster.Step{ID: "s1", State: cluster.StateFailed, Node: "n1", Attempts: 1, TerminatedBy: cluster.ByPlatform,
		Reason: "image not found", Phases: cluster.Phases{Queued: at(1), Placed: at(2), Exited: at(10)}}
	fail := cluster.StepExit{Node: "n1", Attempt: 1, At: at(10), Record: cluster.ExitRecord{
		Step: "s1", State: cluster.StateFailed, TerminatedBy: cluster.ByPlatform, Reason: "image not found"}}
	badState := exit("s1", "n1", 1, cluster.StateRunning, 0)
	ran := running("s1", false)
	runStepCases(t, []stepCase{
		{name: "exited", setup: ran, cmd: exit("s1", "n1", 1, cluster.StateExited, 3), want: exited,
			wantEvents: []string{"queued", "placed", "starting", "started", "exited"}, wantUsage: map[cluster.NodeID]Usage{}},
		{name: "failed to start", setup: ran[:3], cmd: fail, want: failed},
		{name: "repeated", setup: concat(ran, cmds(exit("s1", "n1", 1, cluster.StateExited, 3))),
			cmd: exit("s1", "n1", 1, cluster.StateExited, 3), want: exited},
		{name: "contradicting", setup: concat(ran, cmds(exit("s1", "n1", 1, cluster.StateExited, 3))),
			cmd: exit("s1", "n1", 1, cluster.StateExited, 4), wantErr: ErrTerminal},
		{name: "queued", setup: cmds(register("n1", 4, 8*gib), submit("s1", false)),
			cmd: exit("s1", "n1", 1, cluster.StateExited, 0), wantErr: ErrTransition},
		{name: "other node", setup: ran, cmd: exit("s1", "n2", 1, cluster.StateExited, 0), wantErr: ErrStale},
		{name: "not an exit state", setup: ran, cmd: badState, wantErr: ErrInvalid},
		{name: "unknown step", cmd: exit("s1", "n1", 1, cluster.StateExited, 0), wantErr: ErrNotFound},
	})
}

func TestApplyExpire(t *testing.T) {
	expired := cluster.Step{ID: "s1", State: cluster.StateExpired, Attempts: 1, TerminatedBy: cluster.ByTimeout,
		Reason: "waited 5m", Phases: cluster.Phases{Queued: at(1)}}
	expire := cluster.Expire{Step: "s1", Reason: "waited 5m", At: at(300)}
	runStepCases(t, []stepCase{
		{name: "queued", setup: cmds(submit("s1", false)), cmd: expire, want: expired, wantEvents: []string{"queued", "expired"}},
		{name: "placed", setup: running("s1", false)[:3], cmd: expire, wantErr: ErrTransition},
		{name: "exited", setup: concat(running("s1", false), cmds(exit("s1", "n1", 1, cluster.StateExited, 0))),
			cmd: expire, wantErr: ErrTerminal},
		{name: "unknown", cmd: expire, wantErr: ErrNotFound},
	})
}

func TestApplyStepEventsBounded(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, running("s1", false)...)
	for range 3 {
		evs := make([]cluster.Event, 30)
		for i := range evs {
			evs[i] = cluster.Event{Time: at(5), Kind: cluster.EventWarning, Message: "denied 10.0.0.1"}
		}
		f.mustApply(t, cluster.StepEvents{Step: "s1", Node: "n1", Attempt: 1, Events: evs})
	}
	s := f.step(t, "s1")
	if len(s.Events) != cluster.MaxEvents || s.EventsDropped != 4+90-cluster.MaxEvents {
		t.Errorf("events: %d kept, %d dropped; want %d kept, %d dropped", len(s.Events), s.EventsDropped, cluster.MaxEvents, 4+90-cluster.MaxEvents)
	}
	err := f.applyErr(t, cluster.StepEvents{Step: "s1", Node: "n1", Attempt: 1, Events: make([]cluster.Event, cluster.MaxEvents+1)})
	checkErr(t, "apply oversized step_events", err, ErrInvalid)
}
