package cluster

import (
	"fmt"
	"sync"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// A CmdBinaryBatch entry is a Batch whose envelope and items are
// MessagePack (hashicorp/go-msgpack, the codec hashicorp/raft uses for its
// own RPCs) instead of JSON: decoding an item costs about half of
// encoding/json's, on every member, for every item of the log.
//
// The entry is one MessagePack array, [type, item, type, item, ...]: each
// type a positive integer (a batchable CommandType), each item the
// command as a MessagePack map keyed by the names of its JSON tags, so
// that, as with JSON, a field added later is ignored by a member that
// does not know it and a field missing decodes as its zero value. Times
// are MessagePack timestamps (nanoseconds kept). The leader logs it only
// when every member has recorded at least BinaryBatchVersion; CmdBatch
// entries, and every other entry, stay JSON, and old entries decode as
// they always did.

// binaryHandle is the MessagePack configuration of CmdBinaryBatch. It is
// part of the log format: a change that alters the bytes of any command
// needs a new entry type.
var binaryHandle = func() *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{}
	// Strings are MessagePack str, []byte bin (the 2013 spec).
	h.WriteExt = true
	// A corrupt length cannot make the decoder allocate more than this
	// up front; a real collection still grows to its length.
	h.MaxInitLen = 1024
	// Decoding into a Raw keeps an item's bytes for its own decoder.
	h.Raw = true
	// Map keys in order, so that the same command is the same bytes.
	h.Canonical = true
	return h
}()

var (
	binaryEncoders = sync.Pool{New: func() any { return codec.NewEncoderBytes(nil, binaryHandle) }}
	binaryDecoders = sync.Pool{New: func() any { return codec.NewDecoderBytes(nil, binaryHandle) }}
)

// NewBinaryItem encodes c as an item of a CmdBinaryBatch entry; its Data
// is MessagePack.
func NewBinaryItem(c Command) (BatchItem, error) {
	t := c.CommandType()
	if !Batchable(t) {
		return BatchItem{}, fmt.Errorf("batch: %s cannot be an item of a batch", t)
	}
	var data []byte
	enc := binaryEncoders.Get().(*codec.Encoder)
	defer binaryEncoders.Put(enc)
	enc.ResetBytes(&data)
	if err := enc.Encode(c); err != nil {
		return BatchItem{}, fmt.Errorf("encode %s: %w", t, err)
	}
	return BatchItem{Type: t, Data: data}, nil
}

// EncodeBinaryBatch returns the log entry of a CmdBinaryBatch of items
// made by NewBinaryItem: its type byte, then the MessagePack array of
// each item's type and data.
func EncodeBinaryBatch(items []BatchItem) []byte {
	n := 8
	for _, it := range items {
		n += len(it.Data) + 2
	}
	// The encoder writes from the start of its buffer.
	b := make([]byte, n)
	enc := binaryEncoders.Get().(*codec.Encoder)
	defer binaryEncoders.Put(enc)
	enc.ResetBytes(&b)
	// The envelope as a flat array, each item's bytes as they are
	// (codec.Raw is written without a copy or a check).
	flat := make([]any, 0, 2*len(items))
	for _, it := range items {
		flat = append(flat, uint8(it.Type), codec.Raw(it.Data))
	}
	if err := enc.Encode(flat); err != nil {
		// Only a writer's error could fail it, and a byte slice has none.
		panic(fmt.Sprintf("encode %s: %v", CmdBinaryBatch, err))
	}
	return append([]byte{byte(CmdBinaryBatch)}, b...)
}

// DecodeBinaryBatch decodes the payload of a CmdBinaryBatch entry
// (without its type byte) into its items, each Data the MessagePack of
// one command for DecodeBinary. An envelope that is not an array of
// pairs of a type and a value is an error; each item is checked when it
// is decoded.
func DecodeBinaryBatch(data []byte) (Batch, error) {
	var flat []codec.Raw
	if err := decodeBinary(data, &flat); err != nil {
		return Batch{}, fmt.Errorf("decode %s: %w", CmdBinaryBatch, err)
	}
	if len(flat)%2 != 0 {
		return Batch{}, fmt.Errorf("decode %s: %d values, want a type and an item each", CmdBinaryBatch, len(flat))
	}
	b := Batch{Items: make([]BatchItem, len(flat)/2)}
	for i := range b.Items {
		// A positive fixint: one byte, 0x00-0x7f (batchable types are
		// under 128).
		t := flat[2*i]
		if len(t) != 1 || t[0] > 0x7f {
			return Batch{}, fmt.Errorf("decode %s: item %d: type %x is not a small positive integer", CmdBinaryBatch, i, []byte(t))
		}
		b.Items[i] = BatchItem{Type: CommandType(t[0]), Data: []byte(flat[2*i+1])}
	}
	return b, nil
}

// DecodeBinary decodes the MessagePack of one item of a CmdBinaryBatch
// into v, a pointer to the command of the item's type. Trailing bytes
// after the value are an error.
func DecodeBinary(data []byte, v any) error {
	return decodeBinary(data, v)
}

func decodeBinary(data []byte, v any) error {
	dec := binaryDecoders.Get().(*codec.Decoder)
	dec.ResetBytes(data)
	if err := dec.Decode(v); err != nil {
		// A decoder that failed is dropped: its state after an error is
		// not to be trusted.
		return err
	}
	defer binaryDecoders.Put(dec)
	if n := dec.NumBytesRead(); n != len(data) {
		return fmt.Errorf("%d bytes after the value", len(data)-n)
	}
	return nil
}
