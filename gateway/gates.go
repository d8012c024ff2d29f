package gateway

import (
	"context"

	"github.com/rodon-compute/rodon/api"
)

// Gates (docs/design/agents.md, §3.5): proposals, approvals, the gated
// ApplyChange. The gates helper owns this file.

// toolPropose records a proposal for call t (ProposeChange) and changes
// nothing.
func (g *Gateway) toolPropose(ctx context.Context, t *toolCall, in api.ProposeChangeInput) (api.ProposeChangeResult, error) {
	return api.ProposeChangeResult{}, notImplemented("ProposeChange")
}

// toolApply applies proposal in.Proposal for call t, or, for a gated
// grant without an approval yet, answers awaiting (the caller pauses the
// run on it). A refusal is a *tools.Refusal.
func (g *Gateway) toolApply(ctx context.Context, t *toolCall, in api.ApplyChangeInput) (res api.ApplyChangeResult, awaiting bool, err error) {
	return api.ApplyChangeResult{}, false, notImplemented("ApplyChange")
}

func (g *Gateway) handleProposal(c *call) error { return notImplemented("proposals") }
func (g *Gateway) handleApprove(c *call) error  { return notImplemented("approve") }
func (g *Gateway) handleReject(c *call) error   { return notImplemented("reject") }
