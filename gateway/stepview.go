package gateway

import (
	"strconv"
	"strings"

	"github.com/rodon-compute/rodon/api"
)

// eventEgressDenied is the kind of the node's egress events, whose message
// is "egress denied: <addr>, <reason>, <n> packets".
const eventEgressDenied = "egress_denied"

// runStepView is step rs as the API shows it. st is the scheduler's
// record, nil when the step was never submitted; known are the node names
// and addresses to scrub besides st.Node.
func runStepView(rs runStepRecord, st *api.Step, known ...string) RunStep {
	out := RunStep{
		ID: rs.ID, Index: rs.Index, Args: rs.Spec.Args, Image: rs.Spec.Image, TTY: rs.Spec.TTY,
		Events: []api.Event{}, Denied: map[string]int64{}, Retry: retryRule(rs.Spec.Idempotent),
	}
	if st == nil {
		out.State = "pending"
		if rs.Status == stepSkipped {
			out.State = "cancelled"
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
	out.Reason = Scrub(st.Reason, known...)
	if st.Cancel != nil {
		c := *st.Cancel
		c.Unverified = Scrub(c.Unverified, known...)
		out.Cancel = &c
	}
	for _, e := range st.Events {
		switch e.Kind {
		case eventEgressDenied:
			if reason, n, ok := parseDenied(e.Message); ok {
				out.Denied[reason] = n // the last count is the total
			}
		case eventFilesChanged:
			// The latest event decides (nil when it cannot be read). Its
			// paths are the workspace's own names, read before Scrub,
			// which would take a hex file name for an id.
			out.FilesChanged, _ = parseFilesChanged(e.Message)
		}
		out.Events = append(out.Events, api.Event{Time: e.Time, Kind: e.Kind, Message: Scrub(e.Message, known...)})
	}
	switch {
	case !st.Phases.CleanedUp.IsZero():
		out.Cleanup = "done"
	case st.Terminal() && st.Phases.Created.IsZero():
		out.Cleanup = "done" // no sandbox was made
	case !st.Phases.Created.IsZero():
		out.Cleanup = "pending"
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

// parseDenied reads the reason and packet count of an egress event,
// "egress denied: 169.254.169.254:80, metadata, 3 packets".
func parseDenied(msg string) (reason string, packets int64, ok bool) {
	rest, found := strings.CutPrefix(msg, "egress denied: ")
	if !found {
		return "", 0, false
	}
	parts := strings.Split(rest, ", ")
	if len(parts) != 3 || parts[1] == "" {
		return "", 0, false
	}
	num, unit, _ := strings.Cut(parts[2], " ")
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || (unit != "packets" && unit != "packet") {
		return "", 0, false
	}
	return parts[1], n, true
}
