package cluster

import "time"

// Member is the replicated record of one scheduler member's addresses.
// Raft's own configuration holds the Raft address; this record adds the
// HTTP address that followers forward writes to.
type Member struct {
	ID          string `json:"id"`
	RaftAddress string `json:"raft_address"`
	HTTPAddress string `json:"http_address"`
	// Version is the member's software version as it last recorded it
	// (BatchVersion and up); 0 for a member older than the field.
	Version     uint32 `json:"version,omitzero"`
	ModifyIndex uint64 `json:"modify_index"`
}

// SetMember creates or replaces a member's record: the leader logs it for
// itself when it takes office and for a member that joins.
type SetMember struct {
	ID          string `json:"id"`
	RaftAddress string `json:"raft_address"`
	HTTPAddress string `json:"http_address"`
	// Version is the member's software version (see BatchVersion); 0
	// from a member older than the field.
	Version uint32    `json:"version,omitzero"`
	At      time.Time `json:"at"`
}

// RemoveMember deletes a member's record after it left the Raft
// configuration. Removing an unknown member is a no-op.
type RemoveMember struct {
	ID string    `json:"id"`
	At time.Time `json:"at"`
}

// Restore replaces every node and step with those of a snapshot document
// (an operator's `schedctl snapshot restore`). Member records are left as
// they are: they describe the running cluster, not the restored state.
// Nodes that are not down are given until At plus their TTL to report, as
// if they had just heartbeated.
type Restore struct {
	Nodes []Node    `json:"nodes"`
	Steps []Step    `json:"steps"`
	At    time.Time `json:"at"`
}

// CommandType implements Command.
func (SetMember) CommandType() CommandType { return CmdSetMember }

// CommandType implements Command.
func (RemoveMember) CommandType() CommandType { return CmdRemoveMember }

// CommandType implements Command.
func (Restore) CommandType() CommandType { return CmdRestore }
