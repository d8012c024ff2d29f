package scheduler

import (
	"fmt"
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
	e := &AuditEntry{Seq: st.auditSeq() + 1, Time: c.At, Entry: c.Entry}
	st.audit = append(st.audit, e)
	out := e.clone()
	return &out
}
