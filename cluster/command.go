package cluster

import (
	"encoding/json"
	"fmt"
)

// CommandType is the first byte of a Raft log entry; the rest is the
// command as JSON. Types are appended, never renumbered or reused.
type CommandType uint8

// Command types, every one of them (this is the one list of log entry
// numbers; internal/archtest checks no other file declares one). A type with IgnorableFlag set may be skipped by a member
// that does not know it; any other unknown type stops the member, since
// skipping it would make its state diverge.
const (
	CmdRegisterNode  CommandType = 1
	CmdHeartbeat     CommandType = 2
	CmdSetNodeState  CommandType = 3
	CmdSubmitStep    CommandType = 4
	CmdPlaceStep     CommandType = 5
	CmdStepPhase     CommandType = 6
	CmdStepExit      CommandType = 7
	CmdRequestCancel CommandType = 8
	CmdConfirmCancel CommandType = 9
	CmdMarkNodeLost  CommandType = 10
	CmdExpire        CommandType = 11
	CmdStepEvents    CommandType = 12
	CmdSetMember     CommandType = 13
	CmdRemoveMember  CommandType = 14
	CmdRestore       CommandType = 15
	// 16-18 and 24 are the record store and the audit log, whose
	// commands only the scheduler reads or writes
	// (scheduler/command_record.go).
	CmdRecordPut    CommandType = 16
	CmdRecordDelete CommandType = 17
	CmdAuditAppend  CommandType = 18
	CmdSetGateway   CommandType = 19
	// 20-23 are the scheduler's placement outcomes and retention
	// (placement.go).
	CmdStepUnplaceable CommandType = 20
	CmdStepsWaiting    CommandType = 21
	CmdStartTimeout    CommandType = 22
	CmdCompactSteps    CommandType = 23
	CmdAuditDrop       CommandType = 24
	// 25 adds a workspace revision (workspace.go).
	CmdCommitRevision CommandType = 25
	// 26 carries many of the other commands in one entry
	// (command_batch.go). 27 drops one tenant's old audit entries (the
	// scheduler's, as 24). 28 is a batch of the same commands in
	// MessagePack instead of JSON (command_binary.go).
	CmdBatch           CommandType = 26
	CmdAuditDropTenant CommandType = 27
	CmdBinaryBatch     CommandType = 28

	IgnorableFlag CommandType = 0x80
)

var commandNames = map[CommandType]string{
	CmdRegisterNode:  "register_node",
	CmdHeartbeat:     "heartbeat",
	CmdSetNodeState:  "set_node_state",
	CmdSubmitStep:    "submit_step",
	CmdPlaceStep:     "place_step",
	CmdStepPhase:     "step_phase",
	CmdStepExit:      "step_exit",
	CmdRequestCancel: "request_cancel",
	CmdConfirmCancel: "confirm_cancel",
	CmdMarkNodeLost:  "mark_node_lost",
	CmdExpire:        "expire",
	CmdStepEvents:    "step_events",
	CmdSetMember:     "set_member",
	CmdRemoveMember:  "remove_member",
	CmdRestore:       "restore",
	CmdRecordPut:     "record_put",
	CmdRecordDelete:  "record_delete",
	CmdAuditAppend:   "audit_append",
	CmdSetGateway:    "set_gateway",

	CmdStepUnplaceable: "step_unplaceable",
	CmdStepsWaiting:    "steps_waiting",
	CmdStartTimeout:    "start_timeout",
	CmdCompactSteps:    "compact_steps",
	CmdAuditDrop:       "audit_drop",
	CmdCommitRevision:  "commit_revision",
	CmdBatch:           "batch",
	CmdAuditDropTenant: "audit_drop_tenant",
	CmdBinaryBatch:     "binary_batch",
}

func (t CommandType) String() string {
	if s, ok := commandNames[t]; ok {
		return s
	}
	return fmt.Sprintf("command_%d", uint8(t))
}

// Ignorable reports whether a member that does not know t may skip it.
func (t CommandType) Ignorable() bool { return t&IgnorableFlag != 0 }

// Command is one change to the replicated state. Every time and ID in a
// command is chosen by the leader before it is logged, so that applying it
// is deterministic on every member.
type Command interface {
	CommandType() CommandType
}

// Encode returns the log entry of c: its type byte, then c as JSON.
func Encode(c Command) ([]byte, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", c.CommandType(), err)
	}
	return append([]byte{byte(c.CommandType())}, b...), nil
}
