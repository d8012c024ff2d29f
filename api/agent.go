package api

import (
	"encoding/json"
	"time"
)

// Agent runs (SPEC.md, "Agents, grants, tools and gates";
// docs/design/agents.md). A run made with an agent (RunRequest.Agent) is
// live: its steps are tool calls appended one at a time with the run's
// grant (POST /v1/runs/{id}/steps), and it ends when its caller finishes
// it, cancels it, or its time runs out.

// Tool names, as agent files list them.
const (
	ToolRead          = "Read"
	ToolGlob          = "Glob"
	ToolGrep          = "Grep"
	ToolWrite         = "Write"
	ToolEdit          = "Edit"
	ToolBash          = "Bash"
	ToolProposeChange = "ProposeChange"
	ToolApplyChange   = "ApplyChange"
)

// Tools is every tool, in the order the docs list them.
var Tools = []string{ToolRead, ToolGlob, ToolGrep, ToolWrite, ToolEdit, ToolBash, ToolProposeChange, ToolApplyChange}

// WritingTools are the tools that change a workspace. A grant without
// one gives its Bash steps the workspace read-only.
var WritingTools = []string{ToolWrite, ToolEdit, ToolApplyChange}

// RunAwaitingApproval is the state of a live run paused at a gate
// (Operation.State), besides the run states of run.go.
const RunAwaitingApproval = "awaiting_approval"

// States of a tool-call step (RunStep.State) besides a script step's:
// StepDone for a tool the gateway answered, StepRefused for a call the
// grant or the confinement refused, StepAwaitingApproval for a gated call
// waiting for a person. A file tool that ran and could not do what was
// asked (no such file, old_string not found) is StepFailed, its result's
// Error saying why.
const (
	StepDone             = "done"
	StepRefused          = "refused"
	StepAwaitingApproval = "awaiting_approval"
)

// CodeRefused is the error code of a refused tool call (403).
const CodeRefused = "refused"

// Refusal reasons (Refusal.Reason).
const (
	// RefusedTool: the tool is not in the grant.
	RefusedTool = "tool_not_granted"
	// RefusedPath: the path is outside the workspace and the library, or
	// not a path a tree may hold.
	RefusedPath = "path_outside"
	// RefusedLookalike: the path holds characters that look like path
	// syntax (‥, ／, full-width letters) and would change under NFKC.
	RefusedLookalike = "path_lookalike"
	// RefusedReadOnly: a write to /library or under agents/.
	RefusedReadOnly = "read_only"
	// RefusedGate: a gated tool without an approval for exactly this
	// proposal and this step.
	RefusedGate = "gate"
	// RefusedInput: the input is not what the tool takes.
	RefusedInput = "bad_input"
)

// Refusal is why a tool call was refused: in the 403's error (as
// Error.Refusal fields path and did_you_mean), the step, and the run's
// events.
type Refusal struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// Path is the path as the call gave it; DidYouMean the existing path
	// inside the workspace it probably meant, when there is one.
	Path       string `json:"path,omitempty"`
	DidYouMean string `json:"did_you_mean,omitempty"`
}

// RunAgent is what an agent run records of its agent file (Operation.Agent):
// the file's path and the revision it was read at, and what its grant holds.
type RunAgent struct {
	Name     string      `json:"name"`
	Path     string      `json:"path"`     // agents/NAME.md
	Revision string      `json:"revision"` // the workspace revision the file was read at
	SHA256   string      `json:"sha256"`   // the file's content digest
	Tools    []string    `json:"tools"`
	Secrets  []string    `json:"secrets"`
	Network  string      `json:"network"` // internet or none
	Image    string      `json:"image"`
	Limits   AgentLimits `json:"limits"`
	Gates    []string    `json:"gates"` // gated tools
	// GrantExpires is when the run's grant expires (the run ends then).
	GrantExpires time.Time `json:"grant_expires"`
}

// AgentLimits are an agent's limits as its file gives them, defaults
// filled in: those of each Bash step, and the run's own lifetime.
type AgentLimits struct {
	CPU       float64  `json:"cpu"`
	Memory    string   `json:"memory"`    // a size (internal/size)
	Timeout   Duration `json:"timeout"`   // each Bash step's
	Pids      int64    `json:"pids"`      // each Bash step's
	Workspace string   `json:"workspace"` // a size: each Bash step's workspace_size
	// Run is how long the run may live (its grant's lifetime): 1h
	// unless the file says, at most 24h.
	Run Duration `json:"run"`
}

// RunCreated is the 201 answer of POST /v1/runs: the run, and for an agent
// run its grant, shown this once.
type RunCreated struct {
	Operation
	Grant string `json:"grant,omitempty"`
}

// ToolCall is the body of POST /v1/runs/{id}/steps.
type ToolCall struct {
	Tool  string          `json:"tool"`
	Input json.RawMessage `json:"input"`
}

// ToolAnswer is the 200 answer of a tool call: the step it became and the
// tool's result (one of the *Result types below, by tool).
type ToolAnswer struct {
	Step   RunStep         `json:"step"`
	Result json.RawMessage `json:"result"`
}

// ToolStep is what a tool-call step adds to RunStep (RunStep.Tool).
type ToolStep struct {
	Name string `json:"name"`
	// InputSHA256 is the digest of the call's input as sent.
	InputSHA256 string `json:"input_sha256"`
	// Input is a short account of the input for people: the path, the
	// pattern, the command's first line, the proposal (at most 200
	// characters; the run page shows it beside the tool's name).
	Input string `json:"input,omitempty"`
	// Summary is a short account of the result ("read 40 lines of
	// data/sales.csv", "3 matches in 2 files").
	Summary string   `json:"summary,omitempty"`
	Refusal *Refusal `json:"refusal,omitempty"`
	// Proposal is the proposal a ProposeChange made or an ApplyChange
	// applied.
	Proposal string `json:"proposal,omitempty"`
	// Read is the revision a file tool read.
	Read string `json:"read,omitempty"`
}

// Tool inputs (ToolCall.Input, decoded strictly: unknown fields are bad
// input).
type (
	ReadInput struct {
		Path string `json:"path"`
		// Offset is the first line (1-based; 0 is 1), Limit the number
		// of lines (0: 2,000).
		Offset int `json:"offset,omitempty"`
		Limit  int `json:"limit,omitempty"`
	}
	WriteInput struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	}
	EditInput struct {
		Path       string `json:"path"`
		OldString  string `json:"old_string"`
		NewString  string `json:"new_string"`
		ReplaceAll bool   `json:"replace_all,omitempty"`
	}
	GlobInput struct {
		Pattern string `json:"pattern"`
		Path    string `json:"path,omitempty"`
	}
	GrepInput struct {
		Pattern    string `json:"pattern"` // an RE2 regular expression
		Path       string `json:"path,omitempty"`
		Glob       string `json:"glob,omitempty"`
		IgnoreCase bool   `json:"ignore_case,omitempty"`
	}
	BashInput struct {
		Command string   `json:"command"`
		Timeout Duration `json:"timeout,omitempty"` // at most the agent's limits.timeout
	}
	ProposeChangeInput struct {
		Files []ProposedFile `json:"files,omitempty"`
		// Patch is a unified diff (git's format) against the workspace
		// head; either Files or Patch.
		Patch   string `json:"patch,omitempty"`
		Message string `json:"message,omitempty"`
	}
	ApplyChangeInput struct {
		Proposal string `json:"proposal"`
	}
)

// ProposedFile is one file of a proposal: its new content, or Delete.
type ProposedFile struct {
	Path    string `json:"path"`
	Content string `json:"content,omitempty"`
	Delete  bool   `json:"delete,omitempty"`
}

// Tool results (ToolAnswer.Result). Every result says what a model needs
// to go on; Error is set on a failed one (the step is StepFailed).
type (
	ReadResult struct {
		Path string `json:"path"`
		// Content is the lines asked for, each numbered as `cat -n`
		// does ("%6d\t%s\n").
		Content string `json:"content"`
		// Lines is the file's line count; Truncated is set when lines
		// after Offset+Limit were left out.
		Lines     int    `json:"lines"`
		Truncated bool   `json:"truncated,omitempty"`
		Revision  string `json:"revision"`
		Error     string `json:"error,omitempty"`
	}
	WriteResult struct {
		Path     string `json:"path"`
		Bytes    int64  `json:"bytes"`
		Revision string `json:"revision"`
		Error    string `json:"error,omitempty"`
	}
	EditResult struct {
		Path         string `json:"path"`
		Replacements int    `json:"replacements"`
		Revision     string `json:"revision"`
		Error        string `json:"error,omitempty"`
	}
	GlobResult struct {
		Paths     []string `json:"paths"` // sorted
		Truncated bool     `json:"truncated,omitempty"`
		Revision  string   `json:"revision"`
		Error     string   `json:"error,omitempty"`
	}
	GrepResult struct {
		Matches []GrepMatch `json:"matches"`
		// Count is every match, Files the files with one; Truncated is
		// set when Matches holds fewer than Count.
		Count     int    `json:"count"`
		Files     int    `json:"files"`
		Truncated bool   `json:"truncated,omitempty"`
		Revision  string `json:"revision"`
		Error     string `json:"error,omitempty"`
	}
	BashResult struct {
		// State is the step's state; ExitCode set once it exited. An
		// answer given before the step ended (?wait ran out) has no
		// ExitCode: read the step.
		State    string `json:"state"`
		ExitCode *int   `json:"exit_code,omitempty"`
		// Output is the step's output (stdout and stderr as the stream
		// interleaves them), its last 32 KiB; Truncated when it had more.
		Output    string `json:"output"`
		Truncated bool   `json:"truncated,omitempty"`
		Revision  string `json:"revision,omitempty"`
		Error     string `json:"error,omitempty"`
	}
	ProposeChangeResult struct {
		Proposal string `json:"proposal"`
		Base     string `json:"base"`
		// Diff is the proposal as a unified diff.
		Diff  string `json:"diff"`
		Error string `json:"error,omitempty"`
	}
	ApplyChangeResult struct {
		Proposal string `json:"proposal"`
		Revision string `json:"revision"`
		Error    string `json:"error,omitempty"`
	}
)

// GrepMatch is one matching line.
type GrepMatch struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

// Proposal states.
const (
	ProposalProposed = "proposed"
	ProposalApproved = "approved"
	ProposalApplied  = "applied"
	ProposalRejected = "rejected"
)

// Proposal is a change a ProposeChange recorded (GET
// /v1/runs/{id}/proposals/{proposal}): what it would change from Base, and
// what became of it.
type Proposal struct {
	ID    string `json:"id"` // prop-...
	Run   string `json:"run"`
	Step  string `json:"step"` // the ProposeChange step
	Base  string `json:"base"`
	State string `json:"state"`
	// SHA256 is the digest of the proposal's canonical content (its
	// files, sorted): an approval is for exactly this.
	SHA256  string         `json:"sha256"`
	Message string         `json:"message,omitempty"`
	Files   []ProposedFile `json:"files"`
	Diff    string         `json:"diff"`
	// Approval, once a person approved it: by whom, until when, and the
	// index of the one step that may apply it.
	ApprovedBy *Actor    `json:"approved_by,omitempty"`
	ApprovedAt time.Time `json:"approved_at,omitzero"`
	Expires    time.Time `json:"expires,omitzero"`
	ForStep    int       `json:"for_step,omitempty"`
	RejectedBy *Actor    `json:"rejected_by,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	// Applied is the revision it made, and AppliedBy the step.
	Applied   string `json:"applied,omitempty"`
	AppliedBy string `json:"applied_by,omitempty"`
}

// ApproveRequest is the body of POST /v1/runs/{id}/approve and
// POST /v1/runs/{id}/reject (Reason only for a reject).
type ApproveRequest struct {
	Proposal string `json:"proposal"`
	Reason   string `json:"reason,omitempty"`
}

// FinishRequest is the body of POST /v1/runs/{id}/finish: the caller says
// the run is over (succeeded unless Failed), with a reason.
type FinishRequest struct {
	Failed bool   `json:"failed,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Run event kinds (RunEvent.Kind).
const (
	RunEventCreated   = "run_created" // agent file read, grant issued
	RunEventToolCall  = "tool_call"   // a file tool answered (done or failed)
	RunEventScript    = "script"      // a Bash step submitted / ended
	RunEventRefusal   = "refusal"     // a call refused
	RunEventProposal  = "proposal"    // a ProposeChange recorded
	RunEventAwaiting  = "awaiting_approval"
	RunEventApproval  = "approval"  // a person approved
	RunEventRejection = "rejection" // a person rejected
	RunEventRevision  = "revision"  // a revision the run made
	RunEventEnded     = "run_ended"
)

// RunEvent is one entry of GET /v1/runs/{id}/events (paginated, oldest
// first): enough to reconstruct the run.
type RunEvent struct {
	Seq  int       `json:"seq"` // 1, 2, ... in the run
	Kind string    `json:"kind"`
	Time time.Time `json:"time"`
	// Step is the run step it belongs to (its id and index), when one.
	Step      string `json:"step,omitempty"`
	StepIndex *int   `json:"step_index,omitempty"`
	Tool      string `json:"tool,omitempty"`
	// InputSHA256 is the digest of the tool call's input.
	InputSHA256 string   `json:"input_sha256,omitempty"`
	Summary     string   `json:"summary,omitempty"`
	Refusal     *Refusal `json:"refusal,omitempty"`
	Proposal    string   `json:"proposal,omitempty"`
	By          *Actor   `json:"by,omitempty"` // an approval's or rejection's person
	// Revision is the revision made (kind revision, and a tool call that
	// wrote), Parent the one it was made from, Changes what changed, by
	// path with the new content's digest: a revision event replays
	// without the tool that made it.
	Revision string        `json:"revision,omitempty"`
	Parent   string        `json:"parent,omitempty"`
	Changes  []EventChange `json:"changes,omitempty"`
	// State is a run_ended event's run state, or a script event's step
	// state; ExitCode a script's.
	State    string `json:"state,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
}

// EventChange is one path a revision changed: its new entry (type, digest,
// mode, link target), or Deleted.
type EventChange struct {
	Path    string `json:"path"`
	Type    string `json:"type,omitempty"` // file, symlink
	SHA256  string `json:"sha256,omitempty"`
	Size    int64  `json:"size,omitempty"`
	Mode    uint32 `json:"mode,omitempty"`
	Target  string `json:"target,omitempty"`
	Deleted bool   `json:"deleted,omitempty"`
}
