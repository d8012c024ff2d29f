package api

import "time"

// Event is a lifecycle event of a step (queued, placed, exited, ...), as
// shown in an event frame and in a step's events. Message is a sentence
// for people and nothing else: a program reads Kind and the payload of
// that kind, never the message (internal/archtest enforces it). At most
// one payload is set, the one of Kind's; the others are absent in JSON.
type Event struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Message string    `json:"message"`
	// Attempt is the attempt a placed or requeued event is about.
	Attempt int `json:"attempt,omitempty"`

	Egress      *Egress       `json:"egress,omitempty"`      // egress_denied
	Files       *FilesChanged `json:"files,omitempty"`       // files_changed
	Exit        *ExitEvent    `json:"exit,omitempty"`        // exited
	Output      *Output       `json:"output,omitempty"`      // output_truncated, a warning output_held_back
	Waiting     *Waiting      `json:"waiting,omitempty"`     // waiting
	Unplaceable *NotPlaceable `json:"unplaceable,omitempty"` // unplaceable
	Warning     *Warning      `json:"warning,omitempty"`     // warning
	Warm        *SandboxWarm  `json:"warm,omitempty"`        // sandbox_warm
}

// Event kinds. The scheduler records queued ... late_report; a node
// records egress_denied, files_changed, output_truncated and warning.
const (
	EventQueued           = "queued"
	EventPlaced           = "placed"
	EventStarting         = "starting"
	EventStarted          = "started"
	EventExited           = "exited"
	EventCleanedUp        = "cleaned_up"
	EventLost             = "lost"
	EventRequeued         = "requeued"
	EventExpired          = "expired"
	EventCancelRequested  = "cancel_requested"
	EventCancelConfirmed  = "cancel_confirmed"
	EventCancelUnverified = "cancel_unverified"
	EventLateReport       = "late_report"
	EventWaiting          = "waiting"
	EventUnplaceable      = "unplaceable"
	EventNotStarted       = "not_started"
	EventEgressDenied     = "egress_denied"
	EventFilesChanged     = "files_changed"
	EventOutputTruncated  = "output_truncated"
	EventWarning          = "warning"
	EventSandboxWarm      = "sandbox_warm"
)

// SandboxWarm is the payload of a sandbox_warm event: the step ran in a
// sandbox of its node's warm pool, made (for no step yet) before the step
// claimed it. The step's created phase is the claim's time, never earlier
// than queued; CreatedAt is when the sandbox was made.
type SandboxWarm struct {
	CreatedAt time.Time `json:"created_at"`
	// Class names the pool class (image, network, workspace size, pids),
	// 8 hex digits.
	Class string `json:"class"`
}

// Egress is the payload of an egress_denied event: packets the egress
// filter denied for one reason in the step so far.
type Egress struct {
	// Reason is the filter's reason: "private", "metadata", "node",
	// "documentation", "encapsulation", ...
	Reason string `json:"reason"`
	// Destination is the last denied address, with its port when it had
	// one ("169.254.169.254:80", "[fd00::1]:443", "224.0.0.1").
	Destination string `json:"destination,omitempty"`
	// Protocol is the last denied packet's IP protocol: "tcp", "udp",
	// "icmp", "icmpv6", "gre", ... or its number.
	Protocol string `json:"protocol,omitempty"`
	// Packets counts the packets denied for Reason in the step so far.
	Packets uint64 `json:"packets"`
}

// FilesChanged is what a step (or a run's steps together) changed in the
// workspace, by slash-separated path relative to the workspace;
// directories end in "/". More counts the changed paths not named (a node
// names at most MaxFilesNamed per step).
type FilesChanged struct {
	Added    []string `json:"added"`
	Modified []string `json:"modified"`
	Removed  []string `json:"removed"`
	More     int      `json:"more"`
}

// MaxFilesNamed is how many paths a files_changed event names at most.
const MaxFilesNamed = 20

// ExitEvent is the payload of an exited event: how the attempt ended.
type ExitEvent struct {
	// State is "exited", "failed" or "cancelled".
	State        string `json:"state"`
	ExitCode     int    `json:"exit_code"`
	TerminatedBy string `json:"terminated_by"`
	// Cause is the typed cause of a failure (a Cause* constant), set when
	// State is "failed".
	Cause string `json:"cause,omitempty"`
}

// Output is the payload of an output_truncated event (DroppedBytes set)
// and of the warning that output is held back (without DroppedBytes).
type Output struct {
	// DroppedBytes counts the output bytes past the output cap the log did
	// not keep, between the kept head and the kept tail.
	DroppedBytes int64 `json:"dropped_bytes,omitempty"`
	// HeadBytes and TailBytes are how much of the start and of the end of
	// the output is kept; CapBytes is the step's output cap.
	HeadBytes int64 `json:"head_bytes"`
	TailBytes int64 `json:"tail_bytes"`
	CapBytes  int64 `json:"cap_bytes"`
}

// Waiting is the payload of a waiting event: why a queued step is not
// placed, one of the Wait* codes.
type Waiting struct {
	Reason string `json:"reason"`
}

// Why a queued step waits.
const (
	// WaitNoNode: no node is up, or the node the step is bound to is down.
	WaitNoNode = "no_node"
	// WaitNotReady: the nodes that could take the step are degraded or
	// draining.
	WaitNotReady = "not_ready"
	// WaitCapacity: ready nodes could take the step, but none has enough
	// free now, or a free start slot.
	WaitCapacity = "capacity"
)

// NotPlaceable is the payload of an unplaceable event: the first missing
// resource ("cpu", "memory", ...), "node" when the step's node is not
// registered, "no_single_node" when no one node offers all at once.
type NotPlaceable struct {
	Resource string `json:"resource"`
}

// Warning is the payload of a warning event: what went wrong, one of the
// Warning* codes.
type Warning struct {
	Cause string `json:"cause"`
	// Paths and More, for workspace_paths_dropped: the paths left out of
	// the step's revision (at most MaxFilesNamed), and how many more.
	Paths []string `json:"paths,omitempty"`
	More  int      `json:"more,omitempty"`
}

// Warning causes.
const (
	// WarningWorkspaceNotCopied: the step's workspace copy could not be
	// copied back; the workspace is as it was before the step.
	WarningWorkspaceNotCopied = "workspace_not_copied"
	// WarningOutputHeldBack: the output went past the head the log keeps;
	// the rest is held back until the step ends (the event's Output says
	// how much is kept).
	WarningOutputHeldBack = "output_held_back"
	// WarningWorkspaceNotSaved: the tree the step left could not be
	// saved as a revision (an upload failed, the store refused it); the
	// step's exit is recorded without one.
	WarningWorkspaceNotSaved = "workspace_not_saved"
	// WarningWorkspacePathsDropped: paths the step left that a stored
	// tree cannot hold (a symlink pointing outside the workspace, a name
	// the store refuses, a device, socket or pipe) are not in its
	// revision; the event's message names them.
	WarningWorkspacePathsDropped = "workspace_paths_dropped"
)

// Causes of a step that failed on its node (Exit.Cause, Step.Cause, an
// exited event's cause). The node classifies its error once into one of
// these and a sentence for people (the reason); the runtime's own error
// stays in the node's log.
const (
	// CauseInvalidStep: the node refused the step's spec (a limit above
	// its maximum, an environment it cannot open).
	CauseInvalidStep = "invalid_step"
	// CauseImageNotFound: the step's image is not on the node.
	CauseImageNotFound = "image_not_found"
	// CauseWorkspaceTooLarge: the workspace holds more than the step's
	// workspace limit.
	CauseWorkspaceTooLarge = "workspace_too_large"
	// CauseWorkspaceUnavailable: the node could not fetch the step's
	// starting revision (or library) from the blob store.
	CauseWorkspaceUnavailable = "workspace_unavailable"
	// CauseLowDisk: the node's disk cannot take the step's workspace.
	CauseLowDisk = "low_disk"
	// CauseSandboxFailed: the node could not create the step's sandbox.
	CauseSandboxFailed = "sandbox_failed"
	// CauseCommandNotFound: the step's command is not in the image.
	CauseCommandNotFound = "command_not_found"
	// CauseCommandNotExecutable: the step's command is not executable.
	CauseCommandNotExecutable = "command_not_executable"
	// CauseStartFailed: the step's command could not be started for
	// another reason.
	CauseStartFailed = "start_failed"
	// CauseAgentRestarted: the node agent restarted and the step's
	// sandbox was gone.
	CauseAgentRestarted = "agent_restarted"
	// CauseNodeError: anything else that went wrong on the node.
	CauseNodeError = "node_error"
	// CauseWorkspaceConflict: the step's changes conflict with a revision
	// committed since its base (the same path changed on both sides); they
	// are kept as a detached revision (Step.Revision), the reason names
	// the path and the revisions.
	CauseWorkspaceConflict = "workspace_conflict"
	// CauseSecretsUnavailable: the node could not fetch the step's
	// secrets from the gateway (its single-use ticket used or expired, the
	// gateway unreachable or refusing); the step never runs without them.
	CauseSecretsUnavailable = "secrets_unavailable"
)
