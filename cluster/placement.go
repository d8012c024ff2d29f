package cluster

import (
	"time"

	"github.com/rodon-compute/rodon/api"
)

// Resources a step asks for that a node may lack, as Shortfall names
// them, with their units.
const (
	ResourceCPU       = "cpu"       // millicores
	ResourceMemory    = "memory"    // bytes
	ResourcePids      = "pids"      // processes (the node's max_limits)
	ResourceTimeout   = "timeout"   // nanoseconds (the node's max_limits)
	ResourceWorkspace = "workspace" // bytes (the node's max_limits)
	ResourceOutput    = "output"    // bytes (the node's max_limits)
)

// Shortfall is one resource a step asks more of than any node offers.
type Shortfall struct {
	// Resource is one of the Resource* names.
	Resource string `json:"resource"`
	// Want is what the step asks for, Largest the most a node that is
	// not down offers (its capacity, or its maximum of the limit), in
	// the resource's unit.
	Want    int64 `json:"want"`
	Largest int64 `json:"largest"`
}

// Unplaceable is the typed cause of a step that no node could ever take,
// even idle: it fails at once (state failed, terminated_by platform)
// instead of waiting for capacity that will not come. Only nodes that are
// not down count: a degraded or draining node may take steps again.
type Unplaceable struct {
	// Node is the node the step is bound to (its spec's node), if any.
	Node NodeID `json:"node,omitempty"`
	// Unregistered says that node is not registered.
	Unregistered bool `json:"unregistered,omitempty"`
	// Missing lists the resources the step asks more of than any node
	// offers (than its node offers, when bound).
	Missing []Shortfall `json:"missing,omitempty"`
	// NoSingleNode says each resource is offered by some node, but no
	// node offers them all at once (Missing is then empty).
	NoSingleNode bool `json:"no_single_node,omitempty"`
}

// Clone returns a deep copy of u (nil for nil).
func (u *Unplaceable) Clone() *Unplaceable {
	if u == nil {
		return nil
	}
	c := *u
	c.Missing = append([]Shortfall(nil), u.Missing...)
	return &c
}

// Why a queued step waits: the Reason of its EventWaiting events.
const (
	// WaitNoNode: no node is up (none registered, or all down), or the
	// node the step is bound to is down.
	WaitNoNode = api.WaitNoNode
	// WaitNotReady: the nodes that could take the step are degraded or
	// draining (or the node it is bound to is).
	WaitNotReady = api.WaitNotReady
	// WaitCapacity: ready nodes could take the step, but none has enough
	// free now, or a free start slot.
	WaitCapacity = api.WaitCapacity
)

// Event kinds of placement.
const (
	// EventWaiting says why a queued step is not placed; its Reason is a
	// Wait* code. It is recorded when the reason changes, not at every
	// placement round.
	EventWaiting = api.EventWaiting
	// EventUnplaceable records that no node could ever take the step; its
	// Reason is the first missing resource ("memory", ..., "node").
	EventUnplaceable = api.EventUnplaceable
	// EventNotStarted records that the step's node did not start it within
	// the scheduler's bound (scheduler serve --start-timeout or
	// --create-timeout); a requeued or the failure follows.
	EventNotStarted = api.EventNotStarted
)

// StepUnplaceable fails a queued step that no node could ever take (the
// leader's placement found it so): state failed, terminated_by platform,
// with the typed cause.
type StepUnplaceable struct {
	Step    StepID      `json:"step"`
	Attempt int         `json:"attempt"`
	Cause   Unplaceable `json:"cause"`
	Reason  string      `json:"reason"`
	At      time.Time   `json:"at"`
}

// Wait is why one queued step waits (see StepsWaiting).
type Wait struct {
	Step    StepID `json:"step"`
	Attempt int    `json:"attempt"`
	// Reason is a Wait* code, Message the same for people.
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// StepsWaiting records, for each queued step, why it waits, as an
// EventWaiting event: only when the reason differs from the step's last
// one since it was queued (a step no longer queued, or of another
// attempt, is skipped).
type StepsWaiting struct {
	Waits []Wait    `json:"waits"`
	At    time.Time `json:"at"`
}

// StartTimeout ends an attempt that its node did not start within the
// leader's bound: the step, still in State (placed or starting), is
// queued again as a new attempt if it is idempotent (and has attempts
// left, and no cancel), else it fails (at most once).
type StartTimeout struct {
	Step    StepID    `json:"step"`
	Node    NodeID    `json:"node"`
	Attempt int       `json:"attempt"`
	State   StepState `json:"state"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

// CompactSteps removes from the replicated state up to Limit terminal
// steps that ended before Before, the oldest first (the leader's retention,
// scheduler serve --step-retention).
type CompactSteps struct {
	Before time.Time `json:"before"`
	Limit  int       `json:"limit"`
	At     time.Time `json:"at"`
}

// CommandType implements Command.
func (StepUnplaceable) CommandType() CommandType { return CmdStepUnplaceable }

// CommandType implements Command.
func (StepsWaiting) CommandType() CommandType { return CmdStepsWaiting }

// CommandType implements Command.
func (StartTimeout) CommandType() CommandType { return CmdStartTimeout }

// CommandType implements Command.
func (CompactSteps) CommandType() CommandType { return CmdCompactSteps }
