package scheduler

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Record is the stored form of one record of the record store, which
// holds the gateway's state (api.Record is its public form). A record is
// changed only by compare-and-set on Version (RecordPut, RecordDelete).
type Record struct {
	Kind    string          `json:"kind"`
	ID      string          `json:"id"`
	Version uint64          `json:"version"`
	Value   json.RawMessage `json:"value"`
	// ModifyIndex is the index of the entry that last put the record.
	ModifyIndex uint64 `json:"modify_index"`
}

// clone returns a copy of r that shares no memory with it.
func (r *Record) clone() Record {
	c := *r
	c.Value = bytes.Clone(r.Value)
	return c
}

// AuditEntry is one entry of the append-only audit log (api.AuditEntry is
// its public form). Nothing changes an entry once appended; old ones are
// removed only by an audit drop, which appends an entry saying so.
type AuditEntry struct {
	// Seq numbers the entries 1, 2, ... in the order they were appended.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Tenant is the tenant the entry belongs to ("" for none: entries of
	// the operator, and those appended before tenants existed); Who and
	// Action say who did what. They are what listings filter by.
	Tenant string          `json:"tenant,omitempty"`
	Who    string          `json:"who,omitempty"`
	Action string          `json:"action,omitempty"`
	Entry  json.RawMessage `json:"entry"`
}

func (e *AuditEntry) clone() AuditEntry {
	c := *e
	c.Entry = bytes.Clone(e.Entry)
	return c
}

// Limits of the record store and the audit log.
const (
	// AuditKind is the kind reserved for the audit log: no record has it.
	AuditKind      = "audit"
	maxRecordID    = 200
	maxRecordValue = 256 << 10
	maxAuditEntry  = 64 << 10
)

var recordKindPattern = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)

// validateKind checks the kind of a record; the reserved kind "audit" is
// refused. Errors wrap ErrInvalid.
func validateKind(kind string) error {
	if !recordKindPattern.MatchString(kind) {
		return fmt.Errorf("record kind %q: want 1-32 characters of a-z, 0-9, '_' and '-': %w", kind, ErrInvalid)
	}
	if kind == AuditKind {
		return fmt.Errorf("record kind %q is reserved for the append-only audit log: use POST /v1/audit and GET /v1/audit: %w", kind, ErrInvalid)
	}
	return nil
}

// validateRecordID checks the id of a record: 1-200 bytes of printable
// ASCII without '/', and not "." or ".." (which no URL path can carry).
// Errors wrap ErrInvalid.
func validateRecordID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("record id: empty: want 1-%d bytes of printable ASCII without '/': %w", maxRecordID, ErrInvalid)
	case len(id) > maxRecordID:
		return fmt.Errorf("record id %.20q...: %d bytes, at most %d: %w", id, len(id), maxRecordID, ErrInvalid)
	case id == "." || id == "..":
		return fmt.Errorf("record id %q: not allowed, as no URL path can name it: %w", id, ErrInvalid)
	}
	for i := range len(id) {
		if c := id[i]; c < 0x20 || c > 0x7e || c == '/' {
			return fmt.Errorf("record id %q: byte %d is %q: want printable ASCII without '/': %w", id, i, c, ErrInvalid)
		}
	}
	return nil
}

// validateRecordValue checks the value of a put: a JSON document other
// than null, at most 256 KiB. The message does not name the field; errors
// wrap ErrInvalid.
func validateRecordValue(v json.RawMessage) error {
	switch {
	case len(bytes.TrimSpace(v)) == 0:
		return fmt.Errorf("missing: want the record's JSON document: %w", ErrInvalid)
	case len(v) > maxRecordValue:
		return fmt.Errorf("%d bytes, at most %d (256 KiB): %w", len(v), maxRecordValue, ErrInvalid)
	case !json.Valid(v):
		return fmt.Errorf("not valid JSON: %w", ErrInvalid)
	case string(bytes.TrimSpace(v)) == "null":
		return fmt.Errorf("null: want a JSON document; to remove the record, delete it: %w", ErrInvalid)
	}
	return nil
}

// validateAuditEntry checks an audit entry: a JSON object of at most 64
// KiB. The message does not name the field; errors wrap ErrInvalid.
func validateAuditEntry(e json.RawMessage) error {
	switch t := bytes.TrimSpace(e); {
	case len(t) == 0:
		return fmt.Errorf("missing: want the audit document, a JSON object: %w", ErrInvalid)
	case len(e) > maxAuditEntry:
		return fmt.Errorf("%d bytes, at most %d (64 KiB): %w", len(e), maxAuditEntry, ErrInvalid)
	case !json.Valid(t):
		return fmt.Errorf("not valid JSON: %w", ErrInvalid)
	case t[0] != '{':
		return fmt.Errorf("want a JSON object, got %.20s: %w", t, ErrInvalid)
	}
	return nil
}

// Record returns the record kind/id.
func (st *State) Record(kind, id string) (Record, bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	r, ok := st.records[kind][id]
	if !ok {
		return Record{}, false
	}
	return r.clone(), true
}

// Records returns the records of kind whose id starts with prefix, ordered
// by id.
func (st *State) Records(kind, prefix string) []Record {
	st.mu.RLock()
	defer st.mu.RUnlock()
	out := []Record{}
	if t := st.recordOrder[kind]; t != nil {
		t.AscendGreaterOrEqual(&Record{ID: prefix}, func(r *Record) bool {
			if !strings.HasPrefix(r.ID, prefix) {
				return false
			}
			out = append(out, r.clone())
			return true
		})
	}
	return out
}

// RecordCount returns how many records the store holds, of every kind.
func (st *State) RecordCount() int {
	st.mu.RLock()
	defer st.mu.RUnlock()
	n := 0
	for _, m := range st.records {
		n += len(m)
	}
	return n
}

// Audit returns at most limit audit entries with a sequence number above
// after, in sequence order.
func (st *State) Audit(after uint64, limit int) []AuditEntry {
	st.mu.RLock()
	defer st.mu.RUnlock()
	i, _ := slices.BinarySearchFunc(st.audit, after+1, func(e *AuditEntry, seq uint64) int { return cmp.Compare(e.Seq, seq) })
	rest := st.audit[i:]
	out := make([]AuditEntry, 0, min(len(rest), max(limit, 0)))
	for _, e := range rest[:min(len(rest), max(limit, 0))] {
		out = append(out, e.clone())
	}
	return out
}

// AuditLen returns how many audit entries the state holds.
func (st *State) AuditLen() int {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return len(st.audit)
}

// AuditSeq returns the sequence number of the last audit entry, zero
// before the first.
func (st *State) AuditSeq() uint64 {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.auditSeq()
}

func (st *State) auditSeq() uint64 {
	if len(st.audit) == 0 {
		return 0
	}
	return st.audit[len(st.audit)-1].Seq
}
