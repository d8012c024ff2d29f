package cluster

// NodeState is a node's state as the scheduler sees it.
type NodeState string

// Node states. Only ready nodes receive steps.
const (
	NodeReady    NodeState = "ready"
	NodeDegraded NodeState = "degraded"
	NodeDraining NodeState = "draining"
	NodeDown     NodeState = "down"
)

// Health is the result of a node's capability probe: ready, or degraded with
// the reasons (a required control that is missing).
type Health struct {
	State   NodeState `json:"state"`
	Reasons []string  `json:"reasons,omitempty"`
}
