package scheduler

import (
	"context"

	"github.com/rodon-compute/rodon/cluster"
)

// batchFormat is how the leader logs batchable commands: what every
// member of the configuration can apply.
type batchFormat uint8

const (
	// batchNone: an entry per command (a member older than batches).
	batchNone batchFormat = iota
	// batchJSON: CmdBatch entries, items in JSON.
	batchJSON
	// batchBinary: CmdBinaryBatch entries, items in MessagePack.
	batchBinary
)

// batchFormat returns the format of batches every member of the Raft
// configuration knows, by the version each recorded
// (cluster.BatchVersion, cluster.BinaryBatchVersion): a member that does
// not know an entry type would stop at the first entry of it.
func (s *Server) batchFormat(ctx context.Context) batchFormat {
	ids, err := s.raft.configuration(ctx)
	if err != nil || len(ids) == 0 {
		return batchNone
	}
	st := s.fsm.State()
	f := batchBinary
	for _, id := range ids {
		m, ok := st.Member(id)
		switch {
		case !ok || m.Version < cluster.BatchVersion:
			return batchNone
		case m.Version < cluster.BinaryBatchVersion:
			f = batchJSON
		}
	}
	return f
}

// batchesAllowed reports whether every member of the Raft configuration
// knows CmdBatch.
func (s *Server) batchesAllowed(ctx context.Context) bool {
	return s.batchFormat(ctx) != batchNone
}

// newBatchItem encodes cmd as an item of a batch of format f (JSON for
// batchNone, whose entries are JSON too).
func newBatchItem(f batchFormat, cmd cluster.Command) (cluster.BatchItem, error) {
	if f == batchBinary {
		return cluster.NewBinaryItem(cmd)
	}
	return cluster.NewBatchItem(cmd)
}

// encodeBatch returns the log entry of items encoded by newBatchItem
// with format f, which is not batchNone, and the entry's type.
func encodeBatch(f batchFormat, items []cluster.BatchItem) (cluster.CommandType, []byte) {
	if f == batchBinary {
		return cluster.CmdBinaryBatch, cluster.EncodeBinaryBatch(items)
	}
	return cluster.CmdBatch, cluster.EncodeBatch(items)
}
