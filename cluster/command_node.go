package cluster

import (
	"net/netip"
	"time"
)

// RegisterNode creates or updates a node's record when its agent starts.
// A node that was down comes back; a drain in progress stays.
type RegisterNode struct {
	Node     NodeID            `json:"node"`
	Address  netip.AddrPort    `json:"address"`
	Capacity Resources         `json:"capacity"`
	Labels   map[string]string `json:"labels,omitempty"`
	Health   Health            `json:"health"`
	// MaxStarting is the node's start-concurrency limit; zero means
	// DefaultMaxStarting.
	MaxStarting int `json:"max_starting,omitempty"`
	// MaxLimits are the largest step limits the node's operator allows on
	// it (agentd serve --max-*); zero fields are MaxLimits' (cluster-wide).
	// A step whose limits exceed them is not placed there.
	MaxLimits Limits    `json:"max_limits,omitzero"`
	At        time.Time `json:"at"`
}

// Heartbeat says a node's agent is alive, with its current health and the
// step attempts it runs. A down node that heartbeats comes back.
type Heartbeat struct {
	Node    NodeID        `json:"node"`
	Health  Health        `json:"health"`
	Running []StepAttempt `json:"running,omitempty"`
	// Pool is the node's warm pool (nil: the node has none). It is soft
	// state: the leader keeps the latest in memory and never replicates
	// it.
	Pool *PoolStatus `json:"pool,omitempty"`
	// SeenIndex is the index of the node's last assignments answer. A
	// leader whose state is behind it does not answer which of Running
	// are unwanted. Never logged (the leader clears it).
	SeenIndex uint64    `json:"seen_index,omitempty"`
	At        time.Time `json:"at"`
}

// PoolStatus is a node's warm pool of sandboxes made ahead of demand,
// each for exactly one step.
type PoolStatus struct {
	// Ready sandboxes wait for a step; Creating are being made.
	Ready    int `json:"ready"`
	Creating int `json:"creating"`
	// Classes counts the pool's classes (image, network, workspace size,
	// pids) with a target above zero.
	Classes int `json:"classes"`
	// MemoryBytes is what the pool's sandboxes use now; BudgetBytes is
	// what they may use at most (agentd serve --warm-pool-memory).
	MemoryBytes int64 `json:"memory_bytes"`
	BudgetBytes int64 `json:"budget_bytes"`
}

// HeartbeatResult is the response to a Heartbeat.
type HeartbeatResult struct {
	// Unwanted are attempts the node reported running that the scheduler
	// does not want there (unknown, finished, lost or re-placed): the agent
	// kills and cleans them up without reporting an exit for them.
	Unwanted []StepAttempt `json:"unwanted,omitempty"`
}

// SetNodeState is an operator's or the leader's change of a node's state:
// NodeDraining starts a drain, NodeReady ends one, NodeDegraded records
// Reasons as the node's health, NodeDown declares the node lost (as
// MarkNodeLost).
type SetNodeState struct {
	Node    NodeID    `json:"node"`
	State   NodeState `json:"state"`
	Reasons []string  `json:"reasons,omitempty"`
	// Deadline is the drain deadline (NodeDraining only).
	Deadline time.Time `json:"deadline,omitzero"`
	At       time.Time `json:"at"`
}

// MarkNodeLost declares a node down, usually because its heartbeats
// stopped. Its placed, starting and running steps become lost with
// terminated_by=node_lost; idempotent ones without a cancel are re-queued
// as a new attempt (up to MaxAttempts); pending cancels of lost steps
// become unverified.
type MarkNodeLost struct {
	Node   NodeID    `json:"node"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// CommandType implements Command.
func (RegisterNode) CommandType() CommandType { return CmdRegisterNode }

// CommandType implements Command.
func (Heartbeat) CommandType() CommandType { return CmdHeartbeat }

// CommandType implements Command.
func (SetNodeState) CommandType() CommandType { return CmdSetNodeState }

// CommandType implements Command.
func (MarkNodeLost) CommandType() CommandType { return CmdMarkNodeLost }
