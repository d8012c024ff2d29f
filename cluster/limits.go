package cluster

import (
	"fmt"
	"math"
	"time"
)

// Limits bound what one step may consume besides the CPU and memory it
// reserves: processes, wall-clock time, workspace size and kept output.
// This is the one table of their defaults and bounds (SPEC, "Limits,
// quotas and retention"); the scheduler applies it at submission, so every
// path (gateway, schedctl, API) gets it and a step's record shows the
// limits in force, and a node's operator can lower the maxima for a node.
type Limits struct {
	// Pids caps the step's processes and threads.
	Pids int64 `json:"pids"`
	// Timeout is the step's wall-clock limit (terminated_by=timeout).
	Timeout time.Duration `json:"timeout"`
	// WorkspaceBytes caps the step's workspace: writes past it fail with
	// ENOSPC inside the sandbox, and what comes back never exceeds it.
	WorkspaceBytes int64 `json:"workspace_bytes"`
	// OutputBytes caps the output kept per step (head and tail); past it
	// the step goes on and an output_truncated event says what was dropped.
	OutputBytes int64 `json:"output_bytes"`
}

// DefaultLimits are the limits of a step that names none.
var DefaultLimits = Limits{Pids: 1024, Timeout: time.Hour, WorkspaceBytes: 1 << 30, OutputBytes: 64 << 20}

// MaxLimits are the largest limits any step may have, whatever a node
// offers (a node's operator may set lower maxima for the node). Pids stays
// well under the kernel's pid_max of these machines (32768): gVisor's
// systrap maps guest processes to host tasks (a fork bomb at 1024 peaked at
// 2,435 host tasks) and the host backstop is 4N+256 (oci.HostPids), so
// one step at the maximum holds at most about half of the node's pids.
var MaxLimits = Limits{Pids: 4096, Timeout: 24 * time.Hour, WorkspaceBytes: 64 << 30, OutputBytes: 1 << 30}

// MinLimits are the smallest limits a step may ask for.
var MinLimits = Limits{Pids: 16, Timeout: time.Second, WorkspaceBytes: 1 << 20, OutputBytes: 64 << 10}

// DefaultRequest is what a step of schedctl run or of a gateway run
// reserves when it names no CPU or memory.
var DefaultRequest = Resources{CPU: 1, MemoryBytes: 512 << 20}

// MinRequest is the least CPU and memory a step may reserve: the
// scheduler refuses less (StepSpec.Validate), and so do the gateway and
// the runtime (oci.Limits.Validate, for agentd run).
var MinRequest = Resources{CPU: 0.01, MemoryBytes: 16 << 20}

// MaxRequest is the most CPU and memory one step of a gateway run may
// reserve. The scheduler itself takes more, bounded by its nodes: a step
// no node could ever hold fails as unplaceable.
var MaxRequest = Resources{CPU: 64, MemoryBytes: 256 << 30}

// CheckCPU reports cores outside [MinRequest.CPU, max]; a max of zero is
// no maximum. (Less than 0.01 cores would be a CFS quota under the
// kernel's 1 ms.)
func CheckCPU(cores, max float64) error {
	switch {
	case !(cores > 0) || math.IsInf(cores, 0):
		return fmt.Errorf("cpu %v: must be a positive number of cores", cores)
	case cores < MinRequest.CPU:
		return fmt.Errorf("cpu %v: below the minimum of %v cores", cores, MinRequest.CPU)
	case max > 0 && cores > max:
		return fmt.Errorf("cpu %v: above the maximum of %v cores", cores, max)
	}
	return nil
}

// CheckMemory reports bytes outside [MinRequest.MemoryBytes, max]; a max
// of zero is no maximum.
func CheckMemory(bytes, max int64) error {
	switch {
	case bytes < MinRequest.MemoryBytes:
		return fmt.Errorf("memory %d bytes: below the minimum of %d MiB", bytes, MinRequest.MemoryBytes>>20)
	case max > 0 && bytes > max:
		return fmt.Errorf("memory %d bytes: above the maximum of %d GiB", bytes, max>>30)
	}
	return nil
}

// WithDefaults returns l with every zero field set from DefaultLimits.
func (l Limits) WithDefaults() Limits {
	if l.Pids == 0 {
		l.Pids = DefaultLimits.Pids
	}
	if l.Timeout == 0 {
		l.Timeout = DefaultLimits.Timeout
	}
	if l.WorkspaceBytes == 0 {
		l.WorkspaceBytes = DefaultLimits.WorkspaceBytes
	}
	if l.OutputBytes == 0 {
		l.OutputBytes = DefaultLimits.OutputBytes
	}
	return l
}

// LimitError is Check's error: the limit Field (named as the API names
// it) is Value, outside [Min, Max], each written for people.
type LimitError struct {
	Field, Value, Min, Max string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s %s: want %s to %s", e.Field, e.Value, e.Min, e.Max)
}

// Check reports the first limit of l outside [MinLimits, max], naming the
// field as the API does; the error is a *LimitError.
func (l Limits) Check(max Limits) error {
	for _, c := range []struct {
		field     string
		v, lo, hi int64
		show      func(int64) string
	}{
		{"pids", l.Pids, MinLimits.Pids, max.Pids, func(v int64) string { return fmt.Sprint(v) }},
		{"timeout", int64(l.Timeout), int64(MinLimits.Timeout), int64(max.Timeout), func(v int64) string { return time.Duration(v).String() }},
		{"workspace_bytes", l.WorkspaceBytes, MinLimits.WorkspaceBytes, max.WorkspaceBytes, func(v int64) string { return fmt.Sprint(v) }},
		{"output_bytes", l.OutputBytes, MinLimits.OutputBytes, max.OutputBytes, func(v int64) string { return fmt.Sprint(v) }},
	} {
		if c.v < c.lo || c.v > c.hi {
			return &LimitError{Field: c.field, Value: c.show(c.v), Min: c.show(c.lo), Max: c.show(c.hi)}
		}
	}
	return nil
}

// Min returns the smaller of each limit of l and m.
func (l Limits) Min(m Limits) Limits {
	return Limits{Pids: min(l.Pids, m.Pids), Timeout: min(l.Timeout, m.Timeout),
		WorkspaceBytes: min(l.WorkspaceBytes, m.WorkspaceBytes), OutputBytes: min(l.OutputBytes, m.OutputBytes)}
}
