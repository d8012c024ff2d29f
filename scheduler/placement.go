package scheduler

import (
	"errors"
	"fmt"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

// Usage is what the live (placed, starting, running) steps on one node
// reserve. A reservation is counted from the moment a step is placed, not
// when the node next reports.
type Usage struct {
	MilliCPU    int64
	MemoryBytes int64
	// Starting counts placed and starting steps, against the node's
	// start-concurrency limit.
	Starting int
	// Live counts placed, starting and running steps.
	Live int
}

// add adds (sign 1) or removes (sign -1) the reservation of s.
func (u *Usage) add(s *cluster.Step, sign int) {
	u.MilliCPU += int64(sign) * cluster.MilliCPU(s.Spec.CPU)
	u.MemoryBytes += int64(sign) * s.Spec.MemoryBytes
	u.Live += sign
	if s.State == cluster.StatePlaced || s.State == cluster.StateStarting {
		u.Starting += sign
	}
}

// CodeCapacityExhausted is the error code of a CapacityError.
const CodeCapacityExhausted = "capacity_exhausted"

// ErrCapacityExhausted matches every *CapacityError with errors.Is.
var ErrCapacityExhausted = errors.New(CodeCapacityExhausted)

// Retry hints of a CapacityError.
const (
	// RetryStarting: a start slot frees as soon as a step starts running.
	RetryStarting = time.Second
	// RetryResources: resources free when a step ends.
	RetryResources = 5 * time.Second
	// RetryNoNodes: no node is ready; one may register or recover.
	RetryNoNodes = 10 * time.Second
)

// CapacityError is the one outcome of placement when no node can take a
// step now.
type CapacityError struct {
	// Reason says what is missing, for people.
	Reason string
	// RetryAfter hints when placement may succeed; zero when it cannot
	// until the fleet changes (Unsatisfiable).
	RetryAfter time.Duration
	// Unsatisfiable: no ready node is large enough even when idle.
	Unsatisfiable bool
}

func (e *CapacityError) Error() string { return "capacity exhausted: " + e.Reason }

// Code returns CodeCapacityExhausted.
func (e *CapacityError) Code() string { return CodeCapacityExhausted }

// Is makes errors.Is(err, ErrCapacityExhausted) true.
func (e *CapacityError) Is(target error) bool { return target == ErrCapacityExhausted }

type fit int

const (
	fitOK       fit = iota
	fitNotReady     // the node does not take steps
	fitTooSmall     // the node's total capacity or its maxima of step limits are too small
	fitFull         // reservations leave too little
	fitStarting     // the node starts as many steps as it may
)

// checkFit tells whether spec fits on n given the reservations u.
func checkFit(n *cluster.Node, u Usage, spec cluster.StepSpec) fit {
	cpu, capCPU := cluster.MilliCPU(spec.CPU), cluster.MilliCPU(n.Capacity.CPU)
	switch {
	case n.State != cluster.NodeReady:
		return fitNotReady
	case cpu > capCPU || spec.MemoryBytes > n.Capacity.MemoryBytes:
		return fitTooSmall
	case !covers(nodeMaxLimits(n.MaxLimits), limitsOfSpec(spec)):
		return fitTooSmall
	case cpu > capCPU-u.MilliCPU || spec.MemoryBytes > n.Capacity.MemoryBytes-u.MemoryBytes:
		return fitFull
	case u.Starting >= maxStarting(n):
		return fitStarting
	}
	return fitOK
}

func maxStarting(n *cluster.Node) int {
	if n.MaxStarting > 0 {
		return n.MaxStarting
	}
	return cluster.DefaultMaxStarting
}

// Place chooses the node for a step with spec among nodes, given the
// reservations used (by node; a missing node has none). Only ready nodes
// are considered; the step must fit in a node's free CPU and memory, and
// the node must have a free start slot. Among those, Place picks the node
// with the most free memory, and of equals the smallest ID, so that the
// choice is deterministic. When nothing fits the error is a
// *CapacityError.
func Place(nodes []cluster.Node, used map[cluster.NodeID]Usage, spec cluster.StepSpec) (cluster.NodeID, error) {
	var (
		best               cluster.NodeID
		bestFree           int64 = -1
		ready, full, start int
	)
	for i := range nodes {
		n := &nodes[i]
		if spec.Node != "" && n.ID != spec.Node {
			continue
		}
		u := used[n.ID]
		switch checkFit(n, u, spec) {
		case fitOK:
			ready++
			free := n.Capacity.MemoryBytes - u.MemoryBytes
			if free > bestFree || free == bestFree && n.ID < best {
				best, bestFree = n.ID, free
			}
		case fitTooSmall:
			ready++
		case fitFull:
			ready++
			full++
		case fitStarting:
			ready++
			start++
		}
	}
	if bestFree >= 0 {
		return best, nil
	}
	want := fmt.Sprintf("%g cores and %s of memory", spec.CPU, formatBytes(spec.MemoryBytes))
	switch {
	case ready == 0 && spec.Node != "":
		return "", &CapacityError{
			Reason:     fmt.Sprintf("the step may run only on node %s (where its workspace is), and that node is not ready", spec.Node),
			RetryAfter: RetryNoNodes,
		}
	case ready == 0:
		return "", &CapacityError{
			Reason:     fmt.Sprintf("none of %d registered nodes is ready", len(nodes)),
			RetryAfter: RetryNoNodes,
		}
	case full == 0 && start == 0:
		return "", &CapacityError{
			Reason:        fmt.Sprintf("no ready node has %s in total (%d ready)", want, ready),
			Unsatisfiable: true,
		}
	case full == 0:
		return "", &CapacityError{
			Reason:     fmt.Sprintf("all %d ready nodes large enough for %s are starting as many steps as they may", start, want),
			RetryAfter: RetryStarting,
		}
	}
	return "", &CapacityError{
		Reason:     fmt.Sprintf("no ready node has %s free (%d of %d ready nodes are large enough)", want, full+start, ready),
		RetryAfter: RetryResources,
	}
}

// formatBytes writes n in the largest binary unit that keeps it whole or
// with one decimal, such as "512MiB" or "1.5GiB".
func formatBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	return fmt.Sprintf("%.4g%s", f, units[i])
}
