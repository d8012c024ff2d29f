package gateway

import (
	"context"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// nodeLister is the optional capability of a Steps to list the nodes
// (*client.Client has it): their names and addresses are scrubbed from
// what users see even where a step's record does not name its node.
type nodeLister interface {
	Nodes(ctx context.Context) ([]api.Node, error)
}

// nodeRefresh is how often the node names are listed again.
const nodeRefresh = 30 * time.Second

// nodeNames knows the names and addresses of the scheduler's nodes, for
// Scrub. It is safe for concurrent use.
type nodeNames struct {
	steps Steps

	mu      sync.Mutex
	names   []string
	fetched time.Time
}

// known returns the node names and address hosts known, listing the nodes
// again when the list is stale. Failures keep the old list.
func (n *nodeNames) known(ctx context.Context, seen ...string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, s := range seen {
		if s != "" && !slices.Contains(n.names, s) {
			n.names = append(n.names, s)
		}
	}
	if nl, ok := n.steps.(nodeLister); ok && time.Since(n.fetched) > nodeRefresh {
		n.fetched = time.Now()
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		nodes, err := nl.Nodes(lctx)
		cancel()
		if err == nil {
			for _, nd := range nodes {
				host := nd.Address
				if h, _, err := net.SplitHostPort(nd.Address); err == nil {
					host = h
				}
				for _, s := range []string{nd.ID, host} {
					if s != "" && !slices.Contains(n.names, s) {
						n.names = append(n.names, s)
					}
				}
			}
		}
	}
	// Longest first, so that "node-10" goes before "node-1".
	out := slices.Clone(n.names)
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}
