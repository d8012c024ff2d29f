package scheduler

import (
	"context"

	"github.com/rodon-compute/rodon/cluster"
)

// batchesAllowed reports whether every member of the Raft configuration
// has recorded a version that knows CmdBatch (cluster.BatchVersion): a
// member that does not would stop at the first batch.
func (s *Server) batchesAllowed(ctx context.Context) bool {
	ids, err := s.raft.configuration(ctx)
	if err != nil || len(ids) == 0 {
		return false
	}
	st := s.fsm.State()
	for _, id := range ids {
		if m, ok := st.Member(id); !ok || m.Version < cluster.BatchVersion {
			return false
		}
	}
	return true
}
