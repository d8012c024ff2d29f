package cluster

import "time"

// SubmitStep queues a new step. With Unplaceable (the leader found that
// no node could ever take it) the step is recorded failed at once, with
// that cause and Reason.
type SubmitStep struct {
	Step        StepID       `json:"step"`
	Spec        StepSpec     `json:"spec"`
	Unplaceable *Unplaceable `json:"unplaceable,omitempty"`
	Reason      string       `json:"reason,omitempty"`
	At          time.Time    `json:"at"`
}

// PlaceStep assigns a queued step to a node chosen by the leader's
// placement; the step's resources are reserved on the node from then on.
type PlaceStep struct {
	Step StepID    `json:"step"`
	Node NodeID    `json:"node"`
	At   time.Time `json:"at"`
}

// StepPhase is an agent's report of progress on an attempt: State moves
// the step forward (StateStarting or StateRunning; empty to leave it), and
// the non-zero times of Phases are recorded if not recorded yet (cleaned_up
// may come after the exit).
type StepPhase struct {
	Step    StepID    `json:"step"`
	Node    NodeID    `json:"node"`
	Attempt int       `json:"attempt"`
	State   StepState `json:"state,omitempty"`
	Phases  Phases    `json:"phases"`
	At      time.Time `json:"at"`
}

// StepExit is an agent's report that the runtime confirmed the end of an
// attempt. It ends a placed, starting or running step; for an attempt
// already lost or re-placed it is only recorded as an event.
type StepExit struct {
	Node    NodeID     `json:"node"`
	Attempt int        `json:"attempt"`
	Record  ExitRecord `json:"record"`
	At      time.Time  `json:"at"`
	// Commit, set by the leader, is the revision the step's workspace
	// result makes, committed with the exit in one entry (it applies only
	// if the head is still Commit.ExpectHead; see CommitRevision).
	Commit *CommitRevision `json:"commit,omitempty"`
}

// StepEvents appends lifecycle events an agent observed (an OOM kill,
// denied packets) to an attempt.
type StepEvents struct {
	Step    StepID  `json:"step"`
	Node    NodeID  `json:"node"`
	Attempt int     `json:"attempt"`
	Events  []Event `json:"events"`
}

// RequestCancel is a user's request to cancel a step. A queued step is
// cancelled at once (nothing ran); a placed, starting or running one is
// cancelled when its agent reports the exit; a lost one's cancel is
// unverified.
type RequestCancel struct {
	Step   StepID    `json:"step"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// ConfirmCancel is an agent's report that the process of a cancelled
// attempt is gone. It is accepted only after the attempt's exit was
// recorded.
type ConfirmCancel struct {
	Step    StepID    `json:"step"`
	Node    NodeID    `json:"node"`
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
}

// Expire ends a step that waited in the queue past its deadline.
type Expire struct {
	Step   StepID    `json:"step"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// CommandType implements Command.
func (SubmitStep) CommandType() CommandType { return CmdSubmitStep }

// CommandType implements Command.
func (PlaceStep) CommandType() CommandType { return CmdPlaceStep }

// CommandType implements Command.
func (StepPhase) CommandType() CommandType { return CmdStepPhase }

// CommandType implements Command.
func (StepExit) CommandType() CommandType { return CmdStepExit }

// CommandType implements Command.
func (StepEvents) CommandType() CommandType { return CmdStepEvents }

// CommandType implements Command.
func (RequestCancel) CommandType() CommandType { return CmdRequestCancel }

// CommandType implements Command.
func (ConfirmCancel) CommandType() CommandType { return CmdConfirmCancel }

// CommandType implements Command.
func (Expire) CommandType() CommandType { return CmdExpire }
