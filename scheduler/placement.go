package scheduler

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
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
// step now: it waits (Wait says why) or, when no node could ever take it,
// it is unplaceable (Unplaceable says what is missing).
type CapacityError struct {
	// Reason says what is missing, for people.
	Reason string
	// RetryAfter hints when placement may succeed; zero when it cannot
	// until the fleet changes (Unsatisfiable).
	RetryAfter time.Duration
	// Unsatisfiable: no node that is up is large enough even when idle.
	Unsatisfiable bool
	// Unplaceable, set by Place with Unsatisfiable, is the typed cause.
	Unplaceable *cluster.Unplaceable
	// Wait is why the step waits (cluster.Wait*) when it may fit later.
	Wait string
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
	case cpu > capCPU || spec.MemoryBytes > n.Capacity.MemoryBytes || !covers(nodeMaxLimits(n.MaxLimits), limitsOfSpec(spec)):
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
// take steps; the step must fit in a node's free CPU and memory, its
// limits within the node's maxima, and the node must have a free start
// slot. Among those, Place picks the node with the most free memory, and
// of equals the smallest ID, so that the choice is deterministic.
//
// When nothing fits the error is a *CapacityError: with Unplaceable when
// no node that is up (not down) could take the step even idle, or the
// step is bound to a node that is not registered; else with Wait, why the
// step waits.
func Place(nodes []cluster.Node, used map[cluster.NodeID]Usage, spec cluster.StepSpec) (cluster.NodeID, error) {
	var (
		registered int
		up         []*cluster.Node
	)
	for i := range nodes {
		n := &nodes[i]
		if spec.Node != "" && n.ID != spec.Node {
			continue
		}
		registered++
		if n.State != cluster.NodeDown {
			up = append(up, n)
		}
	}
	switch {
	case spec.Node != "" && registered == 0:
		u := &cluster.Unplaceable{Node: spec.Node, Unregistered: true}
		return "", &CapacityError{Reason: fmt.Sprintf("the step may run only on node %s, which is not registered", spec.Node),
			Unsatisfiable: true, Unplaceable: u}
	case len(up) == 0 && spec.Node != "":
		return "", &CapacityError{Reason: fmt.Sprintf("the step may run only on node %s, which is down", spec.Node),
			RetryAfter: RetryNoNodes, Wait: cluster.WaitNoNode}
	case len(up) == 0 && registered == 0:
		return "", &CapacityError{Reason: "no node is registered", RetryAfter: RetryNoNodes, Wait: cluster.WaitNoNode}
	case len(up) == 0:
		return "", &CapacityError{Reason: fmt.Sprintf("all %d registered nodes are down", registered),
			RetryAfter: RetryNoNodes, Wait: cluster.WaitNoNode}
	}
	lim := limitsOfSpec(spec)
	var (
		best                    cluster.NodeID
		bestFree                int64 = -1
		capable, full, starting int
		notReady                []string
	)
	for _, n := range up {
		if len(lacks(n, spec, lim)) > 0 {
			continue
		}
		capable++
		u := used[n.ID]
		switch checkFit(n, u, spec) {
		case fitOK:
			free := n.Capacity.MemoryBytes - u.MemoryBytes
			if free > bestFree || free == bestFree && n.ID < best {
				best, bestFree = n.ID, free
			}
		case fitNotReady:
			notReady = append(notReady, fmt.Sprintf("%s (%s)", n.ID, n.State))
		case fitFull:
			full++
		case fitStarting:
			starting++
		}
	}
	switch want := fmt.Sprintf("%g cores and %s of memory", spec.CPU, formatBytes(spec.MemoryBytes)); {
	case bestFree >= 0:
		return best, nil
	case capable == 0:
		return "", unplaceable(up, spec, lim)
	case full == 0 && starting == 0 && spec.Node != "":
		return "", &CapacityError{Reason: fmt.Sprintf("the step may run only on node %s, which is %s", spec.Node, up[0].State),
			RetryAfter: RetryNoNodes, Wait: cluster.WaitNotReady}
	case full == 0 && starting == 0:
		return "", &CapacityError{Reason: fmt.Sprintf("the nodes large enough for %s are not ready: %s", want, listSome(notReady)),
			RetryAfter: RetryNoNodes, Wait: cluster.WaitNotReady}
	case full == 0:
		return "", &CapacityError{
			Reason:     fmt.Sprintf("all %d ready nodes large enough for %s are starting as many steps as they may", starting, want),
			RetryAfter: RetryStarting, Wait: cluster.WaitCapacity,
		}
	default:
		return "", &CapacityError{
			Reason:     fmt.Sprintf("no ready node has %s free (%d ready nodes are large enough)", want, full+starting),
			RetryAfter: RetryResources, Wait: cluster.WaitCapacity,
		}
	}
}

// dimension is one resource a node offers a step: its capacity, or its
// maximum of a limit.
type dimension struct {
	resource string
	// limit: a maximum the node allows, not a capacity it has.
	limit bool
	// want is what spec (with limits lim) asks for; offered what n offers.
	want    func(spec cluster.StepSpec, lim cluster.Limits) int64
	offered func(n *cluster.Node) int64
	// thing writes an amount with its noun ("8 cores", "a timeout of
	// 1h0m0s"), value the amount alone.
	thing, value func(v int64) string
}

var dimensions = []dimension{
	{resource: cluster.ResourceCPU,
		want:    func(s cluster.StepSpec, _ cluster.Limits) int64 { return cluster.MilliCPU(s.CPU) },
		offered: func(n *cluster.Node) int64 { return cluster.MilliCPU(n.Capacity.CPU) },
		thing:   func(v int64) string { return formatCores(v) + " cores" }, value: formatCores},
	{resource: cluster.ResourceMemory,
		want:    func(s cluster.StepSpec, _ cluster.Limits) int64 { return s.MemoryBytes },
		offered: func(n *cluster.Node) int64 { return n.Capacity.MemoryBytes },
		thing:   func(v int64) string { return formatBytes(v) + " of memory" }, value: formatBytes},
	{resource: cluster.ResourcePids, limit: true,
		want:    func(_ cluster.StepSpec, l cluster.Limits) int64 { return l.Pids },
		offered: func(n *cluster.Node) int64 { return nodeMaxLimits(n.MaxLimits).Pids },
		thing:   func(v int64) string { return fmt.Sprintf("%d pids", v) }, value: func(v int64) string { return fmt.Sprint(v) }},
	{resource: cluster.ResourceTimeout, limit: true,
		want:    func(_ cluster.StepSpec, l cluster.Limits) int64 { return int64(l.Timeout) },
		offered: func(n *cluster.Node) int64 { return int64(nodeMaxLimits(n.MaxLimits).Timeout) },
		thing:   func(v int64) string { return "a timeout of " + time.Duration(v).String() }, value: func(v int64) string { return time.Duration(v).String() }},
	{resource: cluster.ResourceWorkspace, limit: true,
		want:    func(_ cluster.StepSpec, l cluster.Limits) int64 { return l.WorkspaceBytes },
		offered: func(n *cluster.Node) int64 { return nodeMaxLimits(n.MaxLimits).WorkspaceBytes },
		thing:   func(v int64) string { return "a workspace of " + formatBytes(v) }, value: formatBytes},
	{resource: cluster.ResourceOutput, limit: true,
		want:    func(_ cluster.StepSpec, l cluster.Limits) int64 { return l.OutputBytes },
		offered: func(n *cluster.Node) int64 { return nodeMaxLimits(n.MaxLimits).OutputBytes },
		thing:   func(v int64) string { return "an output cap of " + formatBytes(v) }, value: formatBytes},
}

// lacks returns the dimensions in which n, even idle, cannot take spec.
func lacks(n *cluster.Node, spec cluster.StepSpec, lim cluster.Limits) []dimension {
	var out []dimension
	for _, d := range dimensions {
		if d.want(spec, lim) > d.offered(n) {
			out = append(out, d)
		}
	}
	return out
}

// unplaceable says why none of up (the nodes not down, all lacking
// something) could ever take spec: the resources it asks more of than any
// of them offers, or, when each is offered by one of them, that none
// offers all at once.
func unplaceable(up []*cluster.Node, spec cluster.StepSpec, lim cluster.Limits) *CapacityError {
	u := &cluster.Unplaceable{Node: spec.Node}
	var says []string
	for _, d := range dimensions {
		want, largest := d.want(spec, lim), int64(0)
		for _, n := range up {
			largest = max(largest, d.offered(n))
		}
		if want <= largest {
			continue
		}
		u.Missing = append(u.Missing, cluster.Shortfall{Resource: d.resource, Want: want, Largest: largest})
		verb, most := "has", "the largest has"
		if d.limit {
			verb, most = "allows", "the most any allows is"
		}
		if spec.Node != "" {
			says = append(says, fmt.Sprintf("the step may run only on node %s, which %s %s; it asks for %s", spec.Node, verb, d.thing(largest), d.value(want)))
		} else {
			says = append(says, fmt.Sprintf("no node %s %s; %s %s", verb, d.thing(want), most, d.value(largest)))
		}
	}
	if len(u.Missing) == 0 {
		u.NoSingleNode = true
		var each []string
		for _, n := range up {
			d := lacks(n, spec, lim)[0]
			verb := "has"
			if d.limit {
				verb = "allows"
			}
			each = append(each, fmt.Sprintf("%s %s %s", n.ID, verb, d.thing(d.offered(n))))
		}
		says = append(says, fmt.Sprintf("no node has all the step asks for at once (%g cores, %s of memory and its limits): %s",
			spec.CPU, formatBytes(spec.MemoryBytes), listSome(each)))
	}
	return &CapacityError{Reason: strings.Join(says, "; "), Unsatisfiable: true, Unplaceable: u}
}

// unplaceableKind is the Reason of an unplaceable event: the first
// missing resource, "node" for a node that is not registered, or
// "no_single_node".
func unplaceableKind(u *cluster.Unplaceable) string {
	switch {
	case u.Unregistered:
		return "node"
	case len(u.Missing) > 0:
		return u.Missing[0].Resource
	}
	return "no_single_node"
}

// listSome joins up to three items, and says how many more there are.
func listSome(items []string) string {
	if len(items) > 3 {
		return strings.Join(items[:3], ", ") + fmt.Sprintf(" and %d more", len(items)-3)
	}
	return strings.Join(items, ", ")
}

// formatCores writes millicores as cores ("0.5", "16").
func formatCores(m int64) string { return strconv.FormatFloat(float64(m)/1000, 'f', -1, 64) }

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
