package cluster

import (
	"bytes"
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

// BinaryBatchVersion is the member version from which a member applies
// CmdBinaryBatch entries, gated as BatchVersion gates CmdBatch.
const BinaryBatchVersion = 2

// MemberVersion is this build's member version, recorded in SetMember.
// Raise it when a new entry type needs the gate BatchVersion gives.
const MemberVersion = 2

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

// DecodeBatch decodes the payload of a CmdBatch entry (without its type
// byte), as json.Unmarshal into a Batch would, with the same result for
// every input. The form EncodeBatch writes is split in one pass without
// copying, so each item's Data is a slice of data, valid while data is;
// any other form goes through json.Unmarshal. Each item's Data is
// checked when it is decoded.
func DecodeBatch(data []byte) (Batch, error) {
	if b, ok := splitBatch(data); ok {
		return b, nil
	}
	var b Batch
	err := json.Unmarshal(data, &b)
	return b, err
}

// splitBatch splits data written by EncodeBatch: exactly
// {"items":[{"type":N,"data":{...}},...]} with no space, N a decimal
// type, each data an object. ok is false for anything else.
func splitBatch(data []byte) (b Batch, ok bool) {
	rest, ok := cutPrefix(data, `{"items":[`)
	if !ok {
		return Batch{}, false
	}
	b.Items = make([]BatchItem, 0, bytes.Count(rest, []byte(`{"type":`)))
	if r, ok := cutPrefix(rest, "]}"); ok {
		return b, len(r) == 0
	}
	for {
		if rest, ok = cutPrefix(rest, `{"type":`); !ok {
			return Batch{}, false
		}
		t, i := 0, 0
		for i < len(rest) && i < 4 && rest[i] >= '0' && rest[i] <= '9' {
			t = t*10 + int(rest[i]-'0')
			i++
		}
		if i == 0 || i > 3 || t > 255 || rest[0] == '0' && i > 1 {
			return Batch{}, false
		}
		if rest, ok = cutPrefix(rest[i:], `,"data":`); !ok {
			return Batch{}, false
		}
		end := objectEnd(rest)
		if end < 0 {
			return Batch{}, false
		}
		b.Items = append(b.Items, BatchItem{Type: CommandType(t), Data: rest[:end:end]})
		if rest, ok = cutPrefix(rest[end:], "}"); !ok {
			return Batch{}, false
		}
		r, more := cutPrefix(rest, ",")
		if !more {
			break
		}
		rest = r
	}
	rest, ok = cutPrefix(rest, "]}")
	return b, ok && len(rest) == 0
}

func cutPrefix(b []byte, prefix string) ([]byte, bool) {
	if len(b) < len(prefix) || string(b[:len(prefix)]) != prefix {
		return b, false
	}
	return b[len(prefix):], true
}

// objectEnd returns the length of the JSON object at the start of b, by
// its braces outside strings, or -1 if b does not start with one that
// ends. It does not check what is inside: the item's decoder does.
func objectEnd(b []byte) int {
	if len(b) == 0 || b[0] != '{' {
		return -1
	}
	depth, inString := 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString && c == '\\':
			i++
		case inString:
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}
