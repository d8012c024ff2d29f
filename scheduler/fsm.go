package scheduler

import (
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/hashicorp/raft"

	"github.com/rodon-compute/rodon/cluster"
)

// FSM is the Raft state machine of the scheduler. Raft calls Apply,
// Snapshot and Restore from one goroutine; State may be read from any.
//
// Apply is deterministic: it reads nothing but the entry and the state (no
// clock, randomness, I/O or local configuration), so every member that
// applies the same entries holds the same state.
type FSM struct {
	st     *State
	logger *slog.Logger
}

var _ raft.FSM = (*FSM)(nil)

// NewFSM returns an FSM with an empty state.
func NewFSM(logger *slog.Logger) *FSM {
	return &FSM{st: newState(), logger: logger.With("component", "fsm")}
}

// State returns the state the FSM applies entries to.
func (f *FSM) State() *State { return f.st }

// Apply applies one log entry, [type byte][JSON command], and returns nil,
// a result (*cluster.HeartbeatResult, *Record, *AuditEntry, *CompactResult,
// *AuditDropResult, *cluster.Revision, *ExitResult) or a business
// error (an error value: the command was logged but changed nothing). An
// unknown type without cluster.IgnorableFlag, or a payload that does not
// decode, panics: the log is corrupt or this member is older than the
// leader, and applying further would diverge.
func (f *FSM) Apply(l *raft.Log) any {
	if len(l.Data) == 0 {
		panic(fmt.Sprintf("fsm: empty log entry at index %d", l.Index))
	}
	st := f.st
	st.mu.Lock()
	defer st.mu.Unlock()
	defer st.advance(l.Index)

	idx := l.Index
	switch t := cluster.CommandType(l.Data[0]); t {
	case cluster.CmdRegisterNode:
		return st.applyRegisterNode(idx, decode[cluster.RegisterNode](l))
	case cluster.CmdHeartbeat:
		return st.applyHeartbeat(idx, decode[cluster.Heartbeat](l))
	case cluster.CmdSetNodeState:
		return st.applySetNodeState(idx, decode[cluster.SetNodeState](l))
	case cluster.CmdSubmitStep:
		return st.applySubmitStep(idx, decode[cluster.SubmitStep](l))
	case cluster.CmdPlaceStep:
		return st.applyPlaceStep(idx, decode[cluster.PlaceStep](l))
	case cluster.CmdStepPhase:
		return st.applyStepPhase(idx, decode[cluster.StepPhase](l))
	case cluster.CmdStepExit:
		return st.applyStepExit(idx, decode[cluster.StepExit](l))
	case cluster.CmdRequestCancel:
		return st.applyRequestCancel(idx, decode[cluster.RequestCancel](l))
	case cluster.CmdConfirmCancel:
		return st.applyConfirmCancel(idx, decode[cluster.ConfirmCancel](l))
	case cluster.CmdMarkNodeLost:
		return st.applyMarkNodeLost(idx, decode[cluster.MarkNodeLost](l))
	case cluster.CmdExpire:
		return st.applyExpire(idx, decode[cluster.Expire](l))
	case cluster.CmdStepEvents:
		return st.applyStepEvents(idx, decode[cluster.StepEvents](l))
	case cluster.CmdSetMember:
		return st.applySetMember(idx, decode[cluster.SetMember](l))
	case cluster.CmdRemoveMember:
		return st.applyRemoveMember(idx, decode[cluster.RemoveMember](l))
	case cluster.CmdRestore:
		return st.applyRestore(idx, decode[cluster.Restore](l))
	case cluster.CmdSetGateway:
		return st.applySetGateway(idx, decode[cluster.SetGateway](l))
	case cluster.CmdStepUnplaceable:
		return st.applyStepUnplaceable(idx, decode[cluster.StepUnplaceable](l))
	case cluster.CmdStepsWaiting:
		return st.applyStepsWaiting(idx, decode[cluster.StepsWaiting](l))
	case cluster.CmdStartTimeout:
		return st.applyStartTimeout(idx, decode[cluster.StartTimeout](l))
	case cluster.CmdCompactSteps:
		return st.applyCompactSteps(idx, decode[cluster.CompactSteps](l))
	case cluster.CmdRecordPut:
		return st.applyRecordPut(idx, decode[RecordPut](l))
	case cluster.CmdRecordDelete:
		return st.applyRecordDelete(idx, decode[RecordDelete](l))
	case cluster.CmdAuditAppend:
		return st.applyAuditAppend(idx, decode[AuditAppend](l))
	case cluster.CmdAuditDrop:
		return st.applyAuditDrop(idx, decode[AuditDrop](l))
	case cluster.CmdAuditDropTenant:
		return st.applyAuditDropTenant(idx, decode[AuditDropTenant](l))
	case cluster.CmdCommitRevision:
		return st.applyCommitRevision(idx, decode[cluster.CommitRevision](l))
	default:
		if t.Ignorable() {
			f.logger.Warn("skipping unknown ignorable log entry", "type", uint8(t), "index", idx)
			return nil
		}
		panic(fmt.Sprintf("fsm: unknown log entry type %d at index %d: is this member older than the leader?", uint8(t), idx))
	}
}

// decode decodes the command of l; a failure means a corrupt log.
func decode[T any](l *raft.Log) *T {
	c := new(T)
	if err := json.Unmarshal(l.Data[1:], c); err != nil {
		panic(fmt.Sprintf("fsm: decode %s at index %d: %v", cluster.CommandType(l.Data[0]), l.Index, err))
	}
	return c
}
