package gateway

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// The Driver's part in agent runs (docs/design/agents.md §3): a live run
// stays running while its caller appends calls. Its file tools' steps are
// ended by the calls themselves; its Bash steps are script steps the
// Driver submits, each from the workspace's head, and a Bash step that
// does not exit 0 does not end the run. The run ends when its caller
// finishes it (after a live Bash step ended), when it is cancelled, or
// when its grant expires (failed, its live Bash step cancelled).

// toolCallStale is how long a file tool's step may stay calling: past it,
// the gateway answering it is taken for lost and the step fails.
const toolCallStale = 15 * time.Minute

// evolveAgent moves agent run forward in memory, submitting, reading and
// cancelling its Bash steps, and returns the events of what it changed.
func (d *Driver) evolveAgent(ctx context.Context, run *runRecord) (changed bool, events []api.RunEvent, err error) {
	now := d.now()
	a := run.Agent
	if run.live() {
		if run.Cancel == nil && a.Ending == nil && !a.GrantExpires.IsZero() && !now.Before(a.GrantExpires) {
			a.Ending = &api.FinishRequest{Failed: true, Reason: fmt.Sprintf("the run's time ran out (limits.run %s)", shortDuration(time.Duration(a.Limits.Run)))}
			changed = true
		}
		stopping := run.Cancel != nil || a.Ending != nil
		live := false
		for i := 0; i < len(run.Steps); i++ {
			s := &run.Steps[i]
			switch s.Status {
			case stepPending:
				if stopping {
					s.Status, changed = stepSkipped, true
					events = append(events, scriptEvent(s, api.StepCancelled, nil, "not run: the run ended first"))
					continue
				}
				refused, err := d.submit(ctx, run, s, "")
				if err != nil {
					return changed, events, err
				}
				changed = true
				if refused != "" {
					s.Status, s.EndedAt, s.Final = stepEnded, now, true
					s.View = keptView(*s, nil, nil)
					s.View.State, s.View.Reason = api.StepFailed, truncateUTF8("the scheduler refused the step: "+refused, maxViewText)
					events = append(events, scriptEvent(s, api.StepFailed, nil, s.View.Reason))
					continue
				}
				s.Status = stepSubmitted
				i-- // look at it at once
			case stepSubmitted:
				st, err := d.steps.Step(ctx, s.ID)
				if IsNotFound(err) {
					s.Status, s.EndedAt, s.Final, changed = stepEnded, now, true, true
					s.View = keptView(*s, nil, nil)
					s.View.State = api.StepUnknown
					events = append(events, scriptEvent(s, api.StepUnknown, nil, "the scheduler no longer has the step"))
					continue
				}
				if err != nil {
					return changed, events, fmt.Errorf("read step %s: %w", s.ID, err)
				}
				if !st.Terminal() {
					live = true
					if stopping && st.Cancel == nil {
						reason := "run cancelled"
						if run.Cancel == nil {
							reason = a.Ending.Reason
							if reason == "" {
								reason = "run finished"
							}
						}
						if _, err := d.steps.CancelStep(ctx, s.ID, reason); err != nil && !IsConflict(err) {
							return changed, events, fmt.Errorf("cancel step %s: %w", s.ID, err)
						}
					}
					if run.Cancel != nil && run.CancelStep != s.ID {
						run.CancelStep, changed = s.ID, true
					}
					continue
				}
				// Its events first: a revision not read yet is read at the
				// next pass, the step still submitted.
				known := d.nodes.known(ctx, st.Node)
				ev := scriptEvent(s, st.State, st.ExitCode, outcome(st, known))
				var revEvents []api.RunEvent
				if st.Revision != "" {
					if revEvents, err = revisionEvents(ctx, d.files, run.Workspace, st.Revision, s.ID, s.Index); err != nil {
						return changed, events, err
					}
					ev.Revision = st.Revision
				}
				s.Status, changed = stepEnded, true
				s.View, s.Final, s.EndedAt = keptView(*s, &st, known), viewFinal(&st), now
				s.Tool.Summary = truncateUTF8(outcome(st, known), maxSummary)
				if run.Cancel != nil {
					run.CancelStep = s.ID
				}
				events = append(append(events, ev), revEvents...)
			case stepCalling:
				if s.View != nil && now.Sub(s.View.Phases.Started) < toolCallStale {
					continue
				}
				s.Status, s.EndedAt, s.Final, changed = stepEnded, now, true, true
				started := now
				if s.View != nil {
					started = s.View.Phases.Started
				}
				s.View = &api.RunStep{State: api.StepFailed, Phases: api.Phases{Started: started, Exited: now}}
				s.Tool.Summary = "the gateway answering this call was lost before it answered"
				events = append(events, api.RunEvent{Kind: api.RunEventToolCall, Step: s.ID, StepIndex: &s.Index, Tool: s.Tool.Name,
					InputSHA256: s.Tool.InputSHA256, Summary: s.Tool.Summary, State: api.StepFailed})
			}
		}
		if stopping && !live {
			state, reason := api.RunCancelled, "cancelled"
			if run.Cancel == nil {
				state, reason = api.RunSucceeded, a.Ending.Reason
				if a.Ending.Failed {
					state = api.RunFailed
					if reason != "" {
						run.Errors = append(run.Errors, truncateUTF8(reason, maxViewText))
					}
				}
			}
			run.State, run.EndedAt, changed = state, now, true
			events = append(events, api.RunEvent{Kind: api.RunEventEnded, State: state, Summary: truncateUTF8(reason, maxSummary)})
		}
	}
	if c, err := d.settleCancel(ctx, run, now); err != nil || c {
		return changed || c, events, err
	}
	c, err := d.settleViews(ctx, run, now)
	return changed || c, events, err
}

// scriptEvent is the event of Bash step s reaching state.
func scriptEvent(s *runStepRecord, state string, exit *int, summary string) api.RunEvent {
	e := api.RunEvent{Kind: api.RunEventScript, Step: s.ID, StepIndex: &s.Index, Tool: api.ToolBash, State: state,
		Summary: truncateUTF8(summary, maxSummary)}
	if s.Tool != nil {
		e.InputSHA256 = s.Tool.InputSHA256
	}
	if exit != nil {
		c := *exit
		e.ExitCode = &c
	}
	return e
}

// revisionEvents are the events of revision rev of workspace ws, made by
// step (index): what it changed from its parent, by path, eventChanges
// paths an event. A detached revision (refused as a conflict) is not on
// the workspace's history: it has none.
func revisionEvents(ctx context.Context, f Files, ws, rev, step string, index int) ([]api.RunEvent, error) {
	evs, _, err := revisionChanges(ctx, f, ws, rev, step, index)
	return evs, err
}

// revisionChanges is revisionEvents with the revision's files changed
// (nil for a detached one).
func revisionChanges(ctx context.Context, f Files, ws, rev, step string, index int) ([]api.RunEvent, *api.FilesChanged, error) {
	if f == nil {
		return nil, nil, fmt.Errorf("revision %s: no workspace API", rev)
	}
	r, err := f.Revision(ctx, ws, rev)
	if err != nil {
		return nil, nil, fmt.Errorf("read revision %s: %w", rev, err)
	}
	if r.Detached {
		return nil, nil, nil
	}
	cur, err := f.Tree(ctx, ws, rev, "")
	if err != nil {
		return nil, nil, fmt.Errorf("read the tree of revision %s: %w", rev, err)
	}
	var prev []api.TreeEntry
	if r.Parent != "" {
		if prev, err = f.Tree(ctx, ws, r.Parent, ""); err != nil {
			return nil, nil, fmt.Errorf("read the tree of revision %s: %w", r.Parent, err)
		}
	}
	changes := treeChanges(prev, cur)
	var out []api.RunEvent
	for i := 0; i == 0 || i < len(changes); i += eventChanges {
		part := changes[i:min(len(changes), i+eventChanges)]
		idx := index
		out = append(out, api.RunEvent{Kind: api.RunEventRevision, Step: step, StepIndex: &idx, Revision: rev, Parent: r.Parent,
			Changes: part, Summary: fmt.Sprintf("revision %d: %d paths changed", r.Number, len(changes))})
	}
	// A step's view names a few paths: the events have them all.
	fc := cloneFilesChanged(&r.Changes)
	for _, l := range []*[]string{&fc.Added, &fc.Modified, &fc.Removed} {
		if n := len(*l) - api.MaxFilesNamed; n > 0 {
			*l, fc.More = (*l)[:api.MaxFilesNamed], fc.More+n
		}
	}
	return out, fc, nil
}

// treeChanges is what changed from tree prev to tree cur (both sorted by
// path), files and links by path; directories are implied.
func treeChanges(prev, cur []api.TreeEntry) []api.EventChange {
	old := make(map[string]api.TreeEntry, len(prev))
	for _, e := range prev {
		if e.Type != "dir" {
			old[e.Path] = e
		}
	}
	var out []api.EventChange
	for _, e := range cur {
		if e.Type == "dir" {
			continue
		}
		o, ok := old[e.Path]
		delete(old, e.Path)
		if ok && o == e {
			continue
		}
		out = append(out, api.EventChange{Path: e.Path, Type: e.Type, SHA256: e.SHA256, Size: e.Size, Mode: e.Mode, Target: e.Target})
	}
	for p := range old {
		out = append(out, api.EventChange{Path: p, Deleted: true})
	}
	slices.SortFunc(out, func(a, b api.EventChange) int {
		switch {
		case a.Path < b.Path:
			return -1
		case a.Path > b.Path:
			return 1
		}
		return 0
	})
	return out
}

// shortDuration is d as an agent file writes it: 1h, not 1h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
