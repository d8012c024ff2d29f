package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/rodon-compute/rodon/api"
)

// Errors of an Upstream that the relay does not retry: the stream cannot
// be had by asking again. An Upstream wraps them; test with errors.Is.
var (
	// ErrNotFound: the step has no stream (it never ran on a node, or its
	// output is past retention).
	ErrNotFound = errors.New("no stream for step")
	// ErrBadFrom: the stream has no frame numbered from.
	ErrBadFrom = errors.New("no such frame")
)

// Upstream is where the relay reads a step's stream.
type Upstream interface {
	// Open returns the step's frames after frame from, following the
	// step until its exit frame, as newline-delimited JSON (one api.Frame
	// per line, as the node agent serves it). Cancelling ctx ends the
	// stream: reads return an error. The caller closes the stream.
	Open(ctx context.Context, stepID string, from uint64) (io.ReadCloser, error)
}

// NewAgentUpstream returns the Upstream of the node agents' stream
// servers: resolve returns where the step's node serves its stream and
// which node that is (the scheduler's GET /v1/steps/{id}/stream-url, as
// scheduler client's StreamLocation; it may wrap ErrNotFound for a step
// that does not exist), and Open asks that URL for ?from=N&follow=1 as
// NDJSON through agents, which verify the server is that node's agent.
func NewAgentUpstream(resolve func(ctx context.Context, stepID string) (api.StreamURL, error), agents *Agents) Upstream {
	return &agentUpstream{resolve: resolve, agents: agents}
}

type agentUpstream struct {
	resolve func(ctx context.Context, stepID string) (api.StreamURL, error)
	agents  *Agents
}

const ndjson = "application/x-ndjson"

func (u *agentUpstream) Open(ctx context.Context, stepID string, from uint64) (io.ReadCloser, error) {
	where, err := u.resolve(ctx, stepID)
	if err != nil {
		return nil, fmt.Errorf("find the node of step %s: %w", stepID, err)
	}
	client, loc, err := u.agents.Client(where)
	if err != nil {
		return nil, fmt.Errorf("stream of step %s: %w", stepID, err)
	}
	q := loc.Query()
	q.Set("from", strconv.FormatUint(from, 10))
	q.Set("follow", "1")
	loc.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, loc.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("stream of step %s: %w", stepID, err)
	}
	req.Header.Set("Accept", ndjson)
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("stream of step %s: %w", stepID, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, agentError(stepID, resp)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != ndjson {
		resp.Body.Close()
		return nil, fmt.Errorf("stream of step %s: agent answered %q, want %s", stepID, resp.Header.Get("Content-Type"), ndjson)
	}
	return resp.Body, nil
}

// agentError turns the agent's refusal into an error, wrapping ErrNotFound
// or ErrBadFrom for the refusals that asking again cannot change.
func agentError(stepID string, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	msg := strings.TrimSpace(string(body))
	var doc api.Error
	if json.Unmarshal(body, &doc) == nil && doc.Detail.Message != "" {
		msg = doc.Detail.Message
	}
	err := fmt.Errorf("stream of step %s: agent answered %s: %s", stepID, resp.Status, msg)
	switch resp.StatusCode {
	case http.StatusNotFound:
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case http.StatusBadRequest:
		return fmt.Errorf("%w: %w", ErrBadFrom, err)
	}
	return err
}
