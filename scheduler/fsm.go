package scheduler

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"

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

	// entries counts the log entries applied by entry type, items the
	// commands applied by command type, each item of a batch counted by
	// its own type. Counters only: Apply never reads them.
	entries, items [256]atomic.Uint64
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
//
// A CmdBatch entry is applied item by item (applyBatch) and returns a
// *BatchResult.
func (f *FSM) Apply(l *raft.Log) any {
	if len(l.Data) == 0 {
		panic(fmt.Sprintf("fsm: empty log entry at index %d", l.Index))
	}
	st := f.st
	st.mu.Lock()
	defer st.mu.Unlock()
	defer st.advance(l.Index)

	t := cluster.CommandType(l.Data[0])
	f.entries[t].Add(1)
	switch t {
	case cluster.CmdBatch:
		return f.applyBatch(l.Index, l.Data[1:])
	case cluster.CmdBinaryBatch:
		return f.applyBinaryBatch(l.Index, l.Data[1:])
	}
	f.items[t].Add(1)
	return f.applyOne(l.Index, t, l.Data[1:], decodeEntryJSON)
}

// Applied returns how many log entries this member applied by entry type,
// and how many commands by command type (each item of a batch by its own
// type), since it started.
func (f *FSM) Applied() (entries, items map[cluster.CommandType]uint64) {
	entries, items = make(map[cluster.CommandType]uint64), make(map[cluster.CommandType]uint64)
	for t := range f.entries {
		if n := f.entries[t].Load(); n > 0 {
			entries[cluster.CommandType(t)] = n
		}
		if n := f.items[t].Load(); n > 0 {
			items[cluster.CommandType(t)] = n
		}
	}
	return entries, items
}

// applyBatch applies the items of a CmdBatch entry in order, each as
// applyOne would apply it as an entry of its own at index idx, and returns
// one result per item (*BatchResult). A business error in one item is that
// item's result and affects no other. A nested batch, or an item whose
// type may not be batched, panics: the log is corrupt.
func (f *FSM) applyBatch(idx uint64, data []byte) any {
	b, err := cluster.DecodeBatch(data)
	if err != nil {
		panic(fmt.Sprintf("fsm: decode %s at index %d: %v", cluster.CmdBatch, idx, err))
	}
	return f.applyItems(idx, b, decodeEntryJSON)
}

// applyBinaryBatch applies a CmdBinaryBatch entry as applyBatch applies a
// CmdBatch: the same items, each in MessagePack.
func (f *FSM) applyBinaryBatch(idx uint64, data []byte) any {
	b, err := cluster.DecodeBinaryBatch(data)
	if err != nil {
		panic(fmt.Sprintf("fsm: at index %d: %v", idx, err))
	}
	return f.applyItems(idx, b, cluster.DecodeBinary)
}

func (f *FSM) applyItems(idx uint64, b cluster.Batch, decode decodeFunc) any {
	res := &BatchResult{Results: make([]any, len(b.Items))}
	for i, item := range b.Items {
		if !cluster.Batchable(item.Type) {
			panic(fmt.Sprintf("fsm: batch at index %d: item %d is %s, which a batch cannot carry", idx, i, item.Type))
		}
		f.items[item.Type].Add(1)
		res.Results[i] = f.applyOne(idx, item.Type, item.Data, decode)
	}
	return res
}

// BatchResult is the result of a CmdBatch entry: the result of each item,
// in order (nil, a result, or a business error, as Apply's).
type BatchResult struct {
	Results []any
}

// applyOne applies one command of type t with payload data at index idx,
// decoded by decode (JSON, or MessagePack for the items of a
// CmdBinaryBatch); the caller holds st.mu.
func (f *FSM) applyOne(idx uint64, t cluster.CommandType, data []byte, decode decodeFunc) any {
	st := f.st
	switch t {
	case cluster.CmdRegisterNode:
		return st.applyRegisterNode(idx, decodeData[cluster.RegisterNode](idx, t, data, decode))
	case cluster.CmdHeartbeat:
		return st.applyHeartbeat(idx, decodeData[cluster.Heartbeat](idx, t, data, decode))
	case cluster.CmdSetNodeState:
		return st.applySetNodeState(idx, decodeData[cluster.SetNodeState](idx, t, data, decode))
	case cluster.CmdSubmitStep:
		return st.applySubmitStep(idx, decodeData[cluster.SubmitStep](idx, t, data, decode))
	case cluster.CmdPlaceStep:
		return st.applyPlaceStep(idx, decodeData[cluster.PlaceStep](idx, t, data, decode))
	case cluster.CmdStepPhase:
		return st.applyStepPhase(idx, decodeData[cluster.StepPhase](idx, t, data, decode))
	case cluster.CmdStepExit:
		return st.applyStepExit(idx, decodeData[cluster.StepExit](idx, t, data, decode))
	case cluster.CmdRequestCancel:
		return st.applyRequestCancel(idx, decodeData[cluster.RequestCancel](idx, t, data, decode))
	case cluster.CmdConfirmCancel:
		return st.applyConfirmCancel(idx, decodeData[cluster.ConfirmCancel](idx, t, data, decode))
	case cluster.CmdMarkNodeLost:
		return st.applyMarkNodeLost(idx, decodeData[cluster.MarkNodeLost](idx, t, data, decode))
	case cluster.CmdExpire:
		return st.applyExpire(idx, decodeData[cluster.Expire](idx, t, data, decode))
	case cluster.CmdStepEvents:
		return st.applyStepEvents(idx, decodeData[cluster.StepEvents](idx, t, data, decode))
	case cluster.CmdSetMember:
		return st.applySetMember(idx, decodeData[cluster.SetMember](idx, t, data, decode))
	case cluster.CmdRemoveMember:
		return st.applyRemoveMember(idx, decodeData[cluster.RemoveMember](idx, t, data, decode))
	case cluster.CmdRestore:
		return st.applyRestore(idx, decodeData[cluster.Restore](idx, t, data, decode))
	case cluster.CmdSetGateway:
		return st.applySetGateway(idx, decodeData[cluster.SetGateway](idx, t, data, decode))
	case cluster.CmdStepUnplaceable:
		return st.applyStepUnplaceable(idx, decodeData[cluster.StepUnplaceable](idx, t, data, decode))
	case cluster.CmdStepsWaiting:
		return st.applyStepsWaiting(idx, decodeData[cluster.StepsWaiting](idx, t, data, decode))
	case cluster.CmdStartTimeout:
		return st.applyStartTimeout(idx, decodeData[cluster.StartTimeout](idx, t, data, decode))
	case cluster.CmdCompactSteps:
		return st.applyCompactSteps(idx, decodeData[cluster.CompactSteps](idx, t, data, decode))
	case cluster.CmdRecordPut:
		return st.applyRecordPut(idx, decodeData[RecordPut](idx, t, data, decode))
	case cluster.CmdRecordDelete:
		return st.applyRecordDelete(idx, decodeData[RecordDelete](idx, t, data, decode))
	case cluster.CmdAuditAppend:
		return st.applyAuditAppend(idx, decodeData[AuditAppend](idx, t, data, decode))
	case cluster.CmdAuditDrop:
		return st.applyAuditDrop(idx, decodeData[AuditDrop](idx, t, data, decode))
	case cluster.CmdAuditDropTenant:
		return st.applyAuditDropTenant(idx, decodeData[AuditDropTenant](idx, t, data, decode))
	case cluster.CmdCommitRevision:
		return st.applyCommitRevision(idx, decodeData[cluster.CommitRevision](idx, t, data, decode))
	default:
		if t.Ignorable() {
			f.logger.Warn("skipping unknown ignorable log entry", "type", uint8(t), "index", idx)
			return nil
		}
		panic(fmt.Sprintf("fsm: unknown log entry type %d at index %d: is this member older than the leader?", uint8(t), idx))
	}
}

// decodeFunc decodes the payload of a command into v, a pointer to the
// command.
type decodeFunc func(data []byte, v any) error

// decodeEntryJSON is the decodeFunc of every entry but the items of a
// CmdBinaryBatch.
func decodeEntryJSON(data []byte, v any) error { return json.Unmarshal(data, v) }

// decodeData decodes the payload of a command of type t at index idx; a
// failure means a corrupt log.
func decodeData[T any](idx uint64, t cluster.CommandType, data []byte, decode decodeFunc) *T {
	c := new(T)
	if err := decode(data, c); err != nil {
		panic(fmt.Sprintf("fsm: decode %s at index %d: %v", t, idx, err))
	}
	return c
}
