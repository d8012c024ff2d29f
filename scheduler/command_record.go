package scheduler

import (
	"encoding/json"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

// RecordPut creates or replaces the record Kind/ID by compare-and-set:
// Version 0 creates it and fails with ErrExists if it exists; Version N
// replaces version N and fails with ErrVersionMismatch otherwise (also
// when the record does not exist). The stored record gets version N+1.
type RecordPut struct {
	Kind    string          `json:"kind"`
	ID      string          `json:"id"`
	Version uint64          `json:"version"`
	Value   json.RawMessage `json:"value"`
	At      time.Time       `json:"at"`
}

// RecordDelete deletes version Version of the record Kind/ID: ErrNotFound
// if there is none, ErrVersionMismatch if its version is another.
type RecordDelete struct {
	Kind    string    `json:"kind"`
	ID      string    `json:"id"`
	Version uint64    `json:"version"`
	At      time.Time `json:"at"`
}

// AuditAppend appends Entry to the audit log with the leader's time At;
// the FSM numbers it (the last sequence number plus one).
// Tenant, Who and Action are the entry's typed fields (AuditEntry).
type AuditAppend struct {
	Entry  json.RawMessage `json:"entry"`
	Tenant string          `json:"tenant,omitempty"`
	Who    string          `json:"who,omitempty"`
	Action string          `json:"action,omitempty"`
	At     time.Time       `json:"at"`
}

// AuditDrop drops the audit entries numbered below Before (the retention
// of the audit log: an owner exported them first) and appends, with the
// next number, an entry saying so: {"action": "audit.drop", "before",
// "dropped", "by"}, where By (a JSON value the gateway fills) says who
// asked. Entries are never changed otherwise. It drops every tenant's
// entries (the operator's retention); AuditDropTenant drops one tenant's.
// Who is the typed who of the entry it appends.
type AuditDrop struct {
	Before uint64          `json:"before"`
	By     json.RawMessage `json:"by,omitempty"`
	Who    string          `json:"who,omitempty"`
	At     time.Time       `json:"at"`
}

// AuditDropTenant is AuditDrop for the entries of one tenant: it drops
// Tenant's entries numbered below Before, leaves every other tenant's,
// and appends the entry saying so as an entry of Tenant ("" is the
// entries without a tenant).
type AuditDropTenant struct {
	Tenant string          `json:"tenant"`
	Before uint64          `json:"before"`
	By     json.RawMessage `json:"by,omitempty"`
	Who    string          `json:"who,omitempty"`
	At     time.Time       `json:"at"`
}

// CommandType implements cluster.Command.
func (AuditDropTenant) CommandType() cluster.CommandType { return cluster.CmdAuditDropTenant }

// CommandType implements cluster.Command.
func (AuditDrop) CommandType() cluster.CommandType { return cluster.CmdAuditDrop }

// CommandType implements cluster.Command.
func (RecordPut) CommandType() cluster.CommandType { return cluster.CmdRecordPut }

// CommandType implements cluster.Command.
func (RecordDelete) CommandType() cluster.CommandType { return cluster.CmdRecordDelete }

// CommandType implements cluster.Command.
func (AuditAppend) CommandType() cluster.CommandType { return cluster.CmdAuditAppend }
