package api

// Member is one server of the scheduler's Raft cluster
// (`schedctl members -o json`).
type Member struct {
	ID string `json:"id"`
	// Address is the member's Raft address; HTTPAddress its API's.
	Address     string `json:"address"`
	HTTPAddress string `json:"http_address,omitempty"`
	Leader      bool   `json:"leader"`
	Voter       bool   `json:"voter"`
	// LastIndex is the last log index the member applied, as it answered
	// when asked; zero with Error set when it could not be asked.
	LastIndex uint64 `json:"last_index"`
	Error     string `json:"error,omitempty"`
}

// JoinRequest is the body of POST /v1/members/join: a new member asks the
// leader to add it as a voter.
type JoinRequest struct {
	ID          string `json:"id"`
	RaftAddress string `json:"raft_address"`
	HTTPAddress string `json:"http_address"`
	// Version is the joining member's software version; absent (0) from
	// a member older than the field.
	Version uint32 `json:"version,omitzero"`
}

// RemoveMemberRequest is the body of POST /v1/members/remove.
type RemoveMemberRequest struct {
	ID string `json:"id"`
}

// Health is the answer of a scheduler member's GET /healthz.
type Health struct {
	// Status is "ok" when the member has a leader (itself or another),
	// else "no_leader".
	Status string `json:"status"`
	ID     string `json:"id"`
	// RaftState is leader, follower, candidate or shutdown.
	RaftState string `json:"raft_state"`
	Leader    string `json:"leader,omitempty"`
	// CommitIndex is the last Raft index the member knows to be
	// committed; AppliedIndex the last it applied.
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	// StateIndex is the index of the last entry applied to its state.
	StateIndex uint64 `json:"state_index"`
}
