package cluster

import (
	"encoding/json"
	"time"

	"github.com/rodon-compute/rodon/api"
)

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
	// Cause is the typed cause of a failure (an api.Cause* constant).
	Cause  string `json:"cause,omitempty"`
	Phases Phases `json:"phases"`
	// Stdout and Stderr count the bytes the step wrote to each.
	Stdout int64 `json:"stdout_bytes"`
	Stderr int64 `json:"stderr_bytes"`
	// Workspace is the tree the step left, for a step with a workspace
	// (see WorkspaceResult).
	Workspace *WorkspaceResult `json:"workspace,omitempty"`
}

// Event is one lifecycle event of a step: small, fit to be replicated
// (output is not an event), with a typed payload per kind (the api's
// payload types: one definition of each). Message is for people; no
// program reads it. It converts to api.Event as it is.
type Event struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Message string    `json:"message"`
	// Attempt is the attempt a placed or requeued event is about.
	Attempt int `json:"attempt,omitempty"`

	Egress      *api.Egress       `json:"egress,omitempty"`
	Files       *api.FilesChanged `json:"files,omitempty"`
	Exit        *api.ExitEvent    `json:"exit,omitempty"`
	Output      *api.Output       `json:"output,omitempty"`
	Waiting     *api.Waiting      `json:"waiting,omitempty"`
	Unplaceable *api.NotPlaceable `json:"unplaceable,omitempty"`
	Warning     *api.Warning      `json:"warning,omitempty"`
	Warm        *api.SandboxWarm  `json:"warm,omitempty"`
}

// legacyEvent holds the fields of an event as recorded before the typed
// payloads (issue 10's flat egress fields, issue 15's dropped_bytes).
type legacyEvent struct {
	Reason       string `json:"reason"`
	Destination  string `json:"destination"`
	Protocol     string `json:"protocol"`
	Packets      uint64 `json:"packets"`
	DroppedBytes int64  `json:"dropped_bytes"`
}

// UnmarshalJSON decodes an event, and an event recorded before the typed
// payloads with its flat fields moved into its kind's payload, so that
// old log entries and snapshots read as new ones. The flat fields are
// read only for an event of a kind that had them and lacks its payload
// (no encoder wrote them for any other, nor with other types).
func (e *Event) UnmarshalJSON(b []byte) error {
	type plain Event
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*e = Event(p)
	switch {
	case e.Kind == EventEgressDenied && e.Egress == nil, e.Kind == EventOutputTruncated && e.Output == nil,
		e.Kind == EventWaiting && e.Waiting == nil, e.Kind == EventUnplaceable && e.Unplaceable == nil:
	default:
		return nil
	}
	var old legacyEvent
	if err := json.Unmarshal(b, &old); err != nil {
		return err
	}
	switch {
	case e.Kind == EventEgressDenied && e.Egress == nil && old.Reason != "":
		e.Egress = &api.Egress{Reason: old.Reason, Destination: old.Destination, Protocol: old.Protocol, Packets: old.Packets}
	case e.Kind == EventOutputTruncated && e.Output == nil && old.DroppedBytes > 0:
		e.Output = &api.Output{DroppedBytes: old.DroppedBytes}
	case e.Kind == EventWaiting && e.Waiting == nil && old.Reason != "":
		e.Waiting = &api.Waiting{Reason: old.Reason}
	case e.Kind == EventUnplaceable && e.Unplaceable == nil && old.Reason != "":
		e.Unplaceable = &api.NotPlaceable{Resource: old.Reason}
	}
	return nil
}

// Event kinds of a node (see api for what each carries).
const (
	EventExited          = api.EventExited
	EventCleanedUp       = api.EventCleanedUp
	EventWarning         = api.EventWarning
	EventEgressDenied    = api.EventEgressDenied
	EventFilesChanged    = api.EventFilesChanged
	EventOutputTruncated = api.EventOutputTruncated
	EventSandboxWarm     = api.EventSandboxWarm
)
