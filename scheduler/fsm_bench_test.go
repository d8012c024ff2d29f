package scheduler

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/rodon-compute/rodon/cluster"
)

// BenchmarkApplyLifecycles applies whole step lifecycles (submit, place,
// running, exit) as the leader batches them, 16 commands per entry, on
// one member: the FSM's share of a lifecycle's cost on every member; in
// CmdBatch (json) and CmdBinaryBatch (binary) entries.
func BenchmarkApplyLifecycles(b *testing.B) {
	for _, bf := range []batchFormat{batchJSON, batchBinary} {
		b.Run(bf.String(), func(b *testing.B) { benchmarkApplyLifecycles(b, bf) })
	}
}

func benchmarkApplyLifecycles(b *testing.B, bf batchFormat) {
	const perEntry = 16
	var entries [][]byte
	var items []cluster.BatchItem
	add := func(c cluster.Command) {
		it, err := newBatchItem(bf, c)
		if err != nil {
			b.Fatal(err)
		}
		items = append(items, it)
		if len(items) == perEntry {
			_, e := encodeBatch(bf, items)
			entries = append(entries, e)
			items = nil
		}
	}
	const steps = 4096
	for i := range steps {
		id := cluster.StepID(fmt.Sprintf("b-%05d", i))
		add(submit(id, false))
	}
	for i := range steps {
		id := cluster.StepID(fmt.Sprintf("b-%05d", i))
		add(place(id, "n1"))
		add(phase(id, "n1", 1, cluster.StateRunning))
		add(exit(id, "n1", 1, cluster.StateExited, 0))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		f := newTestFSM(b)
		f.mustApply(b, register("n1", 1e6, 1<<50))
		b.StartTimer()
		for _, e := range entries {
			f.idx++
			f.Apply(&raft.Log{Index: f.idx, Type: raft.LogCommand, Data: e})
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*steps), "ns/lifecycle")
}
