package scheduler

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/rodon-compute/rodon/api"
)

// The record store and the audit log (docs/PROTOCOL.md, "Records and
// audit"): the gateway keeps all its state here.

// Limits of GET /v1/audit.
const (
	defaultAuditLimit = 100
	maxAuditLimit     = 1000
)

func apiRecord(r Record) api.Record {
	return api.Record{Kind: r.Kind, ID: r.ID, Version: r.Version, Value: r.Value, ModifyIndex: r.ModifyIndex}
}

func apiAuditEntry(e AuditEntry) api.AuditEntry {
	return api.AuditEntry{Seq: e.Seq, Time: e.Time, Entry: e.Entry}
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
	return req, nil
}

func (s *Server) handleAppendAudit(w http.ResponseWriter, r *http.Request) error {
	req, err := decodeAppendAudit(w, r)
	if err != nil {
		return err
	}
	res, err := s.raft.Apply(r.Context(), AuditAppend{Entry: req.Entry, At: s.now()})
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

func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	var after uint64
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return badRequest("query parameter after %q: want the sequence number of the last entry seen, or 0", v)
		}
		after = n
	}
	limit := defaultAuditLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return badRequest("query parameter limit %q: want 1 to %d entries", v, maxAuditLimit)
		}
		limit = min(n, maxAuditLimit)
	}
	st := s.fsm.State()
	idx := st.Index()
	entries := st.Audit(after, limit)
	out := make([]api.AuditEntry, len(entries))
	for i, e := range entries {
		out[i] = apiAuditEntry(e)
	}
	writeIndexed(w, http.StatusOK, idx, out)
	return nil
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
	res, err := s.raft.Apply(r.Context(), AuditDrop{Before: req.Before, By: req.By, At: s.now()})
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
