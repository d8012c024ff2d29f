package gateway

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/size"
)

// publicEvent is e as users see it: its typed payload, with an egress
// destination hidden (hideDestination), and a message the gateway writes from the kind and the
// payload. The message the scheduler or the node wrote is never shown
// (it names nodes) and never read.
func publicEvent(e api.Event, known []string) api.Event {
	out := api.Event{Time: e.Time, Kind: e.Kind, Attempt: e.Attempt,
		Files: e.Files, Exit: e.Exit, Output: e.Output, Waiting: e.Waiting, Unplaceable: e.Unplaceable, Warning: e.Warning, Warm: e.Warm}
	if e.Egress != nil {
		eg := *e.Egress
		eg.Destination = hideDestination(eg.Destination, known)
		out.Egress = &eg
	}
	out.Message = eventMessage(out)
	return out
}

// hideDestination returns dst, an IP address with or without a port, as
// users see it: "[node]" and the port when it is a node's address (one
// of known), else "[address]" (the platform's addresses are not shown).
func hideDestination(dst string, known []string) string {
	if dst == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(dst)
	if err != nil {
		host, port = dst, ""
	}
	if !slices.Contains(known, host) {
		return "[address]"
	}
	if port == "" {
		return "[node]"
	}
	return "[node]:" + port
}

// eventMessage is the sentence users see for e, made from its kind and
// its payload only.
func eventMessage(e api.Event) string {
	switch e.Kind {
	case api.EventQueued:
		return "queued"
	case api.EventPlaced:
		if e.Attempt > 0 {
			return fmt.Sprintf("placed (attempt %d)", e.Attempt)
		}
		return "placed"
	case api.EventStarting:
		return "starting"
	case api.EventStarted:
		return "running"
	case api.EventExited:
		return exitMessage(e.Exit)
	case api.EventCleanedUp:
		return "sandbox cleaned up"
	case api.EventSandboxWarm:
		return "ran in a sandbox made ahead of the step (warm pool)"
	case api.EventLost:
		return "the step's node was lost"
	case api.EventRequeued:
		if e.Attempt > 0 {
			return fmt.Sprintf("re-queued as attempt %d", e.Attempt)
		}
		return "re-queued"
	case api.EventExpired:
		return "expired: not placed before its queue deadline"
	case api.EventCancelRequested:
		return "cancel requested"
	case api.EventCancelConfirmed:
		return "cancel confirmed"
	case api.EventCancelUnverified:
		return "the cancel could not be confirmed: the step's node did not confirm its process gone"
	case api.EventLateReport:
		return "a late report about an attempt already given up on"
	case api.EventNotStarted:
		return "the step's node did not start it in time"
	case api.EventWaiting:
		if e.Waiting != nil {
			switch e.Waiting.Reason {
			case api.WaitNoNode:
				return "waiting: no node is up to take the step"
			case api.WaitNotReady:
				return "waiting: the nodes that could take the step are not ready"
			case api.WaitCapacity:
				return "waiting: no node has enough free now"
			}
		}
		return "waiting"
	case api.EventUnplaceable:
		if u := e.Unplaceable; u != nil {
			switch u.Resource {
			case "node":
				return "no node could ever take the step: the node it is bound to is not registered"
			case "no_single_node":
				return "no node could ever take the step: no one node offers all it asks for"
			case "":
			default:
				return "no node could ever take the step: none has enough " + u.Resource
			}
		}
		return "no node could ever take the step"
	case api.EventEgressDenied:
		if eg := e.Egress; eg != nil {
			unit := "packets"
			if eg.Packets == 1 {
				unit = "packet"
			}
			if eg.Destination == "" {
				return fmt.Sprintf("egress denied: %s, %d %s", eg.Reason, eg.Packets, unit)
			}
			return fmt.Sprintf("egress denied: %s, %s, %d %s", eg.Destination, eg.Reason, eg.Packets, unit)
		}
		return "egress denied"
	case api.EventFilesChanged:
		if fc := e.Files; fc != nil {
			switch n := len(fc.Added) + len(fc.Modified) + len(fc.Removed) + fc.More; n {
			case 0:
				return "no files changed"
			case 1:
				return "1 file changed"
			default:
				return strconv.Itoa(n) + " files changed"
			}
		}
		return "files changed"
	case api.EventOutputTruncated:
		if o := e.Output; o != nil {
			return fmt.Sprintf("output truncated: %s dropped between the first %s and the last %s (output cap %s)",
				size.Format(o.DroppedBytes), size.Format(o.HeadBytes), size.Format(o.TailBytes), size.Format(o.CapBytes))
		}
		return "output truncated"
	case api.EventWarning:
		if w := e.Warning; w != nil {
			switch w.Cause {
			case api.WarningWorkspaceNotCopied:
				return "workspace not copied back"
			case api.WarningWorkspaceNotSaved:
				return "workspace changes not saved"
			case api.WarningOutputHeldBack:
				if o := e.Output; o != nil {
					return fmt.Sprintf("output past the first %s is held back until the step ends: its last %s will be kept and what comes before them dropped (output cap %s)",
						size.Format(o.HeadBytes), size.Format(o.TailBytes), size.Format(o.CapBytes))
				}
				return "output is held back until the step ends"
			case api.WarningWorkspacePathsDropped:
				return droppedMessage(w)
			}
		}
		return "warning"
	}
	return e.Kind
}

// droppedMessage names the paths a step left that its revision does not
// hold, each quoted: a path may hold any byte the step chose.
func droppedMessage(w *api.Warning) string {
	n := len(w.Paths) + w.More
	if n == 0 {
		return "paths not saved in the workspace's revision"
	}
	quoted := make([]string, len(w.Paths))
	for i, p := range w.Paths {
		quoted[i] = strconv.Quote(p)
	}
	what := "paths"
	if n == 1 {
		what = "path"
	}
	msg := fmt.Sprintf("%d %s not saved in the workspace's revision (a link out of the workspace, a name it cannot hold or a special file): %s", n, what, strings.Join(quoted, ", "))
	if w.More > 0 {
		msg += fmt.Sprintf(", and %d more", w.More)
	}
	return msg
}

// exitMessage is the sentence of an exited event.
func exitMessage(x *api.ExitEvent) string {
	switch {
	case x == nil:
		return "ended"
	case x.State == "failed":
		return "failed: " + causeMessage(x.Cause)
	}
	return fmt.Sprintf("%s with code %d (%s)", x.State, x.ExitCode, x.TerminatedBy)
}

// causeMessage is the sentence of a failure's cause (an api.Cause*).
func causeMessage(cause string) string {
	switch cause {
	case api.CauseInvalidStep:
		return "the node refused the step (see the step's reason)"
	case api.CauseImageNotFound:
		return "the step's image is not on the node"
	case api.CauseWorkspaceTooLarge:
		return "the workspace is larger than the step's workspace limit"
	case api.CauseLowDisk:
		return "not enough free disk on the node for the step's workspace"
	case api.CauseSandboxFailed:
		return "the step's sandbox could not be created"
	case api.CauseCommandNotFound:
		return "the command was not found in the image"
	case api.CauseCommandNotExecutable:
		return "the command is not executable"
	case api.CauseStartFailed:
		return "the command could not be started"
	case api.CauseAgentRestarted:
		return "the node's agent restarted and the step's sandbox was gone"
	case api.CauseSecretsUnavailable:
		return "the node could not fetch the step's secrets, so the step did not run"
	case api.CauseWorkspaceConflict:
		return "the step's workspace changes conflict with a newer revision (kept as a detached revision)"
	}
	return "the node could not run the step"
}
