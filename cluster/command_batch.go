package cluster

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// BatchVersion is the member version from which a member applies
// CmdBatch entries. A member records its version in its SetMember; the
// leader logs a Batch only when every member of the configuration has
// recorded at least this version, since an older member stops at a type
// it does not know. A rolling upgrade therefore batches only once the
// last member runs the new version; upgrade the followers first.
const BatchVersion = 1

// MemberVersion is this build's member version, recorded in SetMember.
// Raise it when a new entry type needs the gate BatchVersion gives.
const MemberVersion = 1

// Batch is one log entry that carries many commands, applied in order,
// each with its own result, as if each were an entry of its own at the
// batch's index. Only batchable commands may be items (Batchable); a
// nested batch or any other type is a corrupt log.
type Batch struct {
	Items []BatchItem `json:"items"`
}

// BatchItem is one command of a Batch: its type and its JSON payload, as
// in a plain entry.
type BatchItem struct {
	Type CommandType     `json:"type"`
	Data json.RawMessage `json:"data"`
}

// CommandType implements Command.
func (Batch) CommandType() CommandType { return CmdBatch }

// batchable are the commands a Batch may carry: the high-rate step and
// node commands. Membership, restore, the record store and the audit log
// stay single entries.
var batchable = map[CommandType]bool{
	CmdSubmitStep: true, CmdPlaceStep: true, CmdStepPhase: true, CmdStepExit: true, CmdStepEvents: true,
	CmdRequestCancel: true, CmdConfirmCancel: true, CmdHeartbeat: true, CmdStepUnplaceable: true,
	CmdStepsWaiting: true, CmdStartTimeout: true, CmdExpire: true, CmdMarkNodeLost: true,
}

// Batchable reports whether a Batch may carry a command of type t.
func Batchable(t CommandType) bool { return batchable[t] }

// NewBatch returns the batch of cmds, in order. Every command must be
// batchable.
func NewBatch(cmds ...Command) (Batch, error) {
	b := Batch{Items: make([]BatchItem, 0, len(cmds))}
	for _, c := range cmds {
		item, err := NewBatchItem(c)
		if err != nil {
			return Batch{}, err
		}
		b.Items = append(b.Items, item)
	}
	return b, nil
}

// NewBatchItem encodes c as an item of a Batch.
func NewBatchItem(c Command) (BatchItem, error) {
	t := c.CommandType()
	if !Batchable(t) {
		return BatchItem{}, fmt.Errorf("batch: %s cannot be an item of a batch", t)
	}
	data, err := json.Marshal(c)
	if err != nil {
		return BatchItem{}, fmt.Errorf("encode %s: %w", t, err)
	}
	return BatchItem{Type: t, Data: data}, nil
}

// EncodeBatch returns the log entry of a Batch of items, as Encode would,
// without compacting each item's already encoded payload again.
func EncodeBatch(items []BatchItem) []byte {
	n := 16
	for _, it := range items {
		n += len(it.Data) + 24
	}
	b := make([]byte, 0, n)
	b = append(b, byte(CmdBatch))
	b = append(b, `{"items":[`...)
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"type":`...)
		b = strconv.AppendUint(b, uint64(it.Type), 10)
		b = append(b, `,"data":`...)
		b = append(b, it.Data...)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}
