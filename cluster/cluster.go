// Package cluster holds the types the scheduler replicates and exchanges
// with node agents: steps, their lifecycle, exit records and node health.
// The public JSON contract for browsers and the CLI lives in package api;
// conversion happens at the HTTP edge.
package cluster

import "time"

// StepID names a step, unique in the cluster.
type StepID string

// NodeID names a node agent.
type NodeID string

// StepState is where a step is in its lifecycle.
type StepState string

// Step states. Exited, Failed, Cancelled, Lost and Expired are terminal.
const (
	StateQueued    StepState = "queued"
	StatePlaced    StepState = "placed"
	StateStarting  StepState = "starting"
	StateRunning   StepState = "running"
	StateExited    StepState = "exited"
	StateFailed    StepState = "failed"
	StateCancelled StepState = "cancelled"
	StateLost      StepState = "lost"
	StateExpired   StepState = "expired"
)

// Terminal reports whether s is a final state.
func (s StepState) Terminal() bool {
	switch s {
	case StateExited, StateFailed, StateCancelled, StateLost, StateExpired:
		return true
	}
	return false
}

// TerminatedBy says what ended a step.
type TerminatedBy string

// Causes of a step's end.
const (
	ByExit     TerminatedBy = "exit"
	ByUser     TerminatedBy = "user"
	ByTimeout  TerminatedBy = "timeout"
	ByOOM      TerminatedBy = "oom"
	ByNodeLost TerminatedBy = "node_lost"
	ByPlatform TerminatedBy = "platform"
)

// Phases are the times a step passed each phase; zero when not (yet) passed.
type Phases struct {
	Queued      time.Time `json:"queued,omitzero"`
	Placed      time.Time `json:"placed,omitzero"`
	Created     time.Time `json:"created,omitzero"`
	Started     time.Time `json:"started,omitzero"`
	FirstOutput time.Time `json:"first_output,omitzero"`
	Exited      time.Time `json:"exited,omitzero"`
	CleanedUp   time.Time `json:"cleaned_up,omitzero"`
}
