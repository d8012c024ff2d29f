package gateway

import (
	"time"

	"github.com/rodon-compute/rodon/api"
)

// The JSON objects of the gateway's API (docs/GATEWAY.md).

// Actor names who did something: an account or an API key.
type Actor struct {
	// Kind is "account" or "key".
	Kind string `json:"kind"`
	ID   string `json:"id"`
}

// Account is a member as the API shows it: never a password hash.
type Account struct {
	ID         string    `json:"id"`
	Email      string    `json:"email"`
	Role       Role      `json:"role"`
	Workspaces []string  `json:"workspaces"`
	CreatedAt  time.Time `json:"created_at"`
}

// Key is an API key as the API shows it: never its secret.
type Key struct {
	ID         string    `json:"id"`
	Name       string    `json:"name"`
	Role       Role      `json:"role"`
	Workspaces []string  `json:"workspaces"`
	CreatedAt  time.Time `json:"created_at"`
	LastUsedAt time.Time `json:"last_used_at,omitzero"`
}

// Workspace is a named set of files that the steps of its runs see.
type Workspace struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// Session groups the runs of one conversation or task in a workspace
// (kind "session").
type Session struct {
	ID        string    `json:"id"`
	Workspace string    `json:"workspace"`
	Title     string    `json:"title"`
	CreatedBy Actor     `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
}

// Operation is a run as the API shows it.
type Operation struct {
	ID        string      `json:"id"`
	Workspace string      `json:"workspace"`
	Session   string      `json:"session,omitempty"`
	State     string      `json:"state"`
	CreatedBy Actor       `json:"created_by"`
	CreatedAt time.Time   `json:"created_at"`
	EndedAt   time.Time   `json:"ended_at,omitzero"`
	Steps     []RunStep   `json:"steps"`
	Errors    []string    `json:"errors"`
	Cancel    *api.Cancel `json:"cancel,omitempty"`
	// FilesChanged is the union of the steps' files_changed, in step
	// order; absent when no step reported one.
	FilesChanged *FilesChanged `json:"files_changed,omitempty"`
}

// RunStep is one step of a run: the scheduler's step without its node,
// with free text scrubbed of provider identifiers.
type RunStep struct {
	ID           string      `json:"id"`
	Index        int         `json:"index"`
	Args         []string    `json:"args"`
	Image        string      `json:"image"`
	TTY          bool        `json:"tty,omitempty"`
	State        string      `json:"state"`
	ExitCode     *int        `json:"exit_code,omitempty"`
	TerminatedBy string      `json:"terminated_by,omitempty"`
	Reason       string      `json:"reason,omitempty"`
	Attempts     int         `json:"attempts"`
	Phases       api.Phases  `json:"phases"`
	Cancel       *api.Cancel `json:"cancel,omitempty"`
	Events       []api.Event `json:"events"`
	// EventsOmitted counts the step's older events no longer shown (a
	// run record keeps the latest 64 of an ended step, fewer when the
	// run's steps have many).
	EventsOmitted int `json:"events_omitted,omitempty"`
	// Denied counts the packets the egress policy denied, by reason (the
	// last count the node reported).
	Denied map[string]int64 `json:"denied"`
	// FilesChanged is what the step changed in the workspace, from the
	// node's latest files_changed event; absent before there is one.
	FilesChanged *FilesChanged `json:"files_changed,omitempty"`
	// Retry says what happens to the step if its node is lost.
	Retry string `json:"retry"`
	// Cleanup is "done" once the sandbox is gone, "pending" before.
	Cleanup string `json:"cleanup,omitempty"`
}

// StepSpec is one step of a run request.
type StepSpec struct {
	Args  []string `json:"args"`
	Image string   `json:"image"`
	Env   []string `json:"env"`
	CPU   float64  `json:"cpu"`
	// Memory is a size such as "512Mi" or "1G" (internal/size: the one
	// grammar of sizes, as schedctl's and agentd's flags).
	Memory string `json:"memory"`
	// Timeout, Pids, WorkspaceSize (a size such as "2Gi") and OutputCap
	// (a size) are the step's limits; zero or absent is the default of
	// the one table (cluster.Limits), which the scheduler fills in.
	Timeout       api.Duration `json:"timeout"`
	Pids          int64        `json:"pids,omitempty"`
	WorkspaceSize string       `json:"workspace_size,omitempty"`
	OutputCap     string       `json:"output_cap,omitempty"`
	NoInternet    bool         `json:"no_internet"`
	TTY           bool         `json:"tty"`
}
