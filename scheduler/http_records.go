package scheduler

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// The record store and the audit log (docs/PROTOCOL.md, "Records and
// audit"): the gateway keeps all its state here.

func apiRecord(r Record) api.Record {
	return api.Record{Kind: r.Kind, ID: r.ID, Version: r.Version, Value: r.Value, ModifyIndex: r.ModifyIndex}
}

func apiAuditEntry(e AuditEntry) api.AuditEntry {
	return api.AuditEntry{Seq: e.Seq, Time: e.Time, Tenant: e.Tenant, Who: e.Who, Action: e.Action, Entry: e.Entry}
}

// recordKind returns the {kind} of the path, or a 400.
func recordKind(r *http.Request) (string, error) {
	kind := r.PathValue("kind")
	if err := validateKind(kind); err != nil {
		return "", badRequest("%s", trimInvalid(err))
	}
	return kind, nil
}

// recordKey returns the {kind} and {id} of the path, or a 400.
func recordKey(r *http.Request) (kind, id string, err error) {
	if kind, err = recordKind(r); err != nil {
		return "", "", err
	}
	id = r.PathValue("id")
	if err := validateRecordID(id); err != nil {
		return "", "", badRequest("%s", trimInvalid(err))
	}
	return kind, id, nil
}

// canonical returns v as the log entry will carry it (compact, HTML
// characters escaped), so that the limits checked here are those the FSM
// checks.
func canonical(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return v
	}
	b, err := json.Marshal(v)
	if err != nil {
		return v // not JSON: the check that follows says so
	}
	return b
}

func (s *Server) handleRecord(w http.ResponseWriter, r *http.Request) error {
	kind, id, err := recordKey(r)
	if err != nil {
		return err
	}
	st := s.fsm.State()
	idx := st.Index()
	rec, ok := st.Record(kind, id)
	if !ok {
		return notFound("record %s/%s: not found", kind, id)
	}
	writeIndexed(w, http.StatusOK, idx, apiRecord(rec))
	return nil
}

func (s *Server) handleRecords(w http.ResponseWriter, r *http.Request) error {
	kind, err := recordKind(r)
	if err != nil {
		return err
	}
	p, err := pageOf(r, cursorRecords)
	if err != nil {
		return err
	}
	st := s.fsm.State()
	idx := st.Index()
	recs, next, more := st.RecordsPage(kind, r.URL.Query().Get("prefix"), p.key, p.limit)
	setNext(w, cursorRecords, next, more)
	out := make([]api.Record, len(recs))
	for i, rec := range recs {
		out[i] = apiRecord(rec)
	}
	writeIndexed(w, http.StatusOK, idx, out)
	return nil
}

// decodePutRecord decodes and checks the body of PUT
// /v1/records/{kind}/{id}; the value comes back canonical.
func decodePutRecord(w http.ResponseWriter, r *http.Request) (api.PutRecordRequest, error) {
	var req api.PutRecordRequest
	if err := decodeBody(w, r, &req, maxBody, false); err != nil {
		return req, err
	}
	req.Value = canonical(req.Value)
	if err := validateRecordValue(req.Value); err != nil {
		return req, badRequest("field \"value\": %s", trimInvalid(err))
	}
	return req, nil
}

func (s *Server) handlePutRecord(w http.ResponseWriter, r *http.Request) error {
	kind, id, err := recordKey(r)
	if err != nil {
		return err
	}
	req, err := decodePutRecord(w, r)
	if err != nil {
		return err
	}
	res, err := s.raft.Apply(r.Context(), RecordPut{Kind: kind, ID: id, Version: req.Version, Value: req.Value, At: s.now()})
	if err != nil {
		return err
	}
	rec, ok := res.(*Record)
	if !ok {
		return fmt.Errorf("put record %s/%s: unexpected apply result %T", kind, id, res)
	}
	writeIndexed(w, http.StatusOK, rec.ModifyIndex, apiRecord(*rec))
	return nil
}

func (s *Server) handleDeleteRecord(w http.ResponseWriter, r *http.Request) error {
	kind, id, err := recordKey(r)
	if err != nil {
		return err
	}
	q := r.URL.Query().Get("version")
	if q == "" {
		return badRequest("query parameter version: missing: want the version of the record to delete (compare-and-set)")
	}
	version, err := strconv.ParseUint(q, 10, 64)
	if err != nil || version == 0 {
		return badRequest("query parameter version %q: want the record's current version, an integer of at least 1", q)
	}
	var none struct{}
	if err := decodeBody(w, r, &none, maxBody, true); err != nil {
		return err
	}
	if _, err := s.raft.Apply(r.Context(), RecordDelete{Kind: kind, ID: id, Version: version, At: s.now()}); err != nil {
		return err
	}
	w.Header().Set(IndexHeader, strconv.FormatUint(s.fsm.State().Index(), 10))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// decodeAppendAudit decodes and checks the body of POST /v1/audit; the
// entry comes back canonical.
func decodeAppendAudit(w http.ResponseWriter, r *http.Request) (api.AppendAuditRequest, error) {
	var req api.AppendAuditRequest
	if err := decodeBody(w, r, &req, maxBody, false); err != nil {
		return req, err
	}
	req.Entry = canonical(req.Entry)
	if err := validateAuditEntry(req.Entry); err != nil {
		return req, badRequest("field \"entry\": %s", trimInvalid(err))
	}
	if err := validateAuditFields(req.Tenant, req.Who, req.Action); err != nil {
		return req, badRequest("field %s", trimInvalid(err))
	}
	return req, nil
}

func (s *Server) handleAppendAudit(w http.ResponseWriter, r *http.Request) error {
	req, err := decodeAppendAudit(w, r)
	if err != nil {
		return err
	}
	res, err := s.raft.Apply(r.Context(), AuditAppend{Entry: req.Entry, Tenant: req.Tenant, Who: req.Who, Action: req.Action, At: s.now()})
	if err != nil {
		return err
	}
	e, ok := res.(*AuditEntry)
	if !ok {
		return fmt.Errorf("append audit entry: unexpected apply result %T", res)
	}
	writeIndexed(w, http.StatusCreated, s.fsm.State().Index(), apiAuditEntry(*e))
	return nil
}

// handleAudit lists the audit entries that match the query (auditQuery),
// a page at a time.
func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request) error {
	p, err := pageOf(r, cursorAudit)
	if err != nil {
		return err
	}
	f, after, err := auditQuery(r.URL.Query())
	if err != nil {
		return err
	}
	if p.key != "" {
		n, err := strconv.ParseUint(p.key, 10, 64)
		if err != nil {
			return badRequest("query parameter cursor: not a cursor of this list: pass the %s header of the previous page", NextCursorHeader)
		}
		after = max(after, n)
	}
	st := s.fsm.State()
	idx := st.Index()
	entries, next, more := st.AuditPage(f, after, p.limit)
	setNext(w, cursorAudit, strconv.FormatUint(next, 10), more)
	out := make([]api.AuditEntry, len(entries))
	for i, e := range entries {
		out[i] = apiAuditEntry(e)
	}
	writeIndexed(w, http.StatusOK, idx, out)
	return nil
}

// auditQuery parses the filter of GET /v1/audit: tenant (absent: every
// tenant's entries; present, even empty: that tenant's), who, action,
// since and until (RFC 3339), after (a seq). Errors are 400s naming the
// parameter.
func auditQuery(q url.Values) (f AuditFilter, after uint64, err error) {
	f.AllTenants = !q.Has("tenant")
	f.Tenant, f.Who, f.Action = q.Get("tenant"), q.Get("who"), q.Get("action")
	if err := validateAuditFields(f.Tenant, f.Who, f.Action); err != nil {
		return f, 0, badRequest("query parameter %s", trimInvalid(err))
	}
	for _, t := range []struct {
		name string
		to   *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		v := q.Get(t.name)
		if v == "" {
			continue
		}
		if *t.to, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return f, 0, badRequest("query parameter %s %.40q: want a time in RFC 3339, as 2026-03-01T12:00:00Z", t.name, v)
		}
	}
	if v := q.Get("after"); v != "" {
		if after, err = strconv.ParseUint(v, 10, 64); err != nil {
			return f, 0, badRequest("query parameter after %q: want the sequence number of the last entry seen, or 0", v)
		}
	}
	return f, after, nil
}

func (s *Server) handleDropAudit(w http.ResponseWriter, r *http.Request) error {
	var req api.DropAuditRequest
	if err := decodeBody(w, r, &req, maxBody, false); err != nil {
		return err
	}
	req.By = canonical(req.By)
	if req.Before == 0 {
		return badRequest("field \"before\": missing or 0: want the sequence number of the first entry to keep")
	}
	if err := validateAuditBy(req.By); err != nil {
		return badRequest("field \"by\": %s", trimInvalid(err))
	}
	if err := validateAuditFields(deref(req.Tenant), req.Who, ""); err != nil {
		return badRequest("field %s", trimInvalid(err))
	}
	var cmd cluster.Command = AuditDrop{Before: req.Before, By: req.By, Who: req.Who, At: s.now()}
	if req.Tenant != nil {
		cmd = AuditDropTenant{Tenant: *req.Tenant, Before: req.Before, By: req.By, Who: req.Who, At: s.now()}
	}
	res, err := s.raft.Apply(r.Context(), cmd)
	if err != nil {
		return err
	}
	d, ok := res.(*AuditDropResult)
	if !ok {
		return fmt.Errorf("drop audit entries: unexpected apply result %T", res)
	}
	writeIndexed(w, http.StatusOK, s.fsm.State().Index(), api.DropAuditAnswer{Dropped: d.Dropped, Entry: apiAuditEntry(d.Entry)})
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
