package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// AgentInput returns the relay's Stdin and Resize hooks (Config.Stdin,
// Config.Resize): each message is
// POSTed to the node agent running the step (POST /v1/steps/{id}/input
// beside the stream URL the scheduler gives), through agents, which verify
// the server is that node's agent before anything is sent.
func AgentInput(locate func(ctx context.Context, id string) (api.StreamURL, error), agents *Agents) (
	stdin func(ctx context.Context, id string, data []byte) error,
	resize func(ctx context.Context, id string, cols, rows int) error,
) {
	send := func(ctx context.Context, id string, in api.StepInput) error {
		loc, err := locate(ctx, id)
		if err != nil {
			return fmt.Errorf("find the step's node: %w", err)
		}
		hc, u, err := agents.Client(loc)
		if err != nil {
			return fmt.Errorf("input of step %s: %w", id, err)
		}
		base, ok := strings.CutSuffix(u.Path, "/stream")
		if !ok {
			return fmt.Errorf("unexpected stream URL of step %s", id)
		}
		u.Path, u.RawPath, u.RawQuery = base+"/input", "", ""
		body, _ := json.Marshal(in)
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("send input to the step's node: %w", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusNoContent {
			return nil
		}
		var e api.Error
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if json.Unmarshal(b, &e) == nil && e.Detail.Message != "" {
			return fmt.Errorf("step %s: %s", id, e.Detail.Message)
		}
		return fmt.Errorf("step %s: input refused (%s)", id, resp.Status)
	}
	stdin = func(ctx context.Context, id string, data []byte) error {
		return send(ctx, id, api.StepInput{Type: "stdin", Data: string(data)})
	}
	resize = func(ctx context.Context, id string, cols, rows int) error {
		return send(ctx, id, api.StepInput{Type: "resize", Cols: cols, Rows: rows})
	}
	return stdin, resize
}
