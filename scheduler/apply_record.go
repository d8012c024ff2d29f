package scheduler

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
)

// applyRecordPut stores a new version of a record (see RecordPut) and
// returns a copy of it (*Record).
func (st *State) applyRecordPut(idx uint64, c *RecordPut) any {
	if err := validateKind(c.Kind); err != nil {
		return err
	}
	if err := validateRecordID(c.ID); err != nil {
		return err
	}
	if err := validateRecordValue(c.Value); err != nil {
		return fmt.Errorf("record %s/%s: value: %w", c.Kind, c.ID, err)
	}
	old, ok := st.records[c.Kind][c.ID]
	switch {
	case c.Version == 0 && ok:
		return fmt.Errorf("record %s/%s: version 0 creates, but the record exists at version %d: %w",
			c.Kind, c.ID, old.Version, ErrExists)
	case c.Version != 0 && !ok:
		return fmt.Errorf("record %s/%s: put names version %d, but the record does not exist (current version 0): %w",
			c.Kind, c.ID, c.Version, ErrVersionMismatch)
	case ok && c.Version != old.Version:
		return fmt.Errorf("record %s/%s: put names version %d, but the current version is %d: %w",
			c.Kind, c.ID, c.Version, old.Version, ErrVersionMismatch)
	}
	r := &Record{Kind: c.Kind, ID: c.ID, Version: c.Version + 1, Value: c.Value, ModifyIndex: idx}
	st.putRecord(c.Kind, c.ID, r)
	out := r.clone()
	return &out
}

// applyRecordDelete deletes a record (see RecordDelete).
func (st *State) applyRecordDelete(_ uint64, c *RecordDelete) any {
	if err := validateKind(c.Kind); err != nil {
		return err
	}
	if err := validateRecordID(c.ID); err != nil {
		return err
	}
	if c.Version == 0 {
		return fmt.Errorf("record %s/%s: delete names version 0: want the record's current version: %w", c.Kind, c.ID, ErrInvalid)
	}
	old, ok := st.records[c.Kind][c.ID]
	switch {
	case !ok:
		return fmt.Errorf("record %s/%s: %w", c.Kind, c.ID, ErrNotFound)
	case c.Version != old.Version:
		return fmt.Errorf("record %s/%s: delete names version %d, but the current version is %d: %w",
			c.Kind, c.ID, c.Version, old.Version, ErrVersionMismatch)
	}
	st.putRecord(c.Kind, c.ID, nil)
	return nil
}

// applyAuditAppend appends an entry to the audit log, numbered after the
// last, and returns a copy of it (*AuditEntry).
func (st *State) applyAuditAppend(_ uint64, c *AuditAppend) any {
	if err := validateAuditEntry(c.Entry); err != nil {
		return fmt.Errorf("audit entry: %w", err)
	}
	if err := validateAuditFields(c.Tenant, c.Who, c.Action); err != nil {
		return fmt.Errorf("audit entry: %w", err)
	}
	e := &AuditEntry{Seq: st.auditSeq() + 1, Time: c.At, Tenant: c.Tenant, Who: c.Who, Action: c.Action, Entry: c.Entry}
	st.addAudit(e)
	out := e.clone()
	return &out
}

// maxAuditBy bounds the "by" of an audit drop.
const maxAuditBy = 4 << 10

// AuditDropResult is the result of an audit_drop entry: how many entries
// were dropped, and the entry that records it.
type AuditDropResult struct {
	Dropped uint64
	Entry   AuditEntry
}

// validateAuditBy checks the "by" of an audit drop: empty, or a JSON
// value other than null of at most 4 KiB. Errors wrap ErrInvalid.
func validateAuditBy(by json.RawMessage) error {
	switch t := bytes.TrimSpace(by); {
	case len(t) == 0:
		return nil
	case len(by) > maxAuditBy:
		return fmt.Errorf("%d bytes, at most %d (4 KiB): %w", len(by), maxAuditBy, ErrInvalid)
	case !json.Valid(t) || string(t) == "null":
		return fmt.Errorf("not a JSON value: %w", ErrInvalid)
	}
	return nil
}

// applyAuditDrop drops the entries below c.Before and appends the entry
// that says so (see AuditDrop); it returns *AuditDropResult.
func (st *State) applyAuditDrop(_ uint64, c *AuditDrop) any {
	last := st.auditSeq()
	if err := checkAuditDrop(c.Before, last, c.By, c.Who); err != nil {
		return fmt.Errorf("audit drop: %w", err)
	}
	i, _ := slices.BinarySearchFunc(st.audit, c.Before, func(e *AuditEntry, seq uint64) int { return cmp.Compare(e.Seq, seq) })
	// A new array: the dropped entries' memory goes, and a snapshot that
	// holds the old prefix keeps it whole.
	st.audit = slices.Clone(st.audit[i:])
	st.indexAudit()
	e := &AuditEntry{Seq: last + 1, Time: c.At, Who: c.Who, Action: auditDropAction, Entry: auditDropDoc(c.Before, uint64(i), c.By)}
	st.addAudit(e)
	return &AuditDropResult{Dropped: uint64(i), Entry: e.clone()}
}

// applyAuditDropTenant drops c.Tenant's entries below c.Before and
// appends, in c.Tenant, the entry that says so (see AuditDropTenant); it
// returns *AuditDropResult.
func (st *State) applyAuditDropTenant(_ uint64, c *AuditDropTenant) any {
	last := st.auditSeq()
	if err := checkAuditDrop(c.Before, last, c.By, c.Who); err != nil {
		return fmt.Errorf("audit drop of tenant %q: %w", c.Tenant, err)
	}
	if err := validateAuditFields(c.Tenant, "", ""); err != nil {
		return fmt.Errorf("audit drop: %w", err)
	}
	own := st.auditByTenant[c.Tenant]
	i, _ := slices.BinarySearchFunc(own, c.Before, func(e *AuditEntry, seq uint64) int { return cmp.Compare(e.Seq, seq) })
	if i > 0 {
		// New arrays, as in applyAuditDrop: a snapshot keeps the old one.
		st.audit = slices.DeleteFunc(slices.Clone(st.audit), func(e *AuditEntry) bool {
			return e.Tenant == c.Tenant && e.Seq < c.Before
		})
		st.auditByTenant[c.Tenant] = slices.Clone(own[i:])
	}
	e := &AuditEntry{Seq: last + 1, Time: c.At, Tenant: c.Tenant, Who: c.Who, Action: auditDropAction, Entry: auditDropDoc(c.Before, uint64(i), c.By)}
	st.addAudit(e)
	return &AuditDropResult{Dropped: uint64(i), Entry: e.clone()}
}

// auditDropAction is the action of the entry a drop appends.
const auditDropAction = "audit.drop"

// checkAuditDrop checks a drop's before (1 to last+1), by and who;
// errors wrap ErrInvalid.
func checkAuditDrop(before, last uint64, by json.RawMessage, who string) error {
	switch {
	case before == 0:
		return fmt.Errorf("before 0: want the sequence number of the first entry to keep: %w", ErrInvalid)
	case before > last+1:
		return fmt.Errorf("before %d: the last entry is %d, so at most %d (drop them all): %w", before, last, last+1, ErrInvalid)
	}
	if err := validateAuditBy(by); err != nil {
		return fmt.Errorf("by: %w", err)
	}
	return validateAuditFields("", who, "")
}

// auditDropDoc is the document of the entry a drop appends.
func auditDropDoc(before, dropped uint64, by json.RawMessage) json.RawMessage {
	doc := struct {
		Action  string          `json:"action"`
		Before  uint64          `json:"before"`
		Dropped uint64          `json:"dropped"`
		By      json.RawMessage `json:"by,omitempty"`
	}{auditDropAction, before, dropped, by}
	b, err := json.Marshal(doc)
	if err != nil {
		panic(fmt.Sprintf("fsm: encode audit drop entry: %v", err)) // by was validated
	}
	return b
}
