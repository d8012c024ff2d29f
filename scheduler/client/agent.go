package client

import (
	"context"
	"net/http"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// The agent routes take the cluster command types as bodies; their At
// field is ignored (the leader stamps times). Every agent write may be
// repeated: the scheduler treats a repeated report as a no-op.

// HeartbeatResponse is the answer to a heartbeat.
type HeartbeatResponse struct {
	// Unwanted are attempts the node reported running that the scheduler
	// does not want there: kill and clean them up without reporting an
	// exit.
	Unwanted []cluster.StepAttempt `json:"unwanted,omitempty"`
	// TTL is how long the scheduler waits for the next heartbeat before it
	// declares the node down; heartbeat well within it (TTL/3).
	TTL api.Duration `json:"ttl"`
}

// Assignments are what a node should be running.
type Assignments struct {
	// Index is the state index the answer is as of: pass it to the next
	// Assignments call to wait for a change.
	Index uint64 `json:"index"`
	// Steps are the node's placed, starting and running steps, oldest
	// first, with their cancel state; with Changes, only those of them
	// that changed after the index the call passed.
	Steps []cluster.Step `json:"steps"`
	// Changes is set when Steps holds only the changes (an answer to
	// AssignmentChanges that the scheduler could give as changes): every
	// step not in Steps is as the previous answer had it, and Live lists
	// the node's live attempts, by step id. A step no longer in Live is
	// no longer assigned to the node.
	Changes bool                  `json:"changes,omitempty"`
	Live    []cluster.StepAttempt `json:"live,omitempty"`
}

// Register creates or updates the node's record and returns it.
func (c *Client) Register(ctx context.Context, r cluster.RegisterNode) (cluster.Node, error) {
	var out cluster.Node
	_, err := c.call(ctx, request{method: http.MethodPost, path: "/v1/agent/register"}, r, &out)
	return out, err
}

// Heartbeat reports the node alive with its health and running attempts.
func (c *Client) Heartbeat(ctx context.Context, h cluster.Heartbeat) (HeartbeatResponse, error) {
	var out HeartbeatResponse
	_, err := c.call(ctx, request{method: http.MethodPost, path: "/v1/agent/heartbeat"}, h, &out)
	return out, err
}

// Assignments returns node's assignments at once when index is zero or
// they changed after index, else when they change or wait (capped by the
// server, zero for its default) passes. It is a long poll: call it in a
// loop with the previous answer's Index.
func (c *Client) Assignments(ctx context.Context, node cluster.NodeID, index uint64, wait time.Duration) (Assignments, error) {
	q := waitQuery(index, wait)
	q.Set("node", string(node))
	var out Assignments
	_, err := c.call(ctx, request{method: http.MethodGet, path: "/v1/agent/assignments", query: q}, nil, &out)
	return out, err
}

// AssignmentChanges is Assignments for an agent that keeps the previous
// answer: when it can, the scheduler answers only the steps changed after
// index, with the list of live attempts (Changes set); otherwise (index
// zero, a scheduler without changes, a member behind the index, a
// restore since) every live step, as Assignments does.
func (c *Client) AssignmentChanges(ctx context.Context, node cluster.NodeID, index uint64, wait time.Duration) (Assignments, error) {
	q := waitQuery(index, wait)
	q.Set("node", string(node))
	q.Set("changes", "true")
	var out Assignments
	_, err := c.call(ctx, request{method: http.MethodGet, path: "/v1/agent/assignments", query: q}, nil, &out)
	return out, err
}

// ReportPhase reports an attempt's progress (starting, running, phase
// times such as cleaned_up).
func (c *Client) ReportPhase(ctx context.Context, p cluster.StepPhase) error {
	return c.post(ctx, "/v1/agent/steps/"+escape(string(p.Step))+"/phase", p)
}

// ReportEvents appends lifecycle events to an attempt.
func (c *Client) ReportEvents(ctx context.Context, e cluster.StepEvents) error {
	return c.post(ctx, "/v1/agent/steps/"+escape(string(e.Step))+"/events", e)
}

// ReportExit reports the runtime-confirmed end of an attempt. For a step
// with a cancel, follow it with ConfirmCancel.
func (c *Client) ReportExit(ctx context.Context, x cluster.StepExit) error {
	return c.post(ctx, "/v1/agent/steps/"+escape(string(x.Record.Step))+"/exit", x)
}

// ConfirmCancel reports that the process of a cancelled attempt is gone
// (after its exit was reported).
func (c *Client) ConfirmCancel(ctx context.Context, cc cluster.ConfirmCancel) error {
	return c.post(ctx, "/v1/agent/steps/"+escape(string(cc.Step))+"/cancel-confirmed", cc)
}

func (c *Client) post(ctx context.Context, path string, body any) error {
	_, err := c.call(ctx, request{method: http.MethodPost, path: path}, body, nil)
	return err
}

// AgentUploads asks for PUT URLs for the blobs of an attempt's workspace result
// (docs/design/workspaces.md "Results"): the answer has one for each blob
// the store lacks.
func (c *Client) AgentUploads(ctx context.Context, req cluster.UploadsRequest) (cluster.UploadsResponse, error) {
	var out cluster.UploadsResponse
	_, err := c.call(ctx, request{method: http.MethodPost, path: "/v1/agent/uploads"}, req, &out)
	return out, err
}

// Reports sends an agent's reports together (POST /v1/agent/reports): the
// leader logs them in order, and each gets its own result. An error is a
// failure of the whole request (any report may or may not be applied;
// all may be sent again).
func (c *Client) Reports(ctx context.Context, r cluster.Reports) (cluster.ReportsResult, error) {
	var out cluster.ReportsResult
	_, err := c.call(ctx, request{method: http.MethodPost, path: "/v1/agent/reports"}, r, &out)
	return out, err
}
