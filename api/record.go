package api

import (
	"encoding/json"
	"time"
)

// Record is one entry of the scheduler's replicated record store, which
// holds the gateway's state (accounts, members, API keys, sessions, runs)
// so that the gateway itself stays stateless. A record is addressed by
// Kind and ID and changed only by compare-and-set on Version.
type Record struct {
	// Kind names the collection: 1-32 of a-z0-9_-. "audit" is reserved
	// for the append-only audit log and cannot be put or deleted.
	Kind string `json:"kind"`
	// ID is 1-200 bytes of printable ASCII without "/".
	ID string `json:"id"`
	// Version is 1 for a new record and grows by one on every put. A put
	// names the version it replaces: 0 creates (conflict if it exists).
	Version uint64 `json:"version"`
	// Value is the record's JSON document, at most 256 KiB.
	Value json.RawMessage `json:"value"`
	// ModifyIndex is the scheduler's state index of the last change.
	ModifyIndex uint64 `json:"modify_index,omitempty"`
}

// AuditEntry is one append-only record of the audit log. The scheduler
// assigns Seq (1, 2, ...) and Time when the entry is committed; nothing
// can change or remove an entry afterwards.
type AuditEntry struct {
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Entry is the gateway's audit document (who, role, credential,
	// what, result), at most 64 KiB.
	Entry json.RawMessage `json:"entry"`
}

// PutRecordRequest is the body of PUT /v1/records/{kind}/{id}.
type PutRecordRequest struct {
	// Version is the version the put replaces: 0 creates the record
	// (conflict if it exists), N replaces version N (conflict otherwise).
	Version uint64 `json:"version"`
	// Value is the record's new JSON document, at most 256 KiB.
	Value json.RawMessage `json:"value"`
}

// AppendAuditRequest is the body of POST /v1/audit.
type AppendAuditRequest struct {
	// Entry is a JSON object of at most 64 KiB.
	Entry json.RawMessage `json:"entry"`
}

// DropAuditRequest is the body of POST /v1/audit/drop: drop the audit
// entries numbered below Before (after exporting them); By says who asked
// (the gateway fills it), and is recorded in the entry the drop appends.
type DropAuditRequest struct {
	Before uint64          `json:"before"`
	By     json.RawMessage `json:"by,omitempty"`
}

// DropAuditAnswer is the answer of POST /v1/audit/drop: how many entries
// were dropped, and the entry that records the drop.
type DropAuditAnswer struct {
	Dropped uint64     `json:"dropped"`
	Entry   AuditEntry `json:"entry"`
}
