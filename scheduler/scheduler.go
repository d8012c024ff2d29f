// Package scheduler is Rodon's scheduler: the Raft state machine that holds
// nodes and steps, and the record store and audit log that keep the
// gateway's state (FSM, State), the placement policy (Place), the Raft
// member that replicates the state (Raft), and the member daemon (Server:
// the HTTP API of docs/PROTOCOL.md, forwarding of writes to the leader, and
// the leader loops that place steps, declare silent nodes down, enforce
// drain deadlines and expire the queue).
//
// Members speak mutual TLS 1.3 with member certificates, over HTTP and the
// Raft transport, and authorize every request by the identity of its
// caller's certificate (authz.go, accessTable): an agent only for its own
// node, the gateway for records, audit and steps, operators for what
// schedctl offers. Without a certificate a member runs in plaintext mode,
// on loopback only, and checks nothing.
//
// Writes are cluster.Commands: the leader chooses every time and ID, encodes
// the command as a log entry and applies it through Raft.Apply; every member
// applies the same entries in the same order to its FSM. Reads go to a
// member's State, which is as fresh as that member's applied index.
package scheduler

import "errors"

// Business errors that applying a command can return. They come back from
// Raft.Apply wrapped with the step or node concerned; check them with
// errors.Is.
var (
	// ErrNotFound: no such node or step.
	ErrNotFound = errors.New("not found")
	// ErrExists: a step with that ID was already submitted.
	ErrExists = errors.New("already exists")
	// ErrInvalid: the command's content is unacceptable (bad spec,
	// negative resources, unknown state).
	ErrInvalid = errors.New("invalid")
	// ErrTerminal: the step already reached a terminal state.
	ErrTerminal = errors.New("step already terminal")
	// ErrTransition: the step's lifecycle does not allow the change now,
	// such as queued -> exited.
	ErrTransition = errors.New("illegal transition")
	// ErrStale: a report about an attempt or node that is not the step's
	// current one.
	ErrStale = errors.New("stale report")
	// ErrUnavailable: the node cannot take steps (not ready).
	ErrUnavailable = errors.New("node unavailable")
	// ErrVersionMismatch: a put or delete of a record named a version
	// other than the record's current one (compare-and-set failed).
	ErrVersionMismatch = errors.New("version mismatch: read the record again and retry")
	// ErrHeadMoved: a revision's commit expected a head the workspace no
	// longer has (compare-and-set failed); the leader computes it again.
	ErrHeadMoved = errors.New("the workspace's head moved")
)
