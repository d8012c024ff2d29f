package scheduler

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/cluster"
)

func TestPlace(t *testing.T) {
	node := func(id cluster.NodeID, cpu float64, mem int64, state cluster.NodeState) cluster.Node {
		return cluster.Node{ID: id, Capacity: cluster.Resources{CPU: cpu, MemoryBytes: mem}, State: state, MaxStarting: 2}
	}
	ready := cluster.NodeReady
	for _, tc := range []struct {
		name    string
		nodes   []cluster.Node
		used    map[cluster.NodeID]Usage
		spec    cluster.StepSpec
		want    cluster.NodeID
		wantErr *CapacityError
	}{
		{
			name:  "most free memory wins",
			nodes: []cluster.Node{node("a", 4, 8*gib, ready), node("b", 4, 16*gib, ready), node("c", 4, 4*gib, ready)},
			spec:  spec(1, gib, false), want: "b",
		},
		{
			name:  "reservations counted",
			nodes: []cluster.Node{node("a", 4, 8*gib, ready), node("b", 4, 16*gib, ready)},
			used:  map[cluster.NodeID]Usage{"b": {MilliCPU: 1000, MemoryBytes: 10 * gib, Live: 2}},
			spec:  spec(1, gib, false), want: "a",
		},
		{
			name:  "a step bound to a node goes there, not where most is free",
			nodes: []cluster.Node{node("a", 4, 8*gib, ready), node("b", 4, 16*gib, ready)},
			spec:  bound(spec(1, gib, false), "a"),
			want:  "a",
		},
		{
			name:  "a step bound to a node that is not ready waits",
			nodes: []cluster.Node{node("a", 4, 8*gib, cluster.NodeDegraded), node("b", 4, 16*gib, ready)},
			spec:  bound(spec(1, gib, false), "a"),
			wantErr: &CapacityError{
				Reason:     "the step may run only on node a, which is degraded",
				RetryAfter: RetryNoNodes, Wait: cluster.WaitNotReady,
			},
		},
		{
			name:  "a step bound to a node that is down waits",
			nodes: []cluster.Node{node("a", 4, 8*gib, cluster.NodeDown), node("b", 4, 16*gib, ready)},
			spec:  bound(spec(1, gib, false), "a"),
			wantErr: &CapacityError{Reason: "the step may run only on node a, which is down",
				RetryAfter: RetryNoNodes, Wait: cluster.WaitNoNode},
		},
		{
			name:  "a step bound to a node that is not registered is unplaceable",
			nodes: []cluster.Node{node("b", 4, 16*gib, ready)},
			spec:  bound(spec(1, gib, false), "zz"),
			wantErr: &CapacityError{Reason: "the step may run only on node zz, which is not registered", Unsatisfiable: true,
				Unplaceable: &cluster.Unplaceable{Node: "zz", Unregistered: true}},
		},
		{
			name:  "a step bound to a node too small is unplaceable, whatever the others have",
			nodes: []cluster.Node{node("a", 4, 8*gib, ready), node("b", 64, 64*gib, ready)},
			spec:  bound(spec(6, gib, false), "a"),
			wantErr: &CapacityError{Reason: "the step may run only on node a, which has 4 cores; it asks for 6", Unsatisfiable: true,
				Unplaceable: &cluster.Unplaceable{Node: "a", Missing: []cluster.Shortfall{{Resource: "cpu", Want: 6000, Largest: 4000}}}},
		},
		{
			name:  "ties broken by id",
			nodes: []cluster.Node{node("c", 4, 8*gib, ready), node("a", 4, 8*gib, ready), node("b", 4, 8*gib, ready)},
			spec:  spec(1, gib, false), want: "a",
		},
		{
			name:  "only ready nodes",
			nodes: []cluster.Node{node("a", 4, 8*gib, ready), node("b", 64, 64*gib, cluster.NodeDraining), node("c", 64, 64*gib, cluster.NodeDegraded), node("d", 64, 64*gib, cluster.NodeDown)},
			spec:  spec(1, gib, false), want: "a",
		},
		{
			name:  "cpu must fit",
			nodes: []cluster.Node{node("a", 4, 8*gib, ready), node("b", 2, 16*gib, ready)},
			used:  map[cluster.NodeID]Usage{"b": {MilliCPU: 1500}},
			spec:  spec(1, gib, false), want: "a",
		},
		{
			name:  "exact fit",
			nodes: []cluster.Node{node("a", 1.5, 2*gib, ready)},
			used:  map[cluster.NodeID]Usage{"a": {MilliCPU: 500, MemoryBytes: gib}},
			spec:  spec(1, gib, false), want: "a",
		},
		{
			name:  "fractional cpu sums do not drift",
			nodes: []cluster.Node{node("a", 0.3, 2*gib, ready)},
			used:  map[cluster.NodeID]Usage{"a": {MilliCPU: cluster.MilliCPU(0.1) + cluster.MilliCPU(0.1)}},
			spec:  spec(0.1, 32<<20, false), want: "a",
		},
		{
			name:  "start concurrency",
			nodes: []cluster.Node{node("a", 4, 8*gib, ready), node("b", 4, 16*gib, ready)},
			used:  map[cluster.NodeID]Usage{"b": {MilliCPU: 2000, MemoryBytes: 2 * gib, Starting: 2, Live: 2}},
			spec:  spec(1, gib, false), want: "a",
		},
		{
			name:    "no nodes",
			spec:    spec(1, gib, false),
			wantErr: &CapacityError{Reason: "no node is registered", RetryAfter: RetryNoNodes, Wait: cluster.WaitNoNode},
		},
		{
			name:    "all down",
			nodes:   []cluster.Node{node("a", 4, 8*gib, cluster.NodeDown), node("b", 4, 8*gib, cluster.NodeDown)},
			spec:    spec(1, gib, false),
			wantErr: &CapacityError{Reason: "all 2 registered nodes are down", RetryAfter: RetryNoNodes, Wait: cluster.WaitNoNode},
		},
		{
			name:  "none ready",
			nodes: []cluster.Node{node("a", 4, 8*gib, cluster.NodeDraining), node("b", 4, 8*gib, cluster.NodeDown)},
			spec:  spec(1, gib, false),
			wantErr: &CapacityError{Reason: "the nodes large enough for 1 cores and 1GiB of memory are not ready: a (draining)",
				RetryAfter: RetryNoNodes, Wait: cluster.WaitNotReady},
		},
		{
			name:  "only a degraded node is large enough: the step waits for it",
			nodes: []cluster.Node{node("a", 4, 8*gib, ready), node("c", 64, 64*gib, cluster.NodeDegraded)},
			spec:  spec(16, gib, false),
			wantErr: &CapacityError{Reason: "the nodes large enough for 16 cores and 1GiB of memory are not ready: c (degraded)",
				RetryAfter: RetryNoNodes, Wait: cluster.WaitNotReady},
		},
		{
			name:  "more memory than any node has",
			nodes: []cluster.Node{node("a", 4, 8*gib, ready), node("b", 8, 22*gib+gib/2, cluster.NodeDraining)},
			spec:  spec(1, 64*gib, false),
			wantErr: &CapacityError{Reason: "no node has 64GiB of memory; the largest has 22.5GiB", Unsatisfiable: true,
				Unplaceable: &cluster.Unplaceable{Missing: []cluster.Shortfall{{Resource: "memory", Want: 64 * gib, Largest: 22*gib + gib/2}}}},
		},
		{
			name:  "a node that is down does not count",
			nodes: []cluster.Node{node("a", 4, 8*gib, ready), node("d", 64, 64*gib, cluster.NodeDown)},
			spec:  spec(16, 16*gib, false),
			wantErr: &CapacityError{Reason: "no node has 16 cores; the largest has 4; no node has 16GiB of memory; the largest has 8GiB",
				Unsatisfiable: true, Unplaceable: &cluster.Unplaceable{Missing: []cluster.Shortfall{
					{Resource: "cpu", Want: 16000, Largest: 4000}, {Resource: "memory", Want: 16 * gib, Largest: 8 * gib}}}},
		},
		{
			name:  "each offered, never together",
			nodes: []cluster.Node{node("a", 4, 8*gib, ready), node("b", 8, 4*gib, ready)},
			spec:  spec(6, 6*gib, false),
			wantErr: &CapacityError{Reason: "no node has all the step asks for at once (6 cores, 6GiB of memory and its limits): a has 4 cores, b has 4GiB of memory",
				Unsatisfiable: true, Unplaceable: &cluster.Unplaceable{NoSingleNode: true}},
		},
		{
			name:  "the node's maxima must cover the step's limits",
			nodes: []cluster.Node{withMax(node("a", 4, 64*gib, ready), cluster.Limits{Pids: 256}), node("b", 4, 8*gib, ready)},
			spec:  withLimits(spec(1, gib, false), cluster.Limits{Pids: 512}),
			want:  "b",
		},
		{
			name:  "limits no node allows",
			nodes: []cluster.Node{withMax(node("a", 4, 8*gib, ready), cluster.Limits{Pids: 256, Timeout: time.Hour}), withMax(node("b", 4, 8*gib, ready), cluster.Limits{Pids: 128})},
			spec:  withLimits(spec(1, gib, false), cluster.Limits{Pids: 512, Timeout: 2 * time.Hour}),
			wantErr: &CapacityError{Reason: "no node allows 512 pids; the most any allows is 256",
				Unsatisfiable: true, Unplaceable: &cluster.Unplaceable{Missing: []cluster.Shortfall{{Resource: "pids", Want: 512, Largest: 256}}}},
		},
		{
			name:  "a timeout, a workspace and an output cap no node allows",
			nodes: []cluster.Node{withMax(node("a", 4, 8*gib, ready), cluster.Limits{Timeout: time.Hour, WorkspaceBytes: 2 * gib, OutputBytes: 1 << 20})},
			spec:  withLimits(spec(1, gib, false), cluster.Limits{Timeout: 2 * time.Hour, WorkspaceBytes: 4 * gib, OutputBytes: 2 << 20}),
			wantErr: &CapacityError{Reason: "no node allows a timeout of 2h0m0s; the most any allows is 1h0m0s; " +
				"no node allows a workspace of 4GiB; the most any allows is 2GiB; no node allows an output cap of 2MiB; the most any allows is 1MiB",
				Unsatisfiable: true, Unplaceable: &cluster.Unplaceable{Missing: []cluster.Shortfall{
					{Resource: "timeout", Want: int64(2 * time.Hour), Largest: int64(time.Hour)},
					{Resource: "workspace", Want: 4 * gib, Largest: 2 * gib},
					{Resource: "output", Want: 2 << 20, Largest: 1 << 20}}}},
		},
		{
			name:  "full",
			nodes: []cluster.Node{node("a", 4, 8*gib, ready), node("b", 4, 8*gib, ready)},
			used:  map[cluster.NodeID]Usage{"a": {MilliCPU: 3500}, "b": {MemoryBytes: 7.5 * gib}},
			spec:  spec(1, gib, false),
			wantErr: &CapacityError{Reason: "no ready node has 1 cores and 1GiB of memory free (2 ready nodes are large enough)",
				RetryAfter: RetryResources, Wait: cluster.WaitCapacity},
		},
		{
			name:  "all starting",
			nodes: []cluster.Node{node("a", 4, 8*gib, ready), node("b", 1, 8*gib, ready)},
			used:  map[cluster.NodeID]Usage{"a": {Starting: 2, MilliCPU: 200, MemoryBytes: 1 << 28, Live: 2}},
			spec:  spec(2, 512<<20, false),
			wantErr: &CapacityError{Reason: "all 1 ready nodes large enough for 2 cores and 512MiB of memory are starting as many steps as they may",
				RetryAfter: RetryStarting, Wait: cluster.WaitCapacity},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Place(tc.nodes, tc.used, tc.spec)
			if tc.wantErr == nil {
				if err != nil || got != tc.want {
					t.Fatalf("Place() = %q, %v; want %q, nil", got, err, tc.want)
				}
				return
			}
			var ce *CapacityError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCapacityExhausted) || ce.Code() != "capacity_exhausted" {
				t.Fatalf("Place() = %q, %v; want a capacity_exhausted *CapacityError", got, err)
			}
			if diff := cmp.Diff(tc.wantErr, ce); diff != "" {
				t.Errorf("Place() error (-want +got):\n%s", diff)
			}
		})
	}
}

func bound(s cluster.StepSpec, node cluster.NodeID) cluster.StepSpec {
	s.Node = node
	return s
}

func withLimits(s cluster.StepSpec, l cluster.Limits) cluster.StepSpec {
	s.Pids, s.Timeout, s.WorkspaceBytes, s.OutputBytes = l.Pids, l.Timeout, l.WorkspaceBytes, l.OutputBytes
	return s
}

func withMax(n cluster.Node, l cluster.Limits) cluster.Node {
	n.MaxLimits = l
	return n
}

// TestPlaceThenApply checks that the FSM accepts what Place chooses and
// refuses a placement that no longer fits.
func TestPlaceThenApply(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, register("n1", 2, 4*gib), register("n2", 2, 2*gib))
	var placed []cluster.NodeID
	for i, id := range []cluster.StepID{"a", "b", "c", "d"} {
		f.mustApply(t, cluster.SubmitStep{Step: id, Spec: spec(1, gib, false), At: at(i)})
		nodes, used, _ := f.State().Placement()
		n, err := Place(nodes, used, spec(1, gib, false))
		if err != nil {
			t.Fatalf("Place(%s) = %v", id, err)
		}
		f.mustApply(t, place(id, n))
		placed = append(placed, n)
	}
	if want := []cluster.NodeID{"n1", "n1", "n2", "n2"}; !cmp.Equal(placed, want) {
		t.Errorf("placements = %v, want %v", placed, want)
	}
	f.mustApply(t, submit("e", false))
	nodes, used, _ := f.State().Placement()
	if _, err := Place(nodes, used, spec(1, gib, false)); !errors.Is(err, ErrCapacityExhausted) {
		t.Errorf("Place(e) = %v, want capacity exhausted", err)
	}
	checkErr(t, "apply place e on n1", f.applyErr(t, place("e", "n1")), ErrCapacityExhausted)
}
