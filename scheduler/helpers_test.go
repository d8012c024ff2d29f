package scheduler

import (
	"errors"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/hashicorp/raft"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// testLogger routes logs to t.Log, so they show only when a test fails,
// and drops them once the test has ended (raft goroutines may still log).
func testLogger(t testing.TB) *slog.Logger { return testenv.Logger(t) }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// at is t0 plus sec seconds.
func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

const gib = 1 << 30

// testFSM applies commands to an FSM as Raft would, one index at a time.
type testFSM struct {
	*FSM
	idx uint64
}

func newTestFSM(t testing.TB) *testFSM {
	t.Helper()
	return &testFSM{FSM: NewFSM(testLogger(t))}
}

// apply applies c and returns the FSM's response.
func (f *testFSM) apply(t testing.TB, c cluster.Command) any {
	t.Helper()
	b, err := cluster.Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	f.idx++
	return f.Apply(&raft.Log{Index: f.idx, Type: raft.LogCommand, Data: b})
}

// applyErr applies c and returns its business error, if any.
func (f *testFSM) applyErr(t testing.TB, c cluster.Command) error {
	t.Helper()
	err, _ := f.apply(t, c).(error)
	return err
}

// mustApply applies cmds and fails t on a business error.
func (f *testFSM) mustApply(t testing.TB, cmds ...cluster.Command) {
	t.Helper()
	for _, c := range cmds {
		if err := f.applyErr(t, c); err != nil {
			t.Fatalf("apply %s: %v", c.CommandType(), err)
		}
	}
}

func (f *testFSM) step(t testing.TB, id cluster.StepID) cluster.Step {
	t.Helper()
	s, ok := f.State().Step(id)
	if !ok {
		t.Fatalf("Step(%s) not found", id)
	}
	return s
}

func (f *testFSM) node(t testing.TB, id cluster.NodeID) cluster.Node {
	t.Helper()
	n, ok := f.State().Node(id)
	if !ok {
		t.Fatalf("Node(%s) not found", id)
	}
	return n
}

func register(id cluster.NodeID, cpu float64, mem int64) cluster.RegisterNode {
	return cluster.RegisterNode{
		Node:     id,
		Address:  netip.MustParseAddrPort("10.0.0.1:7200"),
		Capacity: cluster.Resources{CPU: cpu, MemoryBytes: mem},
		Health:   cluster.Health{State: cluster.NodeReady},
		At:       t0,
	}
}

func spec(cpu float64, mem int64, idempotent bool) cluster.StepSpec {
	return cluster.StepSpec{Image: "base", Args: []string{"true"}, CPU: cpu, MemoryBytes: mem, Idempotent: idempotent}
}

func submit(id cluster.StepID, idempotent bool) cluster.SubmitStep {
	return cluster.SubmitStep{Step: id, Spec: spec(1, gib, idempotent), At: at(1)}
}

func place(id cluster.StepID, node cluster.NodeID) cluster.PlaceStep {
	return cluster.PlaceStep{Step: id, Node: node, At: at(2)}
}

func phase(id cluster.StepID, node cluster.NodeID, attempt int, state cluster.StepState) cluster.StepPhase {
	p := cluster.StepPhase{Step: id, Node: node, Attempt: attempt, State: state, At: at(3)}
	switch state {
	case cluster.StateStarting:
		p.Phases.Created = at(3)
	case cluster.StateRunning:
		p.Phases.Started = at(4)
	}
	return p
}

func exit(id cluster.StepID, node cluster.NodeID, attempt int, state cluster.StepState, code int) cluster.StepExit {
	by := cluster.ByExit
	if state == cluster.StateCancelled {
		by = cluster.ByUser
	}
	return cluster.StepExit{
		Node: node, Attempt: attempt, At: at(10),
		Record: cluster.ExitRecord{Step: id, State: state, ExitCode: code, TerminatedBy: by,
			Phases: cluster.Phases{Exited: at(9)}},
	}
}

// running is the commands that get step id of the given idempotence
// running on node n1 (registered with 4 cores and 8 GiB).
func running(id cluster.StepID, idempotent bool) []cluster.Command {
	return []cluster.Command{
		register("n1", 4, 8*gib), submit(id, idempotent), place(id, "n1"),
		phase(id, "n1", 1, cluster.StateStarting), phase(id, "n1", 1, cluster.StateRunning),
	}
}

func eventKinds(s cluster.Step) []string {
	var out []string
	for _, e := range s.Events {
		out = append(out, e.Kind)
	}
	return out
}

func checkErr(t testing.TB, what string, got, want error) {
	t.Helper()
	if want == nil && got != nil || want != nil && !errors.Is(got, want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func ptr[T any](v T) *T { return &v }

// equateAddr lets cmp compare netip values.
var equateAddr = cmpopts.EquateComparable(netip.AddrPort{}, netip.Addr{})
