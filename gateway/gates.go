package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/gateway/tools"
)

// Gates (docs/design/agents.md, §3.5): proposals and the ApplyChange an
// approval allows (the routes are in approvals.go).
//
// A proposal (record kind proposal, id prop-...) is written once by
// ProposeChange in state proposed and then changes only by
// compare-and-set: proposed → approved (a person, POST approve) →
// applied (the one step the approval is for), proposed → rejected, or,
// for a grant whose ApplyChange is not gated, proposed → applied. The
// compare-and-set to applied happens before the commit, so that two
// steps (or two gateways) can never both commit it; a commit that then
// fails leaves the proposal applied with Applied empty and Reason saying
// why.

// Bounds of a proposal (SPEC.md: ProposeChange).
const (
	maxProposalFiles = 64
	maxProposalBytes = 192 << 10
	// maxProposalRecord bounds the proposal's record as stored (its
	// files, its diff and the rest, JSON encoded), under the record
	// store's 256 KiB.
	maxProposalRecord = 250 << 10
	// DefaultApprovalTTL is how long an approval lets the next step
	// apply its proposal (Config.ApprovalTTL, `gateway serve
	// --approval-ttl`), between MinApprovalTTL and MaxApprovalTTL.
	DefaultApprovalTTL = 15 * time.Minute
	MinApprovalTTL     = 10 * time.Second
	MaxApprovalTTL     = 24 * time.Hour
)

const prefixProposal = "prop-"

// proposalID is a new id of a proposal of run: prop-, the run id's part
// after run-, and random characters, so that a run's proposals are listed
// (and deleted with it) by that prefix.
func proposalID(run string) string {
	return proposalPrefix(run) + randomString(8)
}

// proposalPrefix starts the ids of run's proposals.
func proposalPrefix(run string) string { return prefixProposal + strings.TrimPrefix(run, prefixRun) }

// deleteRunProposals deletes the proposals of run (its record is gone),
// a page at a time; a record of the prefix that names another run is
// left alone.
func (g *Gateway) deleteRunProposals(ctx context.Context, run string) error {
	cursor := ""
	for range maintainBudget {
		recs, next, err := g.store.ListRecordsPage(ctx, kindProposal, proposalPrefix(run), storePage, cursor)
		if err != nil {
			return err
		}
		for _, r := range recs {
			var p api.Proposal
			if json.Unmarshal(r.Value, &p) == nil && p.Run != run {
				continue
			}
			if err := g.store.DeleteRecord(ctx, kindProposal, r.ID, r.Version); err != nil && !IsNotFound(err) && !IsConflict(err) {
				return err
			}
		}
		if next == "" {
			return nil
		}
		cursor = next
	}
	return nil
}

// proposalDigest is the hex SHA-256 of files' canonical encoding, the
// digest an approval is for (api.Proposal.SHA256). The files are sorted
// by path, then each is encoded as
//
//	path NUL "delete" LF                      (a deletion)
//	path NUL "file " decimal-length LF content (new content)
//
// and the encodings are concatenated. Paths are cleaned tree paths (they
// never hold NUL or LF) and the content's length is given, so two
// different sets of files never encode alike.
func proposalDigest(files []api.ProposedFile) string {
	sorted := slices.Clone(files)
	slices.SortFunc(sorted, func(a, b api.ProposedFile) int { return strings.Compare(a.Path, b.Path) })
	h := sha256.New()
	for _, f := range sorted {
		h.Write([]byte(f.Path))
		if f.Delete {
			h.Write([]byte("\x00delete\n"))
			continue
		}
		h.Write([]byte("\x00file " + strconv.Itoa(len(f.Content)) + "\n"))
		h.Write([]byte(f.Content))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// refuseInput is a bad_input refusal.
func refuseInput(format string, args ...any) error {
	return &tools.Refusal{Refusal: api.Refusal{Reason: api.RefusedInput, Message: fmt.Sprintf(format, args...)}}
}

// refuseGate is a gate refusal.
func refuseGate(format string, args ...any) error {
	return &tools.Refusal{Refusal: api.Refusal{Reason: api.RefusedGate, Message: fmt.Sprintf(format, args...)}}
}

// toolPropose records a proposal for call t (ProposeChange) and changes
// nothing. Every path goes through the tools' confinement for writing; a
// refusal is a *tools.Refusal.
func (g *Gateway) toolPropose(ctx context.Context, t *toolCall, in api.ProposeChangeInput) (api.ProposeChangeResult, error) {
	switch {
	case in.Patch != "" && len(in.Files) > 0:
		return api.ProposeChangeResult{}, refuseInput("ProposeChange takes either files or patch, not both")
	case in.Patch == "" && len(in.Files) == 0:
		return api.ProposeChangeResult{}, refuseInput("ProposeChange: want files [{\"path\", \"content\"} or {\"path\", \"delete\": true}], at least one, or a patch (a unified diff against the head)")
	}
	head, err := t.env.Workspace.Head(ctx)
	if err != nil {
		return api.ProposeChangeResult{}, fmt.Errorf("read the head of workspace %s: %w", t.run.Workspace, err)
	}
	var failure tools.Failure
	if in.Patch != "" {
		// A patch is the files it makes of the head, whole.
		files, err := tools.PatchFiles(ctx, head, in.Patch)
		if errors.As(err, &failure) {
			return api.ProposeChangeResult{Base: head.Revision(), Error: string(failure)}, nil
		}
		if err != nil {
			return api.ProposeChangeResult{}, err
		}
		in.Files = files
	}
	if len(in.Files) > maxProposalFiles {
		return api.ProposeChangeResult{}, refuseInput("ProposeChange: %d files, at most %d in one proposal", len(in.Files), maxProposalFiles)
	}
	total := 0
	for _, f := range in.Files {
		total += len(f.Content)
	}
	if total > maxProposalBytes {
		return api.ProposeChangeResult{}, refuseInput("ProposeChange: %d bytes of content, at most %d (192 KiB) in one proposal", total, maxProposalBytes)
	}
	// Each path as the workspace's tree path it writes (symlinks
	// inside the tree followed), confined as every write is.
	files := make([]api.ProposedFile, 0, len(in.Files))
	for _, f := range in.Files {
		target, err := tools.Resolve(head, nil, f.Path, true)
		if err != nil {
			return api.ProposeChangeResult{}, err
		}
		files = append(files, api.ProposedFile{Path: target.Path, Content: f.Content, Delete: f.Delete})
	}
	diff, err := tools.ProposalDiff(ctx, head, files)
	if errors.As(err, &failure) {
		return api.ProposeChangeResult{Base: head.Revision(), Error: string(failure)}, nil
	}
	if err != nil {
		return api.ProposeChangeResult{}, err
	}
	slices.SortFunc(files, func(a, b api.ProposedFile) int { return strings.Compare(a.Path, b.Path) })
	prop := api.Proposal{ID: proposalID(t.run.ID), Run: t.run.ID, Step: t.stepID, Base: head.Revision(),
		State: api.ProposalProposed, SHA256: proposalDigest(files), Message: in.Message, Files: files, Diff: diff}
	if b, _ := json.Marshal(prop); len(b) > maxProposalRecord {
		return api.ProposeChangeResult{}, refuseInput("ProposeChange: the proposal with its diff is %d bytes, at most %d: propose fewer or smaller files at a time", len(b), maxProposalRecord)
	}
	if _, err := putRecord(ctx, g.store, kindProposal, prop.ID, 0, &prop); err != nil {
		return api.ProposeChangeResult{}, fmt.Errorf("record proposal %s: %w", prop.ID, err)
	}
	return api.ProposeChangeResult{Proposal: prop.ID, Base: prop.Base, Diff: prop.Diff}, nil
}

// toolApply applies proposal in.Proposal for call t, or, for a gated
// grant without an approval yet, answers awaiting (the caller pauses the
// run on it). A refusal is a *tools.Refusal.
func (g *Gateway) toolApply(ctx context.Context, t *toolCall, in api.ApplyChangeInput) (res api.ApplyChangeResult, awaiting bool, err error) {
	res.Proposal = in.Proposal
	var prop api.Proposal
	version, err := g.getProposal(ctx, in.Proposal, &prop)
	if err != nil || prop.Run != t.run.ID {
		if err == nil || errors.Is(err, errNoProposal) {
			return res, false, refuseGate("ApplyChange: no proposal %q in this run", in.Proposal)
		}
		return res, false, err
	}
	gated := slices.Contains(t.claims.Gates, api.ToolApplyChange)
	if gated {
		// The step an approval is for may apply that proposal and no
		// other.
		if err := g.checkHeldApproval(ctx, t, prop.ID); err != nil {
			return res, false, err
		}
	}
	switch {
	case prop.State == api.ProposalApplied:
		if prop.Applied != "" {
			return res, false, refuseGate("ApplyChange: proposal %s was applied already, by step %s (revision %s)", prop.ID, prop.AppliedBy, prop.Applied)
		}
		return res, false, refuseGate("ApplyChange: proposal %s was applied already, by step %s, and made no revision: %s", prop.ID, prop.AppliedBy, prop.Reason)
	case prop.State == api.ProposalRejected:
		return res, false, refuseGate("ApplyChange: proposal %s was rejected by %s %s: %s", prop.ID, prop.RejectedBy.Kind, prop.RejectedBy.ID, prop.Reason)
	case !gated && prop.State == api.ProposalProposed:
		// An ungated grant applies its own run's proposal once.
	case gated && prop.State == api.ProposalProposed:
		return res, true, nil
	case gated && prop.State == api.ProposalApproved:
		now := g.now()
		switch {
		case t.index != prop.ForStep:
			return res, false, refuseGate("ApplyChange: the approval of proposal %s is for step %d, the step right after it was given; this is step %d: propose it again and ask for a new approval", prop.ID, prop.ForStep, t.index)
		case !now.Before(prop.Expires):
			return res, false, refuseGate("ApplyChange: the approval of proposal %s expired at %s (approved at %s); propose it again and ask for a new approval", prop.ID, prop.Expires.Format(time.RFC3339), prop.ApprovedAt.Format(time.RFC3339))
		case proposalDigest(prop.Files) != prop.SHA256:
			return res, false, refuseGate("ApplyChange: proposal %s is not what was approved (its files' digest changed since)", prop.ID)
		}
	default:
		return res, false, refuseGate("ApplyChange: proposal %s is %s", prop.ID, prop.State)
	}
	// Used once: the compare-and-set to applied before the commit.
	prop.State, prop.AppliedBy = api.ProposalApplied, t.stepID
	version, err = putRecord(ctx, g.store, kindProposal, prop.ID, version, &prop)
	if IsConflict(err) {
		return res, false, refuseGate("ApplyChange: proposal %s was applied already (by another call at the same time)", prop.ID)
	}
	if err != nil {
		return res, false, fmt.Errorf("mark proposal %s applied: %w", prop.ID, err)
	}
	rev, err := g.commitProposal(ctx, t, &prop)
	var conflict *tools.Conflict
	if errors.As(err, &conflict) {
		paths := strings.Join(conflict.Paths, ", ")
		if paths == "" {
			paths = "the workspace"
		}
		prop.Reason = fmt.Sprintf("conflict: %s changed since revision %s, the proposal's base", paths, prop.Base)
		res.Error = fmt.Sprintf("proposal %s conflicts with the workspace: %s changed since revision %s, its base; read them again and propose anew", prop.ID, paths, prop.Base)
		g.finishProposal(ctx, &prop, version)
		return res, false, nil
	}
	if err != nil {
		prop.Reason = "the gateway could not commit it"
		g.finishProposal(ctx, &prop, version)
		return res, false, fmt.Errorf("commit proposal %s: %w", prop.ID, err)
	}
	prop.Applied = rev.ID
	g.finishProposal(ctx, &prop, version)
	res.Revision = rev.ID
	return res, false, nil
}

// checkHeldApproval refuses an ApplyChange of proposal id at step t when
// the step holds a live approval of another proposal of the run.
func (g *Gateway) checkHeldApproval(ctx context.Context, t *toolCall, id string) error {
	if t.run.Agent == nil || t.run.Agent.Approved == "" || t.run.Agent.Approved == id {
		return nil
	}
	var held api.Proposal
	if _, err := g.getProposal(ctx, t.run.Agent.Approved, &held); err != nil {
		if errors.Is(err, errNoProposal) {
			return nil
		}
		return err
	}
	if held.State == api.ProposalApproved && held.ForStep == t.index && g.now().Before(held.Expires) {
		return refuseGate("ApplyChange: step %d may apply only proposal %s, which %s %s approved; %s is another proposal: apply %s, or ask for an approval of %s",
			t.index, held.ID, held.ApprovedBy.Kind, held.ApprovedBy.ID, id, held.ID, id)
	}
	return nil
}

// commitProposal commits prop's files as one revision from its base.
func (g *Gateway) commitProposal(ctx context.Context, t *toolCall, prop *api.Proposal) (api.Revision, error) {
	head, err := t.env.Workspace.Head(ctx)
	if err != nil {
		return api.Revision{}, fmt.Errorf("read the head of workspace %s: %w", t.run.Workspace, err)
	}
	modes := map[string]uint32{}
	for _, e := range head.Entries() {
		if e.Type == "file" {
			modes[e.Path] = e.Mode
		}
	}
	changes := make([]tools.Change, 0, len(prop.Files))
	for _, f := range prop.Files {
		c := tools.Change{Path: f.Path, Delete: f.Delete}
		if !f.Delete {
			c.Content, c.Mode = []byte(f.Content), modes[f.Path]
			if c.Mode == 0 {
				c.Mode = 0o644
			}
		}
		changes = append(changes, c)
	}
	msg := prop.Message
	if msg == "" {
		msg = "apply proposal " + prop.ID
	}
	return t.env.Workspace.Commit(ctx, prop.Base, changes, msg)
}

// finishProposal records what became of an applied proposal (Applied or
// Reason). It is the proposal's last change; a failure is logged: the
// revision exists either way.
func (g *Gateway) finishProposal(ctx context.Context, prop *api.Proposal, version uint64) {
	ctx = context.WithoutCancel(ctx)
	if _, err := putRecord(ctx, g.store, kindProposal, prop.ID, version, prop); err != nil {
		g.log.Error("record the outcome of an applied proposal", "run", prop.Run, "proposal", prop.ID, "applied", prop.Applied, "error", err)
	}
}

// errNoProposal is a proposal id that names no proposal.
var errNoProposal = errors.New("no such proposal")

// getProposal reads proposal id into p; errNoProposal when it does not
// exist or id is not a proposal id.
func (g *Gateway) getProposal(ctx context.Context, id string, p *api.Proposal) (uint64, error) {
	if !validID(id, prefixProposal) {
		return 0, errNoProposal
	}
	v, err := getRecord(ctx, g.store, kindProposal, id, p)
	if IsNotFound(err) {
		return 0, errNoProposal
	}
	return v, err
}
