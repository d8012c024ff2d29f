package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// Health returns the health of the first member that answers.
func (c *Client) Health(ctx context.Context) (api.Health, error) {
	var h api.Health
	_, err := c.call(ctx, request{method: http.MethodGet, path: "/healthz"}, nil, &h)
	return h, err
}

// Members lists the cluster's Raft members, by id, with the leader and
// each member's last applied index.
func (c *Client) Members(ctx context.Context) ([]api.Member, error) {
	return listAll[api.Member](ctx, c, "/v1/members", nil)
}

// Join asks the leader to add the member described by req as a voter.
// Joining again with the same addresses is a no-op.
func (c *Client) Join(ctx context.Context, req api.JoinRequest) error {
	_, err := c.call(ctx, request{method: http.MethodPost, path: "/v1/members/join"}, req, nil)
	return err
}

// RemoveMember removes the member id from the Raft cluster
// (`schedctl raft remove-peer`).
func (c *Client) RemoveMember(ctx context.Context, id string) error {
	_, err := c.call(ctx, request{method: http.MethodPost, path: "/v1/members/remove"}, api.RemoveMemberRequest{ID: id}, nil)
	return err
}

// Snapshot returns the cluster's state as a JSON document
// (`schedctl snapshot save`).
func (c *Client) Snapshot(ctx context.Context) ([]byte, error) {
	resp, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/snapshot", limit: 1 << 30})
	if err != nil {
		return nil, err
	}
	return resp.body, nil
}

// RestoreSnapshot replaces the cluster's state with doc, a document
// Snapshot returned (`schedctl snapshot restore`).
func (c *Client) RestoreSnapshot(ctx context.Context, doc []byte) error {
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/snapshot/restore", body: doc})
	return err
}

// Nodes lists every node, ordered by ID, reading page after page.
func (c *Client) Nodes(ctx context.Context) ([]api.Node, error) {
	return listAll[api.Node](ctx, c, "/v1/nodes", nil)
}

// NodesPage returns one page of the nodes, ordered by ID: at most limit
// (0: the server's default, 100; at most MaxPageLimit) from cursor ("" for
// the first page), and the cursor of the next page ("" on the last).
func (c *Client) NodesPage(ctx context.Context, limit int, cursor string) ([]api.Node, string, error) {
	return listPage[api.Node](ctx, c, "/v1/nodes", nil, limit, cursor)
}

// Node returns one node.
func (c *Client) Node(ctx context.Context, id string) (api.Node, error) {
	var out api.Node
	_, err := c.call(ctx, request{method: http.MethodGet, path: "/v1/nodes/" + escape(id)}, nil, &out)
	return out, err
}

// DrainNode starts draining node id: it gets no new step, and steps still
// live after deadline (zero: none) are cancelled.
func (c *Client) DrainNode(ctx context.Context, id string, deadline time.Duration) (api.Node, error) {
	var out api.Node
	_, err := c.call(ctx, request{method: http.MethodPost, path: "/v1/nodes/" + escape(id) + "/drain"},
		api.DrainRequest{Deadline: api.Duration(deadline)}, &out)
	return out, err
}

// UndrainNode ends a drain of node id.
func (c *Client) UndrainNode(ctx context.Context, id string) (api.Node, error) {
	var out api.Node
	_, err := c.call(ctx, request{method: http.MethodPost, path: "/v1/nodes/" + escape(id) + "/undrain"}, nil, &out)
	return out, err
}

// SubmitStep queues a step and returns its record. Without req.ID the
// request is retried only when it surely did not reach the scheduler (a
// retry could otherwise queue the step twice); with an ID it is retried
// like any write, and a conflict may mean an earlier try succeeded.
func (c *Client) SubmitStep(ctx context.Context, req api.StepRequest) (api.Step, error) {
	mode := retryUnsent
	if req.ID != "" {
		mode = retrySafe
	}
	var out api.Step
	_, err := c.call(ctx, request{method: http.MethodPost, path: "/v1/steps", retry: mode}, req, &out)
	return out, err
}

// StepFilter selects steps; a zero field selects all.
type StepFilter struct {
	State string
	Node  string
}

func (f StepFilter) query() url.Values {
	q := url.Values{}
	if f.State != "" {
		q.Set("state", f.State)
	}
	if f.Node != "" {
		q.Set("node", f.Node)
	}
	return q
}

// Steps lists every step that matches f, oldest first, reading page after
// page (see StepsPage to read one).
func (c *Client) Steps(ctx context.Context, f StepFilter) ([]api.Step, error) {
	return listAll[api.Step](ctx, c, "/v1/steps", f.query())
}

// StepsPage returns one page of the steps in state (all when empty) on
// node (all when empty), oldest submission first: at most limit (0: the
// server's default, 100; at most MaxPageLimit) from cursor ("" for the
// first page), and the cursor of the next page ("" on the last).
func (c *Client) StepsPage(ctx context.Context, state, node string, limit int, cursor string) ([]api.Step, string, error) {
	return listPage[api.Step](ctx, c, "/v1/steps", StepFilter{State: state, Node: node}.query(), limit, cursor)
}

// Step returns one step.
func (c *Client) Step(ctx context.Context, id string) (api.Step, error) {
	var out api.Step
	_, err := c.call(ctx, request{method: http.MethodGet, path: "/v1/steps/" + escape(id)}, nil, &out)
	return out, err
}

// WaitStep returns step id once its ModifyIndex is past index, or as it is
// when wait (capped by the server, zero for its default) passes first.
// Pass the returned step's ModifyIndex to wait for the next change.
func (c *Client) WaitStep(ctx context.Context, id string, index uint64, wait time.Duration) (api.Step, error) {
	var out api.Step
	_, err := c.call(ctx, request{method: http.MethodGet, path: "/v1/steps/" + escape(id),
		query: waitQuery(index, wait)}, nil, &out)
	return out, err
}

// CancelStep requests the cancellation of step id and returns its record.
// Requesting again is a no-op; the cancel is confirmed (Cancel.ConfirmedAt)
// only once the node reported the process gone.
func (c *Client) CancelStep(ctx context.Context, id, reason string) (api.Step, error) {
	var out api.Step
	_, err := c.call(ctx, request{method: http.MethodPost, path: "/v1/steps/" + escape(id) + "/cancel"},
		api.CancelRequest{Reason: reason}, &out)
	return out, err
}

// StreamURL returns where the node running (or that ran) step id serves
// its output stream.
func (c *Client) StreamURL(ctx context.Context, id string) (string, error) {
	loc, err := c.StreamLocation(ctx, id)
	return loc.URL, err
}

// StreamLocation returns where the node running (or that ran) step id
// serves its output stream, and that node's id: a caller dialling the URL
// over TLS verifies the server is exactly agent/Node.
func (c *Client) StreamLocation(ctx context.Context, id string) (api.StreamURL, error) {
	var out api.StreamURL
	_, err := c.call(ctx, request{method: http.MethodGet, path: "/v1/steps/" + escape(id) + "/stream-url"}, nil, &out)
	return out, err
}

// SealEnv seals env (NAME=VALUE entries) for the step that will be
// submitted later with id step: pass the answer as that request's
// SealedEnv. The values never come back from the scheduler; the sealed
// entries open only for that step id, with the cluster's env key. Sealing
// changes nothing, so it is retried like a read.
func (c *Client) SealEnv(ctx context.Context, step string, env []string) ([]api.SealedEnv, error) {
	var out api.SealEnvAnswer
	_, err := c.call(ctx, request{method: http.MethodPost, path: "/v1/env/seal", retry: retrySafe},
		api.SealEnvRequest{Step: step, Env: env}, &out)
	return out.SealedEnv, err
}
