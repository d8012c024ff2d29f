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
	index   uint64
	// failPuts makes the next n PutRecord calls fail with unavailable.
	failPuts int
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
	rec, ok := m.records[kind+"/"+id]
	if !ok {
		return api.Record{}, notFound("record %s/%s: not found", kind, id)
	}
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
	m.index++
	e := api.AuditEntry{Seq: uint64(len(m.audit)) + 1, Time: now().UTC(), Entry: slices.Clone(entry)}
	m.audit = append(m.audit, e)
	return e, nil
}

// Audit returns up to limit entries after seq after, oldest first.
func (m *MemStore) Audit(ctx context.Context, after uint64, limit int) ([]api.AuditEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []api.AuditEntry{}
	for _, e := range m.audit {
		if e.Seq > after && (limit <= 0 || len(out) < limit) {
			out = append(out, e)
		}
	}
	return out, nil
}

// AuditLen returns how many entries the audit log holds.
func (m *MemStore) AuditLen() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.audit)
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
