package client

import (
	"context"
	"net/http"

	"github.com/rodon-compute/rodon/api"
)

// StreamLocation returns where the node running (or that ran) step id
// serves its output stream, and that node's id: dial the URL verifying the
// server is agent/NODE.
func (c *Client) StreamLocation(ctx context.Context, id string) (api.StreamURL, error) {
	var out api.StreamURL
	_, err := c.call(ctx, request{method: http.MethodGet, path: "/v1/steps/" + escape(id) + "/stream-url"}, nil, &out)
	return out, err
}
