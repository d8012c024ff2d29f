package cluster

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// MaxEvents is how many events a step record keeps: the latest ones.
const MaxEvents = 64

// MaxAttempts is how many times an idempotent step is placed before a
// lost attempt is final.
const MaxAttempts = 3

// Event kinds recorded by the scheduler (see exit.go for the agent's).
const (
	EventQueued           = api.EventQueued
	EventPlaced           = api.EventPlaced
	EventStarting         = api.EventStarting
	EventStarted          = api.EventStarted
	EventLost             = api.EventLost
	EventRequeued         = api.EventRequeued
	EventExpired          = api.EventExpired
	EventCancelRequested  = api.EventCancelRequested
	EventCancelConfirmed  = api.EventCancelConfirmed
	EventCancelUnverified = api.EventCancelUnverified
	// EventLateReport records a report about an attempt the scheduler had
	// already given up on, such as the exit of a lost step.
	EventLateReport = api.EventLateReport
)

// StepSpec is what a step asks for; it does not change after submission.
type StepSpec struct {
	// Image is a containerd image reference or a bundle's short name.
	Image string   `json:"image"`
	Args  []string `json:"args"`
	// Env is the step's environment as NAME=VALUE entries. It is set only
	// in an agent's assignments, where the member answering opened the
	// values of SealedEnv for the node that runs the step; the replicated
	// state never holds it (a submission or restore carrying it is
	// refused).
	Env []string `json:"env,omitempty"`
	// EnvError, in an agent's assignment only, replaces Env when the
	// member answering could not open the values (it lacks the env key
	// they were sealed with); the agent fails the step with it.
	EnvError string `json:"env_error,omitempty"`
	// SealedEnv is the environment as replicated, in order: each name with
	// its value sealed by the leader with the cluster env key
	// (internal/envseal, purpose "step", bound to the step id and name).
	SealedEnv []EnvVar `json:"sealed_env,omitempty"`
	// Secrets names the secrets of the step's agent, which its node
	// fetches from the gateway just before the step starts; nil for a
	// step without secrets. See StepSecrets for what is replicated.
	Secrets *StepSecrets `json:"secrets,omitempty"`
	// CPU (cores) and MemoryBytes are reserved on the node while the step is
	// placed, starting or running, and are its limits.
	CPU         float64 `json:"cpu"`
	MemoryBytes int64   `json:"memory_bytes"`
	// Pids caps the step's processes, Timeout its wall-clock time (it ends
	// with terminated_by=timeout), WorkspaceBytes its workspace and
	// OutputBytes the output kept of it (see Limits). The scheduler sets
	// all four at submission (a zero asked for is the default), so every
	// step recorded since has them; a zero, in a step recorded before, is
	// DefaultLimits'.
	Pids           int64         `json:"pids,omitempty"`
	Timeout        time.Duration `json:"timeout,omitempty"`
	WorkspaceBytes int64         `json:"workspace_bytes,omitempty"`
	OutputBytes    int64         `json:"output_bytes,omitempty"`
	// Workspace is the workspace of the store (a ws-... id) the step
	// sees a copy of at /workspace, from BaseRevision (fixed at
	// submission: the head when none was asked for; "" when the
	// workspace had no revision). Library is the account library's
	// workspace, seen read-only at /library.
	Workspace    string `json:"workspace,omitempty"`
	BaseRevision string `json:"base_revision,omitempty"`
	Library      string `json:"library,omitempty"`
	// WorkspaceReadOnly mounts the workspace read-only (its
	// WorkspaceAccess is ReadOnly): the step reports no tree and makes no
	// revision.
	WorkspaceReadOnly bool `json:"workspace_read_only,omitempty"`
	// WorkspaceAccess and LibraryAccess are set only in an agent's
	// assignments, like Env: presigned URLs the member answering made
	// for the node. The replicated state never holds them.
	WorkspaceAccess *WorkspaceAccess `json:"workspace_access,omitempty"`
	LibraryAccess   *WorkspaceAccess `json:"library_access,omitempty"`
	NoInternet      bool             `json:"no_internet,omitempty"`
	TTY             bool             `json:"tty,omitempty"`
	// Idempotent steps are placed again after their node is lost; others
	// run at most once.
	Idempotent bool `json:"idempotent"`
	// Node, if set, is the only node the step may be placed on.
	Node NodeID `json:"node,omitempty"`
}

// Request is the resources the step reserves.
func (s StepSpec) Request() Resources {
	return Resources{CPU: s.CPU, MemoryBytes: s.MemoryBytes}
}

// Validate reports the first problem that makes the spec unacceptable.
func (s StepSpec) Validate() error {
	switch {
	case s.Image == "":
		return fmt.Errorf("empty image")
	case len(s.Args) == 0:
		return fmt.Errorf("empty command")
	case CheckCPU(s.CPU, 0) != nil:
		return CheckCPU(s.CPU, 0)
	case CheckMemory(s.MemoryBytes, 0) != nil:
		return CheckMemory(s.MemoryBytes, 0)
	case s.Pids < 0:
		return fmt.Errorf("pids %d: must not be negative", s.Pids)
	case s.Timeout < 0:
		return fmt.Errorf("timeout %v: must not be negative", s.Timeout)
	case s.WorkspaceBytes < 0:
		return fmt.Errorf("workspace_bytes %d: must not be negative", s.WorkspaceBytes)
	case s.OutputBytes < 0:
		return fmt.Errorf("output_bytes %d: must not be negative", s.OutputBytes)
	}
	for i, e := range s.Env {
		// The entry is never quoted: its value is a secret.
		if name, _, ok := strings.Cut(e, "="); !ok || name == "" || strings.ContainsRune(e, 0) {
			return fmt.Errorf("environment entry %d: want NAME=VALUE without NUL", i)
		}
	}
	for i, v := range s.SealedEnv {
		if err := ValidateEnvName(v.Name); err != nil {
			return fmt.Errorf("sealed environment entry %d: %w", i, err)
		}
		if len(v.Sealed) == 0 {
			return fmt.Errorf("sealed environment entry %d (%s): no sealed value", i, v.Name)
		}
	}
	if s.Secrets != nil {
		if err := s.Secrets.Validate(); err != nil {
			return err
		}
		for _, n := range s.Secrets.Names {
			if slices.Contains(s.EnvNames(), n) {
				return fmt.Errorf("secret %s: names a variable of the environment too: a variable has one value", n)
			}
		}
		if len(s.Secrets.SealedTicket) > 2*MaxTicketBytes {
			return fmt.Errorf("secrets: sealed ticket of %d bytes, at most %d", len(s.Secrets.SealedTicket), 2*MaxTicketBytes)
		}
	}
	return nil
}

// EnvVar is one environment variable of a step as the scheduler keeps it:
// its name, and its value sealed with the cluster env key. Only the
// scheduler opens it, for the agent that runs the step.
type EnvVar struct {
	Name   string `json:"name"`
	Sealed []byte `json:"sealed"`
}

// ValidateEnvName reports whether name can name an environment variable:
// not empty, without '=' or NUL.
func ValidateEnvName(name string) error {
	if name == "" || strings.ContainsAny(name, "=\x00") {
		return fmt.Errorf("variable name %q: want a non-empty name without '=' or NUL", name)
	}
	return nil
}

// EnvNames returns the names of the step's variables, in order.
func (s StepSpec) EnvNames() []string {
	var names []string
	for _, e := range s.Env {
		name, _, _ := strings.Cut(e, "=")
		names = append(names, name)
	}
	for _, v := range s.SealedEnv {
		names = append(names, v.Name)
	}
	return names
}

// Step is the scheduler's record of one step: its spec and where it is in
// its lifecycle. Node, phases and exit fields describe the current attempt.
type Step struct {
	ID    StepID    `json:"id"`
	Spec  StepSpec  `json:"spec"`
	State StepState `json:"state"`
	// Node runs (or ran) the current attempt; empty while queued.
	Node NodeID `json:"node,omitempty"`
	// Attempts counts placements of the step, the current one included;
	// it is 1 until an idempotent step is re-queued after a node loss.
	Attempts int `json:"attempts"`
	// ExitCode is set once an exited or cancelled step's process exit was
	// reported.
	ExitCode     *int         `json:"exit_code,omitempty"`
	TerminatedBy TerminatedBy `json:"terminated_by,omitempty"`
	// Reason explains a failure, a loss or an expiry for people.
	Reason string `json:"reason,omitempty"`
	// Cause is the typed cause of a step that failed on its node (an
	// api.Cause* constant).
	Cause string `json:"cause,omitempty"`
	// Unplaceable is the typed cause of a step that failed because no
	// node could ever take it.
	Unplaceable *Unplaceable `json:"unplaceable,omitempty"`
	Cancel      *Cancel      `json:"cancel,omitempty"`
	Phases      Phases       `json:"phases"`
	// Events are the latest MaxEvents lifecycle events, oldest first;
	// EventsDropped counts older ones no longer kept.
	Events        []Event `json:"events"`
	EventsDropped int     `json:"events_dropped,omitempty"`
	// EndedAt is the leader's time of the step's move to a terminal
	// state; zero while it is not terminal (and in records made before
	// it existed). Terminal steps are compacted out of the replicated
	// state a retention period after it.
	EndedAt time.Time `json:"ended_at,omitzero"`
	// Revision is the workspace revision the step's changes made (a
	// detached one when they conflicted); empty when it made none.
	Revision    string `json:"revision,omitempty"`
	CreateIndex uint64 `json:"create_index"`
	ModifyIndex uint64 `json:"modify_index"`
}

// Cancel is the state of a user's request to cancel a step. A cancel is
// confirmed only once the runtime reported the step's process gone (or
// when nothing had started); when its node is lost first it stays
// unverified, with the reason.
type Cancel struct {
	RequestedAt time.Time `json:"requested_at"`
	ConfirmedAt time.Time `json:"confirmed_at,omitzero"`
	Unverified  string    `json:"unverified,omitempty"`
}

// Pending reports whether the cancel is neither confirmed nor unverified.
func (c *Cancel) Pending() bool {
	return c != nil && c.ConfirmedAt.IsZero() && c.Unverified == ""
}

// Live reports whether the step holds a reservation on its node: it is
// placed, starting or running.
func (s *Step) Live() bool {
	switch s.State {
	case StatePlaced, StateStarting, StateRunning:
		return true
	}
	return false
}

// AddEvent appends e, dropping the oldest event past MaxEvents.
func (s *Step) AddEvent(e Event) {
	s.Events = append(s.Events, e)
	if n := len(s.Events) - MaxEvents; n > 0 {
		s.Events = slices.Delete(s.Events, 0, n)
		s.EventsDropped += n
	}
}

// Clone returns a deep copy of s.
func (s Step) Clone() Step {
	s.Spec.Args = slices.Clone(s.Spec.Args)
	s.Spec.Env = slices.Clone(s.Spec.Env)
	s.Spec.SealedEnv = slices.Clone(s.Spec.SealedEnv)
	s.Spec.Secrets = s.Spec.Secrets.Clone()
	s.Events = slices.Clone(s.Events)
	if s.ExitCode != nil {
		c := *s.ExitCode
		s.ExitCode = &c
	}
	if s.Cancel != nil {
		c := *s.Cancel
		s.Cancel = &c
	}
	s.Unplaceable = s.Unplaceable.Clone()
	return s
}

// StepAttempt names one attempt of a step.
type StepAttempt struct {
	Step    StepID `json:"step"`
	Attempt int    `json:"attempt"`
}
