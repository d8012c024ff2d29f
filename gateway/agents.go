package gateway

import (
	"context"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/gateway/tools"
)

// Agent runs (docs/design/agents.md, §3): creation, tool calls, events,
// finish. The runs helper owns this file.

// toolCall is one tool call on its way: the run as read when the call's
// step was appended, the grant, the step, and what the tools act on.
type toolCall struct {
	run    *runRecord
	claims *grantClaims
	index  int    // the step's index in the run
	stepID string // its id (stepID(run.ID, index))
	env    tools.Env
	// author is the step, the author of every revision the call makes.
	author api.Author
}

// runCAS reads run id, lets change modify it and return the events the
// change records, reserves their seqs (agentRunRecord.Events) and writes
// the run back by compare-and-set (trying again on a conflict, change
// called again on a fresh read), then writes the events. It answers the
// run as written.
func (g *Gateway) runCAS(ctx context.Context, id string, change func(*runRecord) ([]api.RunEvent, error)) (runRecord, error) {
	return runRecord{}, notImplemented("agent runs")
}

func (g *Gateway) handleRunSteps(c *call) error  { return notImplemented("tool calls") }
func (g *Gateway) handleRunEvents(c *call) error { return notImplemented("run events") }
func (g *Gateway) handleFinishRun(c *call) error { return notImplemented("finish") }

// notImplemented is the answer of a part not built yet.
func notImplemented(what string) error {
	return &httpError{Status: 501, Code: "not_implemented", Message: what + " are not implemented yet"}
}
