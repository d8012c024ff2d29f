package cluster

import (
	"maps"
	"net/netip"
	"slices"
	"time"
)

// DefaultMaxStarting is the start-concurrency limit of a node that does not
// set its own: how many steps may be placed or starting on it at once.
const DefaultMaxStarting = 4

// Resources are an amount of CPU and memory: a node's capacity or a step's
// request.
type Resources struct {
	// CPU is in cores, such as 0.5 or 16.
	CPU         float64 `json:"cpu"`
	MemoryBytes int64   `json:"memory_bytes"`
}

// MilliCPU converts cores to whole millicores, the unit in which the
// scheduler adds up reservations so that sums do not drift.
func MilliCPU(cores float64) int64 { return int64(cores*1000 + 0.5) }

// Node is the scheduler's record of one node agent.
//
// State is derived: down once the node is declared lost (until it
// heartbeats or registers again), else draining while Drain is set, else
// the state of the agent's last Health report.
type Node struct {
	ID NodeID `json:"id"`
	// Address is where the node's agent serves its API.
	Address  netip.AddrPort    `json:"address"`
	Capacity Resources         `json:"capacity"`
	Labels   map[string]string `json:"labels,omitempty"`
	State    NodeState         `json:"state"`
	// Health is the agent's last capability probe result; its reasons are
	// the node's degraded reasons.
	Health Health `json:"health"`
	// Drain is set while an operator drains the node.
	Drain *Drain `json:"drain,omitempty"`
	// MaxStarting caps the steps placed or starting on the node at once.
	MaxStarting int `json:"max_starting"`
	// MaxLimits are the largest step limits the node takes (its
	// operator's agentd serve --max-*), every field set; zero fields, in a
	// record made before nodes registered them, are MaxLimits'.
	MaxLimits     Limits    `json:"max_limits"`
	Registered    time.Time `json:"registered"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
	// DownSince is when the node was declared down; zero unless down.
	DownSince time.Time `json:"down_since,omitzero"`
	// DownReason says why it was declared down.
	DownReason string `json:"down_reason,omitempty"`
	// CreateIndex and ModifyIndex are the Raft log indexes of the entries
	// that created and last changed the record.
	CreateIndex uint64 `json:"create_index"`
	ModifyIndex uint64 `json:"modify_index"`
}

// Drain is an operator's request to empty a node.
type Drain struct {
	RequestedAt time.Time `json:"requested_at"`
	// Deadline is when steps still running are cancelled; zero waits for
	// them indefinitely.
	Deadline time.Time `json:"deadline,omitzero"`
}

// DegradedReasons are the reasons the node's last probe gave, if any.
func (n Node) DegradedReasons() []string { return n.Health.Reasons }

// Clone returns a deep copy of n.
func (n Node) Clone() Node {
	n.Labels = maps.Clone(n.Labels)
	n.Health.Reasons = slices.Clone(n.Health.Reasons)
	if n.Drain != nil {
		d := *n.Drain
		n.Drain = &d
	}
	return n
}
