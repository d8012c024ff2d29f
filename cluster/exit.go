package cluster

import "time"

// ExitRecord is the end of a step as the runtime confirmed it. It exists only
// after containerd reported the exit of the step's process (or, for a step
// that never started, after the runtime gave up on starting it).
type ExitRecord struct {
	Step StepID `json:"step"`
	// State is StateExited when the process ran and exited (whatever its
	// code), StateFailed when it could not be started, StateCancelled when a
	// user's cancel ended it.
	State StepState `json:"state"`
	// ExitCode is the process's exit status, 128+signal when a signal killed
	// it, as shells report it. It is meaningful for StateExited and
	// StateCancelled.
	ExitCode     int          `json:"exit_code"`
	TerminatedBy TerminatedBy `json:"terminated_by"`
	// Reason explains a failure or a platform termination for people.
	Reason string `json:"reason,omitempty"`
	Phases Phases `json:"phases"`
	// Stdout and Stderr count the bytes the step wrote to each.
	Stdout int64 `json:"stdout_bytes"`
	Stderr int64 `json:"stderr_bytes"`
}

// Event is one lifecycle event of a step: small, human-readable, and fit to
// be replicated (output is not an event). Keep its fields in step with
// api.Event, which it converts to.
type Event struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Message string    `json:"message"`

	// An egress_denied event says in fields what its message says; other
	// events leave them empty (and absent in JSON).

	// Reason is the egress filter's reason: "private", "metadata",
	// "node", "documentation", "encapsulation", ...; of an EventWaiting
	// a Wait* code, of an EventUnplaceable the first missing resource.
	Reason string `json:"reason,omitempty"`
	// Destination is the last denied address, with its port when it had
	// one ("169.254.169.254:80", "[fd00::1]:443", "224.0.0.1").
	Destination string `json:"destination,omitempty"`
	// Protocol is the last denied packet's IP protocol: "tcp", "udp",
	// "icmp", "icmpv6", "gre", ... or its number.
	Protocol string `json:"protocol,omitempty"`
	// Packets counts the packets denied for Reason in the step so far.
	Packets uint64 `json:"packets,omitempty"`

	// DroppedBytes, in an output_truncated event, counts the output bytes
	// the step wrote past its output cap that the log did not keep (between
	// the kept head and the kept tail).
	DroppedBytes int64 `json:"dropped_bytes,omitempty"`
}

// Event kinds.
const (
	EventCreated   = "created"
	EventStarted   = "started"
	EventKill      = "kill"
	EventExited    = "exited"
	EventOOM       = "oom"
	EventCleanedUp = "cleaned_up"
	EventAdopted   = "adopted"
	EventWarning   = "warning"
	// EventEgressDenied reports packets the egress filter denied, by
	// reason: "egress denied: 169.254.169.254:80, metadata, 3 packets",
	// and the same in its Reason, Destination, Protocol and Packets fields.
	EventEgressDenied = "egress_denied"
	// EventFilesChanged says what the step changed in its workspace:
	// "3 files changed: +chart.png, ~summary.csv, -old.txt".
	EventFilesChanged = "files_changed"
	// EventOutputTruncated says the step's output went past its output cap
	// (output_bytes): the log kept the head and the tail, and DroppedBytes
	// counts what it dropped between them.
	EventOutputTruncated = "output_truncated"
)
