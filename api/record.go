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
	// Tenant, Who and Action are what the entry was appended with (see
	// AppendAuditRequest): the typed fields GET /v1/audit filters by.
	// Entries appended before tenants existed have no Tenant.
	Tenant string `json:"tenant,omitempty"`
	Who    string `json:"who,omitempty"`
	Action string `json:"action,omitempty"`
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
	// Tenant is the tenant the entry belongs to ("" for none: the
	// operator's); Who and Action say who did what. They are the fields
	// the log is filtered by (AuditFilter), each at most 200 bytes without
	// control characters; the scheduler never reads them out of Entry.
	Tenant string `json:"tenant,omitempty"`
	Who    string `json:"who,omitempty"`
	Action string `json:"action,omitempty"`
}

// AuditFilter selects entries of the scheduler's GET /v1/audit: those of
// one tenant (Tenant, "" being the entries without one, written before
// tenants or by the operator), or of every tenant if AllTenants (the
// operator's view); then, when set, those by Who, of Action, at or after
// Since and before Until, numbered above After.
type AuditFilter struct {
	AllTenants   bool
	Tenant       string
	Who, Action  string
	Since, Until time.Time
	After        uint64
}

// DropAuditRequest is the body of POST /v1/audit/drop: drop the audit
// entries numbered below Before (after exporting them); By says who asked
// (the gateway fills it), and is recorded in the entry the drop appends.
//
// With Tenant set (even to ""), only that tenant's entries are dropped,
// and the entry saying so is the tenant's; without, every tenant's are
// (the operator's retention). Who is the typed "who" of that entry.
type DropAuditRequest struct {
	Before uint64          `json:"before"`
	By     json.RawMessage `json:"by,omitempty"`
	Tenant *string         `json:"tenant,omitempty"`
	Who    string          `json:"who,omitempty"`
}

// DropAuditAnswer is the answer of POST /v1/audit/drop: how many entries
// were dropped, and the entry that records the drop.
type DropAuditAnswer struct {
	Dropped uint64     `json:"dropped"`
	Entry   AuditEntry `json:"entry"`
}
