package client

import (
	"context"
	"net/http"
	"net/netip"

	"github.com/rodon-compute/rodon/cluster"
)

// Platform returns every control-plane address the scheduler knows (its
// members' HTTP and Raft hosts, every node's registered address, the live
// gateways' addresses): what an agent denies to its sandboxes. The
// scheduler answers it only to agent certificates.
func (c *Client) Platform(ctx context.Context) (cluster.Platform, error) {
	var out cluster.Platform
	_, err := c.call(ctx, request{method: http.MethodGet, path: "/v1/agent/platform"}, nil, &out)
	return out, err
}

// RegisterGateway records the addresses gateway name is reached at (PUT
// /v1/gateways/{name}, at most cluster.MaxGatewayAddrs), replacing its
// previous record, so that agents deny them to sandboxes. The scheduler
// accepts it only from the certificate gateway/name. A record expires
// cluster.GatewayTTL after its last registration: call it at start and
// every cluster.GatewayRefresh. Repeating it is harmless.
func (c *Client) RegisterGateway(ctx context.Context, name string, addrs []netip.Addr) error {
	body := struct {
		Addresses []netip.Addr `json:"addresses"`
	}{addrs}
	_, err := c.call(ctx, request{method: http.MethodPut, path: "/v1/gateways/" + escape(name)}, body, nil)
	return err
}
