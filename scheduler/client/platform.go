package client

import (
	"context"
	"net/http"
	"net/netip"
)

// RegisterGateway records the addresses gateway name is reached at (PUT
// /v1/gateways/{name}), so that agents deny them to sandboxes. The
// scheduler accepts it only from the certificate gateway/name. Repeating
// it is a no-op.
func (c *Client) RegisterGateway(ctx context.Context, name string, addrs []netip.Addr) error {
	body := struct {
		Addresses []netip.Addr `json:"addresses"`
	}{addrs}
	_, err := c.call(ctx, request{method: http.MethodPut, path: "/v1/gateways/" + escape(name)}, body, nil)
	return err
}
