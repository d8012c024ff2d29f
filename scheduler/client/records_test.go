package client

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/api"
)

// TestRecordRequests checks what each record and audit method sends, and
// that ids a URL path must escape arrive intact.
func TestRecordRequests(t *testing.T) {
	const odd = `a b%2F?#&+;=:@"'`
	mux := http.NewServeMux()
	var got []string
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.Path+" "+r.URL.RawQuery+" "+string(b))
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"seq":4,"time":"2026-03-01T12:00:00Z","entry":{"a":1}}`))
			return
		}
		w.Write([]byte(`[]`))
	})
	mux.HandleFunc("/v1/records/{kind}/{id}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" kind="+r.PathValue("kind")+" id="+r.PathValue("id")+" "+r.URL.RawQuery+" "+string(b))
		if r.Method == http.MethodDelete {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Write([]byte(`{"kind":"users","id":` + jsonString(r.PathValue("id")) + `,"version":2,"value":{"a":1}}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c, err := New(srv.URL, Options{RetryFor: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	r, err := c.PutRecord(ctx, "users", odd, 1, json.RawMessage(`{"a":1}`))
	if err != nil || r.ID != odd || r.Version != 2 {
		t.Errorf("PutRecord(users, %q) = %+v, %v", odd, r, err)
	}
	if r, err := c.GetRecord(ctx, "users", odd); err != nil || r.ID != odd {
		t.Errorf("GetRecord(users, %q) = %+v, %v", odd, r, err)
	}
	if err := c.DeleteRecord(ctx, "users", odd, 2); err != nil {
		t.Errorf("DeleteRecord() = %v", err)
	}
	if _, err := c.ListRecords(ctx, "users", "a b"); err != nil {
		t.Errorf("ListRecords() = %v", err)
	}
	if _, next, err := c.ListRecordsPage(ctx, "users", "a b", 10, "cur"); err != nil || next != "" {
		t.Errorf("ListRecordsPage() = %q, %v; want no next page", next, err)
	}
	if e, err := c.AppendAudit(ctx, json.RawMessage(`{"a":1}`)); err != nil || e.Seq != 4 || e.Time.IsZero() {
		t.Errorf("AppendAudit() = %+v, %v", e, err)
	}
	if _, err := c.Audit(ctx, 3, 0); err != nil {
		t.Errorf("Audit() = %v", err)
	}
	if _, err := c.Audit(ctx, 0, 10); err != nil {
		t.Errorf("Audit() = %v", err)
	}
	want := []string{
		`PUT kind=users id=` + odd + `  {"version":1,"value":{"a":1}}`,
		`GET kind=users id=` + odd + `  `,
		`DELETE kind=users id=` + odd + ` version=2 `,
		`GET /v1/records/users limit=1000&prefix=a+b `,
		`GET /v1/records/users cursor=cur&limit=10&prefix=a+b `,
		`POST /v1/audit  {"entry":{"a":1}}`,
		`GET /v1/audit after=3 `,
		`GET /v1/audit after=0&limit=10 `,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}

	// What no path can carry is refused before it is sent.
	for _, id := range []string{"", ".", ".."} {
		if _, err := c.GetRecord(ctx, "users", id); err == nil {
			t.Errorf("GetRecord(users, %q) = nil error, want one", id)
		}
	}
	if _, err := c.ListRecords(ctx, "", ""); err == nil {
		t.Errorf("ListRecords(\"\") = nil error, want one")
	}
	if len(got) != len(want) {
		t.Errorf("refused calls sent %d requests", len(got)-len(want))
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestRecordErrors: a caller tells a failed compare-and-set from a missing
// record.
func TestRecordErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPut:
			apiError(w, 409, api.CodeConflict, "record users/u1: put names version 1, but the current version is 2: version mismatch")
		default:
			apiError(w, 404, api.CodeNotFound, "record users/u1: not found")
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL, Options{RetryFor: -1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.PutRecord(t.Context(), "users", "u1", 1, json.RawMessage(`{}`))
	if !IsConflict(err) || IsNotFound(err) {
		t.Errorf("PutRecord() = %v, want a conflict", err)
	}
	_, err = c.GetRecord(t.Context(), "users", "u1")
	if !IsNotFound(err) || IsConflict(err) {
		t.Errorf("GetRecord() = %v, want not found", err)
	}
	if err := c.DeleteRecord(t.Context(), "users", "u1", 1); !IsNotFound(err) {
		t.Errorf("DeleteRecord() = %v, want not found", err)
	}
}

// TestAppendAuditNotRetried: an append that may have reached the leader is
// not sent again (it would append the entry twice); a put, which
// compare-and-set keeps from applying twice, is.
func TestAppendAuditNotRetried(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		apiError(w, 502, api.CodeUnavailable, "forward to the leader: connection reset")
	}))
	defer srv.Close()
	c, err := New(srv.URL, Options{RetryFor: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AppendAudit(t.Context(), json.RawMessage(`{}`)); !IsCode(err, api.CodeUnavailable) || calls.Load() != 1 {
		t.Errorf("AppendAudit() = %v after %d calls, want unavailable after 1", err, calls.Load())
	}
	calls.Store(0)
	if _, err := c.PutRecord(t.Context(), "users", "u1", 1, json.RawMessage(`{}`)); !IsCode(err, api.CodeUnavailable) || calls.Load() < 2 {
		t.Errorf("PutRecord() = %v after %d calls, want retries", err, calls.Load())
	}
}

// TestListPages checks that the list methods follow X-Next-Cursor page
// after page, and that the page methods return it.
func TestListPages(t *testing.T) {
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries = append(queries, r.URL.Path+"?"+r.URL.RawQuery)
		switch r.URL.Query().Get("cursor") {
		case "":
			w.Header().Set(NextCursorHeader, "p2")
			w.Write([]byte(`[{"id":"s1"},{"id":"s2"}]`))
		case "p2":
			w.Header().Set(NextCursorHeader, "p3")
			w.Write([]byte(`[{"id":"s3"}]`))
		default:
			w.Write([]byte(`[{"id":"s4"}]`))
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL, Options{RetryFor: -1})
	if err != nil {
		t.Fatal(err)
	}
	steps, err := c.Steps(t.Context(), StepFilter{State: "exited"})
	var ids []string
	for _, s := range steps {
		ids = append(ids, s.ID)
	}
	if err != nil || !cmp.Equal(ids, []string{"s1", "s2", "s3", "s4"}) {
		t.Errorf("Steps() = %v, %v; want s1 to s4 from three pages", ids, err)
	}
	page, next, err := c.StepsPage(t.Context(), "", "n1", 2, "")
	if err != nil || len(page) != 2 || next != "p2" {
		t.Errorf("StepsPage() = %d steps, next %q, %v; want 2 and p2", len(page), next, err)
	}
	want := []string{
		"/v1/steps?limit=1000&state=exited", "/v1/steps?cursor=p2&limit=1000&state=exited", "/v1/steps?cursor=p3&limit=1000&state=exited",
		"/v1/steps?limit=2&node=n1",
	}
	if diff := cmp.Diff(want, queries); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}
