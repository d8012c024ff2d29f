package gateway

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/rodon-compute/rodon/api"
)

// runStepView is step rs as the API shows it. st is the scheduler's
// record, nil when the step was never submitted; known are the node names
// and addresses to scrub besides st.Node.
func runStepView(rs runStepRecord, st *api.Step, known ...string) api.RunStep {
	out := api.RunStep{
		ID: rs.ID, Index: rs.Index, Args: rs.Spec.Args, Image: rs.Spec.Image, TTY: rs.Spec.TTY,
		Events: []api.Event{}, Denied: map[string]int64{}, Retry: retryRule(rs.Spec.Idempotent), Tool: cloneToolStep(rs.Tool),
	}
	if out.Args == nil {
		out.Args = []string{} // a file tool's step runs no command
	}
	if st == nil {
		out.State = api.StepPending
		if rs.Status == stepSkipped {
			out.State = api.StepCancelled
		}
		return out
	}
	out.State, out.TerminatedBy, out.Attempts, out.Phases = st.State, st.TerminatedBy, st.Attempts, st.Phases
	if st.ExitCode != nil {
		c := *st.ExitCode
		out.ExitCode = &c
	}
	// st.Node is never copied; it is scrubbed wherever it appears.
	known = append([]string{st.Node}, known...)
	out.Reason, out.Cause, out.Revision = Scrub(st.Reason, known...), st.Cause, st.Revision
	if st.Cancel != nil {
		c := *st.Cancel
		c.Unverified = Scrub(c.Unverified, known...)
		out.Cancel = &c
	}
	for _, e := range st.Events {
		switch e.Kind {
		case api.EventEgressDenied:
			// The last count is the total.
			if e.Egress != nil {
				out.Denied[e.Egress.Reason] = int64(e.Egress.Packets)
			}
		case api.EventFilesChanged:
			// The latest event decides; the paths are the workspace's own
			// names, shown as they are.
			out.FilesChanged = cloneFilesChanged(e.Files)
		}
		out.Events = append(out.Events, publicEvent(e, known))
	}
	switch {
	case !st.Phases.CleanedUp.IsZero():
		out.Cleanup = api.CleanupDone
	case st.Terminal() && st.Phases.Created.IsZero():
		out.Cleanup = api.CleanupDone // no sandbox was made
	case !st.Phases.Created.IsZero():
		out.Cleanup = api.CleanupPending
	}
	if st.Attempts > 1 {
		out.Retry += "; placed " + strconv.Itoa(st.Attempts) + " times"
	}
	return out
}

func retryRule(idempotent bool) string {
	if idempotent {
		return "idempotent: placed again if its node is lost"
	}
	return "at most once: not run again if its node is lost"
}

// Bounds of what a run record keeps of its ended steps (their views).
const (
	// maxViewEvents is how many events a kept view holds, the latest
	// (the scheduler keeps as many); events_omitted counts the others.
	maxViewEvents = 64
	// maxViewText bounds one event message, reason or run error kept.
	maxViewText = 1024
	// maxStoredRun is the most a run record may take once its views are
	// in it: under the store's 256 KiB per record, with room to spare.
	maxStoredRun = 250 << 10
	// viewSettle is how long after a step ended its view is kept up to
	// date at most, waiting for its sandbox's clean-up and its cancel's
	// confirmation; then it is final as it is.
	viewSettle = 10 * time.Minute
)

// keptView is the view of ended step rs (st as the scheduler has it) to
// keep in the run record: bounded, and without what the record holds
// already (id, index, args, image, tty, retry), which withRecord puts
// back.
func keptView(rs runStepRecord, st *api.Step, known []string) *api.RunStep {
	v := runStepView(rs, st, known...)
	v.ID, v.Index, v.Args, v.Image, v.TTY, v.Retry, v.Tool = "", 0, nil, "", false, "", nil
	v.Reason = truncateUTF8(v.Reason, maxViewText)
	if v.Cancel != nil {
		v.Cancel.Unverified = truncateUTF8(v.Cancel.Unverified, maxViewText)
	}
	if n := len(v.Events) - maxViewEvents; n > 0 {
		v.Events, v.EventsOmitted = v.Events[n:], n
	}
	for i := range v.Events {
		v.Events[i].Message = truncateUTF8(v.Events[i].Message, maxViewText)
	}
	return &v
}

// withRecord is a kept view as the API shows it: with what its run record
// holds put back.
func withRecord(rs runStepRecord, kept *api.RunStep) api.RunStep {
	v := *kept
	v.ID, v.Index, v.Args, v.Image, v.TTY = rs.ID, rs.Index, rs.Spec.Args, rs.Spec.Image, rs.Spec.TTY
	v.Tool = cloneToolStep(rs.Tool)
	if v.Args == nil {
		v.Args = []string{}
	}
	v.Retry = retryRule(rs.Spec.Idempotent)
	if v.Attempts > 1 {
		v.Retry += "; placed " + strconv.Itoa(v.Attempts) + " times"
	}
	if v.Events == nil {
		v.Events = []api.Event{}
	}
	if v.Denied == nil {
		v.Denied = map[string]int64{}
	}
	return v
}

// viewFinal reports whether the view of ended step st will not change any
// more: its sandbox is gone (or was never made) and its cancel, if any,
// is settled.
func viewFinal(st *api.Step) bool {
	cleaned := !st.Phases.CleanedUp.IsZero() || st.Phases.Created.IsZero()
	settled := st.Cancel == nil || !st.Cancel.ConfirmedAt.IsZero() || st.Cancel.Unverified != ""
	return st.Terminal() && cleaned && settled
}

// fitRecord trims the kept views of run until its JSON is at most
// maxStoredRun bytes: first the oldest events (keeping fewer and fewer per
// step), then the paths of files_changed (counted in more), then long
// texts. A run's steps and errors are bounded at creation, so the last
// stage always fits.
func fitRecord(run *runRecord) {
	size := func() int { b, _ := json.Marshal(run); return len(b) }
	if size() <= maxStoredRun {
		return
	}
	for keep := maxViewEvents / 2; keep >= 0; keep /= 2 {
		for i := range run.Steps {
			if v := run.Steps[i].View; v != nil && len(v.Events) > keep {
				n := len(v.Events) - keep
				v.Events, v.EventsOmitted = v.Events[n:], v.EventsOmitted+n
			}
		}
		if size() <= maxStoredRun {
			return
		}
		if keep == 0 {
			break
		}
	}
	for i := range run.Steps {
		if v := run.Steps[i].View; v != nil && v.FilesChanged != nil {
			fc := v.FilesChanged
			fc.More += len(fc.Added) + len(fc.Modified) + len(fc.Removed)
			fc.Added, fc.Modified, fc.Removed = []string{}, []string{}, []string{}
		}
	}
	if size() <= maxStoredRun {
		return
	}
	for i := range run.Steps {
		if v := run.Steps[i].View; v != nil {
			v.Reason = truncateUTF8(v.Reason, 200)
			if v.Cancel != nil {
				v.Cancel.Unverified = truncateUTF8(v.Cancel.Unverified, 200)
			}
		}
	}
	for i := range run.Errors {
		run.Errors[i] = truncateUTF8(run.Errors[i], 200)
	}
}

// truncateUTF8 shortens s to at most n bytes without splitting a
// character, marking the cut with "...".
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n -= 3
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// cloneToolStep copies a step's tool call, so that a view never shares
// the run record's.
func cloneToolStep(t *api.ToolStep) *api.ToolStep {
	if t == nil {
		return nil
	}
	c := *t
	if t.Refusal != nil {
		r := *t.Refusal
		c.Refusal = &r
	}
	return &c
}
