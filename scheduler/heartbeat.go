package scheduler

import (
	"slices"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// heartbeats is the leader's memory of its nodes' heartbeats (as Nomad's
// heartbeat timers): when each was last heard, its latest warm pool
// status, and whether this leader logged a heartbeat of it yet. lead makes
// one per term and drops it when leadership ends; a new leader starts
// empty and gives every node a full TTL from when it took office
// (checkNodes). None of it is replicated, and Apply never reads it.
type heartbeats struct {
	mu   sync.Mutex
	seen map[cluster.NodeID]beat
}

// beat is what the leader last heard of one node.
type beat struct {
	at   time.Time
	pool *cluster.PoolStatus
	// logged: a heartbeat of the node was logged in this term.
	logged bool
}

func newHeartbeats() *heartbeats {
	return &heartbeats{seen: make(map[cluster.NodeID]beat)}
}

// record remembers heartbeat c (its At chosen by the leader) and reports
// whether this term has logged none of the node's yet.
func (h *heartbeats) record(c *cluster.Heartbeat) (unlogged bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.seen[c.Node]
	b.at, b.pool = later(b.at, c.At), c.Pool
	h.seen[c.Node] = b
	return !b.logged
}

// logged notes that a heartbeat of node was logged in this term.
func (h *heartbeats) logged(node cluster.NodeID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.seen[node]
	b.logged = true
	h.seen[node] = b
}

// last returns when node was last heard in this term, and its pool.
func (h *heartbeats) last(node cluster.NodeID) (at time.Time, pool *cluster.PoolStatus, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, ok := h.seen[node]
	return b.at, b.pool, ok
}

// heartbeatChanges reports whether heartbeat c changes the replicated
// record of node n, so that it must be logged: a new health, or a node
// that is down.
func heartbeatChanges(n cluster.Node, c *cluster.Heartbeat) bool {
	return n.State == cluster.NodeDown || n.Health.State != c.Health.State || !slices.Equal(n.Health.Reasons, c.Health.Reasons)
}

// withMemory returns the public form of a node with what the leader's
// memory holds of it: the last heartbeat if later than the replicated one,
// and the warm pool. On a member that does not lead, it returns n as is.
func (s *Server) withMemory(n api.Node) api.Node {
	hb := s.beats.Load()
	if hb == nil {
		return n
	}
	at, pool, ok := hb.last(cluster.NodeID(n.ID))
	if !ok {
		return n
	}
	n.LastHeartbeat = later(n.LastHeartbeat, at)
	if pool != nil {
		n.Pool = &api.WarmPool{Ready: pool.Ready, Creating: pool.Creating, Classes: pool.Classes,
			MemoryBytes: pool.MemoryBytes, BudgetBytes: pool.BudgetBytes}
	}
	return n
}
