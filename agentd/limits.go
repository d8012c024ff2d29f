package agentd

import (
	"fmt"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

// nodeMaxLimits fills the zero fields of a node's maxima from
// cluster.MaxLimits.
func nodeMaxLimits(m cluster.Limits) cluster.Limits {
	if m.Pids == 0 {
		m.Pids = cluster.MaxLimits.Pids
	}
	if m.Timeout == 0 {
		m.Timeout = cluster.MaxLimits.Timeout
	}
	if m.WorkspaceBytes == 0 {
		m.WorkspaceBytes = cluster.MaxLimits.WorkspaceBytes
	}
	if m.OutputBytes == 0 {
		m.OutputBytes = cluster.MaxLimits.OutputBytes
	}
	return m
}

// stepLimits returns the limits in force for a step: its own, with
// cluster.DefaultLimits for the fields an old record left zero. It refuses
// limits past the node's maxima, naming the limit and the flag that sets
// the maximum, and limits outside cluster.MinLimits.
func stepLimits(spec cluster.StepSpec, max cluster.Limits) (cluster.Limits, error) {
	l := cluster.Limits{Pids: spec.Pids, Timeout: spec.Timeout, WorkspaceBytes: spec.WorkspaceBytes, OutputBytes: spec.OutputBytes}.WithDefaults()
	for _, c := range []struct {
		field, flag string
		v, hi       int64
		show        func(int64) string
	}{
		{"pids", "--max-pids", l.Pids, max.Pids, showInt},
		{"timeout", "--max-timeout", int64(l.Timeout), int64(max.Timeout), func(v int64) string { return time.Duration(v).String() }},
		{"workspace_bytes", "--max-workspace", l.WorkspaceBytes, max.WorkspaceBytes, showInt},
		{"output_bytes", "--max-output", l.OutputBytes, max.OutputBytes, showInt},
	} {
		if c.v > c.hi {
			return l, fmt.Errorf("step limit %s %s exceeds this node's maximum of %s (agentd serve %s)", c.field, c.show(c.v), c.show(c.hi), c.flag)
		}
	}
	if err := l.Check(max); err != nil {
		return l, fmt.Errorf("step limit %w", err)
	}
	return l, nil
}

func showInt(v int64) string { return fmt.Sprint(v) }
