package gatewaytest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// MemStore is an in-memory record store and audit log. It is safe for
// concurrent use. Its zero value is not usable: call NewMemStore.
type MemStore struct {
	// Now stamps audit entries; nil is time.Now.
	Now func() time.Time

	mu      sync.Mutex
	records map[string]api.Record // by kind + "/" + id
	audit   []api.AuditEntry
	seq     uint64
	index   uint64
	stats   Stats
	// failPuts makes the next n PutRecord calls fail with unavailable,
	// failGets the next n GetRecord calls.
	failPuts, failGets int
}

// Stats counts what a store answered: calls that read (GetRecord,
// ListRecordsPage, Audit) and that wrote, and the bytes read: each
// record's kind, id and value, each audit entry's document.
type Stats struct {
	Reads, Writes int
	ReadBytes     int64
}

// NewMemStore returns an empty store.
func NewMemStore() *MemStore {
	return &MemStore{records: map[string]api.Record{}}
}

func notFound(format string, args ...any) error {
	return &client.Error{Status: http.StatusNotFound, Code: api.CodeNotFound, Message: fmt.Sprintf(format, args...)}
}

func conflict(format string, args ...any) error {
	return &client.Error{Status: http.StatusConflict, Code: api.CodeConflict, Message: fmt.Sprintf(format, args...)}
}

// GetRecord returns the record kind/id, or a not_found error.
func (m *MemStore) GetRecord(ctx context.Context, kind, id string) (api.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.Reads++
	if m.failGets > 0 {
		m.failGets--
		return api.Record{}, &client.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "injected failure"}
	}
	rec, ok := m.records[kind+"/"+id]
	if !ok {
		return api.Record{}, notFound("record %s/%s: not found", kind, id)
	}
	m.stats.ReadBytes += recordSize(rec)
	return clone(rec), nil
}

// ListRecords returns the records of kind whose id starts with prefix, by
// id.
func (m *MemStore) ListRecords(ctx context.Context, kind, prefix string) ([]api.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []api.Record{}
	for _, rec := range m.records {
		if rec.Kind == kind && strings.HasPrefix(rec.ID, prefix) {
			out = append(out, clone(rec))
		}
	}
	slices.SortFunc(out, func(a, b api.Record) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// ListRecordsPage returns at most limit records of kind whose id starts
// with prefix, by id, after cursor (the id of the last record of the page
// before; "" for the first page). next is "" on the last page. limit <= 0
// is 100, and at most 1000 are returned, as the scheduler does.
func (m *MemStore) ListRecordsPage(ctx context.Context, kind, prefix string, limit int, cursor string) ([]api.Record, string, error) {
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.Reads++
	var ids []string
	for _, rec := range m.records {
		if rec.Kind == kind && strings.HasPrefix(rec.ID, prefix) && rec.ID > cursor {
			ids = append(ids, rec.ID)
		}
	}
	slices.Sort(ids)
	next := ""
	if len(ids) > limit {
		ids = ids[:limit]
		next = ids[limit-1]
	}
	out := make([]api.Record, 0, len(ids))
	for _, id := range ids {
		rec := m.records[kind+"/"+id]
		m.stats.ReadBytes += recordSize(rec)
		out = append(out, clone(rec))
	}
	return out, next, nil
}

// PutRecord creates (version 0) or replaces (the current version) a
// record; anything else is a conflict.
func (m *MemStore) PutRecord(ctx context.Context, kind, id string, version uint64, value json.RawMessage) (api.Record, error) {
	if kind == "audit" {
		return api.Record{}, &client.Error{Status: http.StatusBadRequest, Code: api.CodeBadRequest, Message: `kind "audit" is reserved`}
	}
	if !json.Valid(value) {
		return api.Record{}, &client.Error{Status: http.StatusBadRequest, Code: api.CodeBadRequest, Message: "value is not JSON"}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.Writes++
	if m.failPuts > 0 {
		m.failPuts--
		return api.Record{}, &client.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "injected failure"}
	}
	key := kind + "/" + id
	cur, ok := m.records[key]
	switch {
	case version == 0 && ok:
		return api.Record{}, conflict("record %s/%s exists already", kind, id)
	case version != 0 && !ok:
		return api.Record{}, conflict("record %s/%s: version %d does not exist", kind, id, version)
	case version != 0 && cur.Version != version:
		return api.Record{}, conflict("record %s/%s is at version %d, not %d", kind, id, cur.Version, version)
	}
	m.index++
	rec := api.Record{Kind: kind, ID: id, Version: version + 1, Value: slices.Clone(value), ModifyIndex: m.index}
	m.records[key] = rec
	return clone(rec), nil
}

// DeleteRecord deletes version of kind/id: not_found when missing,
// conflict when at another version.
func (m *MemStore) DeleteRecord(ctx context.Context, kind, id string, version uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.Writes++
	key := kind + "/" + id
	cur, ok := m.records[key]
	switch {
	case !ok:
		return notFound("record %s/%s: not found", kind, id)
	case cur.Version != version:
		return conflict("record %s/%s is at version %d, not %d", kind, id, cur.Version, version)
	}
	m.index++
	delete(m.records, key)
	return nil
}

// AppendAudit appends entry to the audit log, numbered and stamped.
func (m *MemStore) AppendAudit(ctx context.Context, entry json.RawMessage) (api.AuditEntry, error) {
	if !json.Valid(entry) {
		return api.AuditEntry{}, &client.Error{Status: http.StatusBadRequest, Code: api.CodeBadRequest, Message: "entry is not JSON"}
	}
	now := time.Now
	if m.Now != nil {
		now = m.Now
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.Writes++
	return m.appendLocked(now().UTC(), entry), nil
}

func (m *MemStore) appendLocked(at time.Time, entry json.RawMessage) api.AuditEntry {
	m.index++
	m.seq++
	e := api.AuditEntry{Seq: m.seq, Time: at, Entry: slices.Clone(entry)}
	m.audit = append(m.audit, e)
	return e
}

// DropAudit drops the entries before seq before and appends one saying
// so: {"action":"audit.drop","before":N,"dropped":N,"by":by}, as the
// scheduler does.
func (m *MemStore) DropAudit(ctx context.Context, before uint64, by json.RawMessage) (uint64, error) {
	if len(by) > 0 && !json.Valid(by) {
		return 0, &client.Error{Status: http.StatusBadRequest, Code: api.CodeBadRequest, Message: "by is not JSON"}
	}
	now := time.Now
	if m.Now != nil {
		now = m.Now
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.Writes++
	var kept []api.AuditEntry
	for _, e := range m.audit {
		if e.Seq >= before {
			kept = append(kept, e)
		}
	}
	dropped := uint64(len(m.audit) - len(kept))
	m.audit = kept
	if len(by) == 0 {
		by = json.RawMessage("null")
	}
	entry, _ := json.Marshal(map[string]any{"action": "audit.drop", "before": before, "dropped": dropped, "by": by})
	m.appendLocked(now().UTC(), entry)
	return dropped, nil
}

// Audit returns up to limit entries after seq after, oldest first.
func (m *MemStore) Audit(ctx context.Context, after uint64, limit int) ([]api.AuditEntry, error) {
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.Reads++
	out := []api.AuditEntry{}
	for _, e := range m.audit {
		if e.Seq > after && len(out) < limit {
			m.stats.ReadBytes += int64(len(e.Entry))
			out = append(out, e)
		}
	}
	return out, nil
}

// AuditAll returns every entry the log holds, oldest first.
func (m *MemStore) AuditAll() []api.AuditEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.audit)
}

// Stats returns the counts since the store was made or ResetStats.
func (m *MemStore) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

// ResetStats zeroes the counts.
func (m *MemStore) ResetStats() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats = Stats{}
}

// Size returns the bytes of state the store holds: each record's kind, id
// and value, and each audit entry (what the replicated state grows by).
func (m *MemStore) Size() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for _, r := range m.records {
		n += recordSize(r)
	}
	for _, e := range m.audit {
		n += int64(len(e.Entry))
	}
	return n
}

// Count returns how many records of kind the store holds.
func (m *MemStore) Count(kind string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, r := range m.records {
		if r.Kind == kind {
			n++
		}
	}
	return n
}

func recordSize(r api.Record) int64 { return int64(len(r.Kind) + len(r.ID) + len(r.Value)) }

// AuditLen returns how many entries the audit log holds.
func (m *MemStore) AuditLen() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.audit)
}

// FailGets makes the next n GetRecord calls fail with unavailable.
func (m *MemStore) FailGets(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failGets = n
}

// FailPuts makes the next n PutRecord calls fail with unavailable.
func (m *MemStore) FailPuts(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failPuts = n
}

func clone(r api.Record) api.Record {
	r.Value = slices.Clone(r.Value)
	return r
}
