package gateway

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/rodon-compute/rodon/api"
)

// The gate's routes (docs/design/agents.md, §3.5): a proposal, and a
// person's approval or rejection of the one a run awaits. The rules of
// the ApplyChange an approval allows are in gates.go.

// proposalOf reads the proposal named by c's {proposal} (or the body's)
// in run: 404 when it is not one of run's.
func (g *Gateway) proposalOf(c *call, run *runRecord, id string) (api.Proposal, uint64, error) {
	var p api.Proposal
	v, err := g.getProposal(c.ctx, id, &p)
	if errors.Is(err, errNoProposal) || err == nil && p.Run != run.ID {
		return p, 0, notFound("no proposal %q in run %s", truncateText(id, 40), run.ID)
	}
	return p, v, err
}

func (g *Gateway) handleProposal(c *call) error {
	run, _, err := g.getRun(c, c.r.PathValue("id"))
	if err != nil {
		return err
	}
	p, _, err := g.proposalOf(c, &run, c.r.PathValue("proposal"))
	if err != nil {
		return err
	}
	return c.json(http.StatusOK, p)
}

// decide is approve and reject: the run must be awaiting exactly the
// proposal; the proposal changes by compare-and-set (the one place two
// people deciding at once are told apart), then the run goes back to
// running with the decision as its event.
func (g *Gateway) decide(c *call, approve bool) error {
	var req api.ApproveRequest
	if err := c.decode(&req); err != nil {
		return err
	}
	verb := "approve"
	if !approve {
		verb = "reject"
	}
	if approve && req.Reason != "" {
		return badRequest("field \"reason\": only a reject takes a reason")
	}
	if len(req.Reason) > 1000 {
		return badRequest("field \"reason\": %d bytes, at most 1000", len(req.Reason))
	}
	run, _, err := g.getRun(c, c.r.PathValue("id"))
	if err != nil {
		return err
	}
	if run.Agent == nil {
		return conflict("run %s is not an agent run: it has no proposals to %s", run.ID, verb)
	}
	if req.Proposal == "" {
		return badRequest("field \"proposal\": want the proposal the run awaits (%s)", orNothing(run.Agent.Awaiting))
	}
	prop, version, err := g.proposalOf(c, &run, req.Proposal)
	if err != nil {
		return err
	}
	c.target = prop.ID
	if err := checkAwaits(&run, prop.ID, verb); err != nil {
		return err
	}
	now := g.now()
	actor := c.p.actor
	forStep := len(run.Steps)
	switch {
	case approve && prop.State == api.ProposalApproved && prop.ForStep == forStep && now.Before(prop.Expires):
		// Approved already, and the run not resumed yet (a retry after
		// a failure in between): resume it.
	case prop.State != api.ProposalProposed:
		return conflict("proposal %s is %s, not proposed: it cannot be %sd", prop.ID, prop.State, verb)
	case approve:
		prop.State, prop.ApprovedBy, prop.ApprovedAt = api.ProposalApproved, &actor, now
		prop.Expires, prop.ForStep = now.Add(g.cfg.ApprovalTTL), forStep
	default:
		prop.State, prop.RejectedBy, prop.Reason = api.ProposalRejected, &actor, req.Reason
		if prop.Reason == "" {
			prop.Reason = "rejected without a reason"
		}
	}
	if _, err := putRecord(c.ctx, g.store, kindProposal, prop.ID, version, &prop); IsConflict(err) {
		return conflict("proposal %s changed at the same time (another person decided?): read it again", prop.ID)
	} else if err != nil {
		return err
	}
	ev := api.RunEvent{Kind: api.RunEventApproval, Time: now, Proposal: prop.ID, By: &actor}
	if !approve {
		ev.Kind, ev.Summary = api.RunEventRejection, prop.Reason
	}
	updated, err := g.runCAS(c.ctx, run.ID, func(r *runRecord) ([]api.RunEvent, error) {
		if err := checkAwaits(r, prop.ID, verb); err != nil {
			return nil, err
		}
		r.State, r.Agent.Awaiting = api.RunRunning, ""
		if approve {
			r.Agent.Approved = prop.ID
		}
		settleAwaitingSteps(r, prop.ID, approve, actor, prop.Reason)
		return []api.RunEvent{ev}, nil
	})
	if err != nil {
		return err
	}
	return c.json(http.StatusOK, g.operation(c.ctx, &updated, true))
}

// checkAwaits answers 409 unless run is awaiting approval of proposal id.
func checkAwaits(run *runRecord, id, verb string) error {
	switch {
	case run.Agent == nil || run.State != api.RunAwaitingApproval:
		return conflict("run %s is %s, not awaiting an approval: there is nothing to %s", run.ID, run.State, verb)
	case run.Agent.Awaiting != id:
		return conflict("run %s awaits the approval of proposal %s, not %s", run.ID, run.Agent.Awaiting, id)
	}
	return nil
}

func orNothing(s string) string {
	if s == "" {
		return "none now"
	}
	return s
}

func (g *Gateway) handleApprove(c *call) error { return g.decide(c, true) }
func (g *Gateway) handleReject(c *call) error  { return g.decide(c, false) }

// settleAwaitingSteps ends the wait of the steps that paused run on
// proposal id: once a person decided, such a step no longer awaits
// anything. An approved one is done (the next step applies the
// proposal); a rejected one failed, with the reason.
func settleAwaitingSteps(run *runRecord, id string, approved bool, by api.Actor, reason string) {
	for i := range run.Steps {
		s := &run.Steps[i]
		if s.Tool == nil || s.Tool.Proposal != id || s.View == nil || s.View.State != api.StepAwaitingApproval {
			continue
		}
		if approved {
			s.View.State = api.StepDone
			s.Tool.Summary = truncateUTF8(fmt.Sprintf("approved by %s %s: the next step may apply %s", by.Kind, by.ID, id), maxSummary)
		} else {
			s.View.State = api.StepFailed
			s.Tool.Summary = truncateUTF8(fmt.Sprintf("rejected by %s %s: %s", by.Kind, by.ID, reason), maxSummary)
		}
	}
}
