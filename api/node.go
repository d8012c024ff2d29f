package api

import "time"

// Node is the public record of a node agent (`schedctl nodes -o json`).
type Node struct {
	ID string `json:"id"`
	// Address is where the node's agent serves its API (host:port).
	Address string `json:"address"`
	// State is ready, degraded, draining or down.
	State           string    `json:"state"`
	DegradedReasons []string  `json:"degraded_reasons"`
	Capacity        Resources `json:"capacity"`
	// Reserved is what the node's live steps reserve.
	Reserved Resources `json:"reserved"`
	// Running counts the node's live (placed, starting, running) steps.
	Running int               `json:"running"`
	Labels  map[string]string `json:"labels,omitempty"`
	// MaxLimits are the largest step limits the node takes (its
	// operator's agentd serve --max-*): a step is placed only on a node
	// whose maxima cover its limits.
	MaxLimits     Limits    `json:"max_limits"`
	Drain         *Drain    `json:"drain,omitempty"`
	LastHeartbeat time.Time `json:"last_heartbeat,omitzero"`
	DownSince     time.Time `json:"down_since,omitzero"`
	DownReason    string    `json:"down_reason,omitempty"`
	// Pool is the node's warm pool as of its last heartbeat to the
	// current leader (absent: no pool, or not heard since the leader took
	// office).
	Pool *WarmPool `json:"pool,omitempty"`
}

// WarmPool is a node's pool of sandboxes made ahead of demand (each
// runs one step and is destroyed after it).
type WarmPool struct {
	Ready       int   `json:"ready"`
	Creating    int   `json:"creating"`
	Classes     int   `json:"classes"`
	MemoryBytes int64 `json:"memory_bytes"`
	BudgetBytes int64 `json:"budget_bytes"`
}

// Resources are an amount of CPU (cores) and memory.
type Resources struct {
	CPU         float64 `json:"cpu"`
	MemoryBytes int64   `json:"memory_bytes"`
}

// Limits are a step's limits besides CPU and memory (cluster.Limits): its
// processes, wall-clock time, workspace size and kept output.
type Limits struct {
	Pids           int64    `json:"pids"`
	Timeout        Duration `json:"timeout"`
	WorkspaceBytes int64    `json:"workspace_bytes"`
	OutputBytes    int64    `json:"output_bytes"`
}

// Drain is an operator's drain of a node. Complete is true only once the
// node has no live step and every sandbox of a step that ended there since
// the drain began is reported cleaned up.
type Drain struct {
	RequestedAt time.Time `json:"requested_at"`
	Deadline    time.Time `json:"deadline,omitzero"`
	Complete    bool      `json:"complete"`
}

// DrainRequest is the optional body of POST /v1/nodes/{id}/drain. Steps
// still live at the deadline are cancelled; zero waits for them.
type DrainRequest struct {
	Deadline Duration `json:"deadline,omitzero"`
}
