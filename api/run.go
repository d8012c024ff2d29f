package api

import "time"

// Operation is a run as the gateway's API shows it (GET /v1/runs/{id}).
type Operation struct {
	ID        string    `json:"id"`
	Workspace string    `json:"workspace"`
	Session   string    `json:"session,omitempty"`
	State     string    `json:"state"`
	CreatedBy Actor     `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	Steps     []RunStep `json:"steps"`
	Errors    []string  `json:"errors"`
	Cancel    *Cancel   `json:"cancel,omitempty"`
	// FilesChanged is the union of the steps' files_changed, in step
	// order; absent when no step reported one.
	FilesChanged *FilesChanged `json:"files_changed,omitempty"`
	// Agent is set on an agent run (api/agent.go): its agent file and
	// what its grant holds.
	Agent *RunAgent `json:"agent,omitempty"`
	// Refusals counts the run's refused tool calls.
	Refusals int `json:"refusals,omitempty"`
	// Awaiting is the proposal a run awaiting approval waits on.
	Awaiting *Proposal `json:"awaiting,omitempty"`
}

// Run states (Operation.State): running until the run ends, then one of
// the others.
const (
	RunRunning   = "running"
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
	RunCancelled = "cancelled"
)

// RunStep is one step of a run: the scheduler's step without its node,
// with free text scrubbed of provider identifiers.
type RunStep struct {
	ID    string   `json:"id"`
	Index int      `json:"index"`
	Args  []string `json:"args"`
	Image string   `json:"image"`
	TTY   bool     `json:"tty,omitempty"`
	// State is a step state (Step.State), StepPending before the step is
	// submitted, StepCancelled for a step cancelled before it ran, or
	// StepUnknown when the scheduler no longer has the step.
	State        string `json:"state"`
	ExitCode     *int   `json:"exit_code,omitempty"`
	TerminatedBy string `json:"terminated_by,omitempty"`
	Reason       string `json:"reason,omitempty"`
	// Cause is the typed cause of a step that failed on its node (a
	// Cause* constant), beside Reason.
	Cause    string  `json:"cause,omitempty"`
	Attempts int     `json:"attempts"`
	Phases   Phases  `json:"phases"`
	Cancel   *Cancel `json:"cancel,omitempty"`
	Events   []Event `json:"events"`
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
	// Cleanup is CleanupDone once the sandbox is gone, CleanupPending
	// before.
	Cleanup string `json:"cleanup,omitempty"`
	// Revision is the workspace revision the step made (detached when
	// its changes conflicted); empty when it made none.
	Revision string `json:"revision,omitempty"`
	// Tool is set on a step of an agent run: the tool call it is. A Bash
	// step is also a script step (Args, Image and the rest are its).
	Tool *ToolStep `json:"tool,omitempty"`
}

// The states of a run's step besides a step's own (RunStep.State).
const (
	StepPending = "pending"
	StepUnknown = "unknown"
)

// RunStep.Cleanup values.
const (
	CleanupDone    = "done"
	CleanupPending = "pending"
)

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
	Timeout       Duration `json:"timeout"`
	Pids          int64    `json:"pids,omitempty"`
	WorkspaceSize string   `json:"workspace_size,omitempty"`
	OutputCap     string   `json:"output_cap,omitempty"`
	NoInternet    bool     `json:"no_internet"`
	TTY           bool     `json:"tty"`
}

// RunRequest is the body of POST /v1/runs: steps run in order, each in a
// fresh sandbox seeing the workspace the previous one left.
type RunRequest struct {
	Workspace string     `json:"workspace"`
	Session   string     `json:"session"`
	Steps     []StepSpec `json:"steps"`
	// Agent names agents/AGENT.md at the workspace head: the run is an
	// agent run, live, with no Steps (api/agent.go).
	Agent string `json:"agent,omitempty"`
}
