package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// StepRequest is the body of POST /v1/steps: what a step asks for. The
// scheduler picks the ID when it is empty.
type StepRequest struct {
	ID    string   `json:"id,omitempty"`
	Image string   `json:"image"`
	Args  []string `json:"args"`
	// Env holds NAME=VALUE entries. Values are write-only: the scheduler
	// seals them before they are replicated, and no answer returns them
	// (answers name the variables in EnvNames).
	Env []string `json:"env,omitempty"`
	// SealedEnv holds variables sealed earlier for this step's ID by POST
	// /v1/env/seal (the gateway keeps its runs' values so); the request
	// must name that ID. They follow Env in the step's environment.
	SealedEnv []SealedEnv `json:"sealed_env,omitempty"`
	// EnvNames, in answers only, names the step's environment variables
	// in order; their values are never returned. A request must not set
	// it.
	EnvNames []string `json:"env_names,omitempty"`
	// Secrets names the secrets of the step's agent, where its node
	// fetches their values, and the single-use ticket for that fetch
	// (set by the gateway). Answers show the names and the gateway only.
	Secrets *StepSecrets `json:"secrets,omitempty"`
	// CPU is in cores (such as 0.5); MemoryBytes in bytes. Both are
	// reserved on the node while the step is live, and are its limits.
	CPU         float64 `json:"cpu"`
	MemoryBytes int64   `json:"memory_bytes"`
	// Pids caps the step's processes; Timeout is its wall-clock limit, as
	// a Go duration string ("30s"); WorkspaceBytes caps its workspace and
	// OutputBytes the output kept of it. In a request, zero (or absent) is
	// the default (cluster.DefaultLimits: 1024, 1h, 1 GiB, 64 MiB) and a
	// limit outside [cluster.MinLimits, cluster.MaxLimits] is refused; in
	// answers they are the limits in force.
	Pids           int64    `json:"pids,omitempty"`
	Timeout        Duration `json:"timeout,omitzero"`
	WorkspaceBytes int64    `json:"workspace_bytes,omitempty"`
	OutputBytes    int64    `json:"output_bytes,omitempty"`
	// Workspace is a workspace of the store (ws-...); the step starts
	// from BaseRevision, or its head when that is empty, and its changes
	// become a revision authored by the step (Step.Revision). Library is
	// the account library's workspace, read-only at /library.
	Workspace    string `json:"workspace,omitempty"`
	BaseRevision string `json:"base_revision,omitempty"`
	Library      string `json:"library,omitempty"`
	// WorkspaceReadOnly mounts the workspace read-only: the step makes no
	// revision (a Bash step of an agent without a writing tool).
	WorkspaceReadOnly bool `json:"workspace_read_only,omitempty"`
	NoInternet        bool `json:"no_internet,omitempty"`
	TTY               bool `json:"tty,omitempty"`
	// Idempotent steps are placed again after their node is lost; others
	// run at most once.
	Idempotent bool `json:"idempotent,omitempty"`
	// Node, if set, is the only node the step may be placed on (an
	// operator's choice: no workspace binds a step to a node). The step
	// waits in the queue while that node cannot take it.
	Node string `json:"node,omitempty"`
}

// SealedEnv is an environment variable whose value is sealed with the
// cluster env key, bound to one step id and the name: opaque to everyone
// but the scheduler.
type SealedEnv struct {
	Name   string `json:"name"`
	Sealed []byte `json:"sealed"`
}

// SealEnvRequest is the body of POST /v1/env/seal: the environment of the
// step that will be submitted later with id Step.
type SealEnvRequest struct {
	Step string   `json:"step"`
	Env  []string `json:"env"`
}

// SealEnvAnswer is the answer of POST /v1/env/seal: pass SealedEnv as the
// StepRequest's sealed_env when submitting step Step.
type SealEnvAnswer struct {
	Step      string      `json:"step"`
	SealedEnv []SealedEnv `json:"sealed_env"`
}

// Step is the public record of a step (SPEC.md, "Steps").
type Step struct {
	ID string `json:"id"`
	// State is queued, placed, starting, running, or one of the terminal
	// states exited, failed, cancelled, lost, expired (the Step* constants).
	State string `json:"state"`
	// ExitCode is set once the runtime reported the process's exit.
	ExitCode *int `json:"exit_code,omitempty"`
	// TerminatedBy is exit, user, timeout, oom, node_lost or platform.
	TerminatedBy string `json:"terminated_by,omitempty"`
	// Node runs (or ran) the current attempt; empty while queued.
	Node       string  `json:"node,omitempty"`
	Attempts   int     `json:"attempts"`
	Idempotent bool    `json:"idempotent"`
	Cancel     *Cancel `json:"cancel,omitempty"`
	Phases     Phases  `json:"phases"`
	// Events are the latest lifecycle events, oldest first.
	Events []Event `json:"events"`
	// Reason explains a failure, a loss or an expiry for people.
	Reason string `json:"reason,omitempty"`
	// Cause is the typed cause of a step that failed on its node (a
	// Cause* constant), beside Reason.
	Cause string `json:"cause,omitempty"`
	// Unplaceable is the typed cause of a step that failed because no
	// node could ever take it.
	Unplaceable *Unplaceable `json:"unplaceable,omitempty"`
	// EndedAt is when the step reached its terminal state.
	EndedAt time.Time `json:"ended_at,omitzero"`
	// Revision is the workspace revision the step made (detached when
	// its changes conflicted); empty when it made none.
	Revision string `json:"revision,omitempty"`
	// Spec is the request the step was submitted with (without its id).
	Spec StepRequest `json:"spec"`
	// CreateIndex and ModifyIndex are the scheduler's state indexes of
	// the step's submission and last change; pass ModifyIndex as ?index=
	// to wait for the next change.
	CreateIndex uint64 `json:"create_index"`
	ModifyIndex uint64 `json:"modify_index"`
}

// Unplaceable says why no node could ever take a step (cluster.Unplaceable).
type Unplaceable struct {
	// Node is the node the step is bound to, if any; Unregistered says it
	// is not registered.
	Node         string `json:"node,omitempty"`
	Unregistered bool   `json:"unregistered,omitempty"`
	// Missing lists what the step asks more of than any node (that is not
	// down) offers.
	Missing []Shortfall `json:"missing,omitempty"`
	// NoSingleNode: each is offered by some node, none offers all at once.
	NoSingleNode bool `json:"no_single_node,omitempty"`
}

// Shortfall is one resource a step asks more of than any node offers:
// "cpu" (millicores), "memory" (bytes), "pids", "timeout" (nanoseconds),
// "workspace" or "output" (bytes, the nodes' max_limits).
type Shortfall struct {
	Resource string `json:"resource"`
	Want     int64  `json:"want"`
	Largest  int64  `json:"largest"`
}

// Step states (Step.State): the live ones, then the terminal ones.
const (
	StepQueued    = "queued"
	StepPlaced    = "placed"
	StepStarting  = "starting"
	StepRunning   = "running"
	StepExited    = "exited"
	StepFailed    = "failed"
	StepCancelled = "cancelled"
	StepLost      = "lost"
	StepExpired   = "expired"
)

// TerminalState reports whether a step in state is final.
func TerminalState(state string) bool {
	switch state {
	case StepExited, StepFailed, StepCancelled, StepLost, StepExpired:
		return true
	}
	return false
}

// Terminal reports whether the step reached a final state.
func (s Step) Terminal() bool { return TerminalState(s.State) }

// Cancel is the state of a user's request to cancel a step: requested,
// then confirmed once the runtime reported the process gone, or unverified
// (with the reason) when the node could not confirm it.
type Cancel struct {
	RequestedAt time.Time `json:"requested_at"`
	ConfirmedAt time.Time `json:"confirmed_at,omitzero"`
	Unverified  string    `json:"unverified,omitempty"`
}

// CancelRequest is the optional body of POST /v1/steps/{id}/cancel.
type CancelRequest struct {
	Reason string `json:"reason,omitempty"`
}

// StreamURL is the answer of GET /v1/steps/{id}/stream-url: where the
// node running the step serves its output (https:// with TLS, http:// in
// plaintext mode), and that node's id: whoever dials URL verifies the
// server is exactly agent/NODE.
type StreamURL struct {
	URL  string `json:"url"`
	Node string `json:"node"`
}

// Duration is a time.Duration written in JSON as a Go duration string
// ("1m30s"). Decoding accepts only such strings.
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"30s\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration string such as \"30s\": %w", err)
	}
	*d = Duration(v)
	return nil
}
