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
	Running       int               `json:"running"`
	Labels        map[string]string `json:"labels,omitempty"`
	Drain         *Drain            `json:"drain,omitempty"`
	LastHeartbeat time.Time         `json:"last_heartbeat,omitzero"`
	DownSince     time.Time         `json:"down_since,omitzero"`
	DownReason    string            `json:"down_reason,omitempty"`
}

// Resources are an amount of CPU (cores) and memory.
type Resources struct {
	CPU         float64 `json:"cpu"`
	MemoryBytes int64   `json:"memory_bytes"`
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
