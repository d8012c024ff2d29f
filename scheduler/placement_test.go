package scheduler

import (
	"errors"
	"testing"

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
			spec:  func() cluster.StepSpec { s := spec(1, gib, false); s.Node = "a"; return s }(),
			want:  "a",
		},
		{
			name:  "a step bound to a node that is not ready waits",
			nodes: []cluster.Node{node("a", 4, 8*gib, cluster.NodeDegraded), node("b", 4, 16*gib, ready)},
			spec:  func() cluster.StepSpec { s := spec(1, gib, false); s.Node = "a"; return s }(),
			wantErr: &CapacityError{
				Reason:     "the step may run only on node a (where its workspace is), and that node is not ready",
				RetryAfter: RetryNoNodes,
			},
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
			wantErr: &CapacityError{Reason: "none of 0 registered nodes is ready", RetryAfter: RetryNoNodes},
		},
		{
			name:    "none ready",
			nodes:   []cluster.Node{node("a", 4, 8*gib, cluster.NodeDraining), node("b", 4, 8*gib, cluster.NodeDown)},
			spec:    spec(1, gib, false),
			wantErr: &CapacityError{Reason: "none of 2 registered nodes is ready", RetryAfter: RetryNoNodes},
		},
		{
			name:    "too large for any node",
			nodes:   []cluster.Node{node("a", 4, 8*gib, ready), node("b", 8, 4*gib, ready)},
			spec:    spec(6, 6*gib, false),
			wantErr: &CapacityError{Reason: "no ready node has 6 cores and 6GiB of memory in total (2 ready)", Unsatisfiable: true},
		},
		{
			name:    "full",
			nodes:   []cluster.Node{node("a", 4, 8*gib, ready), node("b", 4, 8*gib, ready)},
			used:    map[cluster.NodeID]Usage{"a": {MilliCPU: 3500}, "b": {MemoryBytes: 7.5 * gib}},
			spec:    spec(1, gib, false),
			wantErr: &CapacityError{Reason: "no ready node has 1 cores and 1GiB of memory free (2 of 2 ready nodes are large enough)", RetryAfter: RetryResources},
		},
		{
			name:    "all starting",
			nodes:   []cluster.Node{node("a", 4, 8*gib, ready), node("b", 1, 8*gib, ready)},
			used:    map[cluster.NodeID]Usage{"a": {Starting: 2, MilliCPU: 200, MemoryBytes: 1 << 28, Live: 2}},
			spec:    spec(2, 512<<20, false),
			wantErr: &CapacityError{Reason: "all 1 ready nodes large enough for 2 cores and 512MiB of memory are starting as many steps as they may", RetryAfter: RetryStarting},
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
