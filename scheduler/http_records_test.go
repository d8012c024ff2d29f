package scheduler

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return cmp.Equal(x, y)
}

// TestServerRecords writes records and audit entries through a follower
// (which forwards to the leader) and reads them back from every member.
func TestServerRecords(t *testing.T) {
	c := newServerCluster(t, 3, nil)
	follower := c.follower()
	cl := c.client(follower)
	ctx := t.Context()

	v1 := json.RawMessage(`{"name": "ann", "note": "<b>&"}`)
	r, err := cl.PutRecord(ctx, "users", "u1", 0, v1)
	if err != nil {
		t.Fatalf("PutRecord(users, u1, 0) via a follower = %v", err)
	}
	if r.Kind != "users" || r.ID != "u1" || r.Version != 1 || r.ModifyIndex == 0 || !jsonEqual(t, r.Value, v1) {
		t.Errorf("PutRecord(users, u1, 0) = %+v, want version 1 with the value", r)
	}
	if _, err := cl.PutRecord(ctx, "users", "u1", 0, json.RawMessage(`{}`)); !client.IsConflict(err) ||
		!strings.Contains(err.Error(), "exists at version 1") {
		t.Errorf("PutRecord(users, u1, 0) again = %v, want a conflict naming version 1", err)
	}
	v2 := json.RawMessage(`{"name":"ann","age":3}`)
	if r, err = cl.PutRecord(ctx, "users", "u1", 1, v2); err != nil || r.Version != 2 {
		t.Fatalf("PutRecord(users, u1, 1) = %+v, %v; want version 2", r, err)
	}
	if _, err := cl.PutRecord(ctx, "users", "u1", 1, json.RawMessage(`{}`)); !client.IsConflict(err) ||
		!strings.Contains(err.Error(), "current version is 2") {
		t.Errorf("PutRecord(users, u1, 1) again = %v, want a conflict naming version 2", err)
	}
	// An id with characters a URL path must escape.
	odd := `odd %2F?#&+;=:@"' id`
	if _, err := cl.PutRecord(ctx, "users", odd, 0, json.RawMessage(`{"odd":true}`)); err != nil {
		t.Fatalf("PutRecord(users, %q) = %v", odd, err)
	}
	if _, err := cl.PutRecord(ctx, "keys", "u1", 0, json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}

	// Every member answers the same, as soon as it is asked.
	for _, m := range c.members {
		mc := c.client(m)
		got, err := mc.GetRecord(ctx, "users", "u1")
		if err != nil || got.Version != 2 || got.ModifyIndex != r.ModifyIndex || !jsonEqual(t, got.Value, v2) {
			t.Errorf("member %s: GetRecord(users, u1) = %+v, %v; want version 2", m.id, got, err)
		}
		if got, err := mc.GetRecord(ctx, "users", odd); err != nil || got.ID != odd {
			t.Errorf("member %s: GetRecord(users, %q) = %+v, %v", m.id, odd, got, err)
		}
		list, err := mc.ListRecords(ctx, "users", "")
		if ids := recordIDs(list); err != nil || !cmp.Equal(ids, []string{odd, "u1"}) {
			t.Errorf("member %s: ListRecords(users) = %q, %v; want [%q u1]", m.id, ids, err, odd)
		}
	}
	if list, err := cl.ListRecords(ctx, "users", "u"); err != nil || !cmp.Equal(recordIDs(list), []string{"u1"}) {
		t.Errorf("ListRecords(users, u) = %+v, %v; want [u1]", list, err)
	}
	if list, err := cl.ListRecords(ctx, "nothing", ""); err != nil || list == nil || len(list) != 0 {
		t.Errorf("ListRecords(nothing) = %#v, %v; want []", list, err)
	}

	// Deletes.
	if err := cl.DeleteRecord(ctx, "users", "u1", 1); !client.IsConflict(err) || !strings.Contains(err.Error(), "current version is 2") {
		t.Errorf("DeleteRecord(users, u1, 1) = %v, want a conflict naming version 2", err)
	}
	if err := cl.DeleteRecord(ctx, "users", "u1", 2); err != nil {
		t.Fatalf("DeleteRecord(users, u1, 2) = %v", err)
	}
	if _, err := cl.GetRecord(ctx, "users", "u1"); !client.IsNotFound(err) {
		t.Errorf("GetRecord(users, u1) after its delete = %v, want not found", err)
	}
	if err := cl.DeleteRecord(ctx, "users", "u1", 2); !client.IsNotFound(err) {
		t.Errorf("DeleteRecord(users, u1) again = %v, want not found", err)
	}
	if r, err := cl.PutRecord(ctx, "users", "u1", 0, v1); err != nil || r.Version != 1 {
		t.Errorf("PutRecord(users, u1, 0) after the delete = %+v, %v; want version 1", r, err)
	}

	// The audit log.
	var appended []api.AuditEntry
	for i := range 3 {
		e, err := cl.AppendAudit(ctx, json.RawMessage(`{"who":"ann","n":`+strconv.Itoa(i)+`}`))
		if err != nil {
			t.Fatalf("AppendAudit() via a follower = %v", err)
		}
		if e.Seq != uint64(i+1) || e.Time.IsZero() {
			t.Errorf("AppendAudit() #%d = %+v, want seq %d with the leader's time", i, e, i+1)
		}
		appended = append(appended, e)
	}
	for _, m := range c.members {
		got, err := c.client(m).Audit(ctx, 0, 0)
		if err != nil {
			t.Fatalf("member %s: Audit(0) = %v", m.id, err)
		}
		if diff := cmp.Diff(appended, got); diff != "" {
			t.Errorf("member %s: Audit(0) (-appended +got):\n%s", m.id, diff)
		}
	}
	if got, err := cl.Audit(ctx, 1, 1); err != nil || len(got) != 1 || got[0].Seq != 2 {
		t.Errorf("Audit(1, 1) = %+v, %v; want entry 2", got, err)
	}

	// Answers carry the index they were read at.
	resp, err := (&http.Client{Transport: c.transport}).Get(follower.url() + "/v1/records/keys/u1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if idx, err := strconv.ParseUint(resp.Header.Get(IndexHeader), 10, 64); err != nil || idx < r.ModifyIndex {
		t.Errorf("GET /v1/records/keys/u1: %s %q = %q, want at least %d (%s)", IndexHeader, resp.Header.Get(IndexHeader), b, r.ModifyIndex, err)
	}
	checkMetrics(t, c, follower, `rodon_scheduler_http_requests_total{code="200",route="PUT /v1/records/{kind}/{id}"}`,
		`rodon_scheduler_http_requests_total{code="409",route="PUT /v1/records/{kind}/{id}"}`,
		`rodon_scheduler_http_requests_total{code="201",route="POST /v1/audit"} 3`,
		"rodon_scheduler_records 3", "rodon_scheduler_audit_seq 3")

	// The operator's snapshot document holds the records and the audit
	// log; restoring it keeps both as they are now.
	saved, err := cl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var doc snapshotData
	if err := json.Unmarshal(saved, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Records) != 3 || len(doc.Audit) != 3 || doc.Records[0].Kind != "keys" {
		t.Errorf("Snapshot() = %d records (first %+v), %d audit entries; want 3 sorted by kind and id, 3", len(doc.Records),
			doc.Records[0], len(doc.Audit))
	}
	if _, err := cl.PutRecord(ctx, "keys", "u1", 1, json.RawMessage(`{"after":"the save"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.AppendAudit(ctx, json.RawMessage(`{"after":"the save"}`)); err != nil {
		t.Fatal(err)
	}
	if err := cl.RestoreSnapshot(ctx, saved); err != nil {
		t.Fatalf("RestoreSnapshot() = %v", err)
	}
	if r, err := cl.GetRecord(ctx, "keys", "u1"); err != nil || r.Version != 2 {
		t.Errorf("GetRecord(keys, u1) after a restore = %+v, %v; want version 2 kept", r, err)
	}
	if got, err := cl.Audit(ctx, 0, 0); err != nil || len(got) != 4 {
		t.Errorf("Audit() after a restore = %d entries, %v; want 4 kept", len(got), err)
	}
}

func recordIDs(rs []api.Record) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

// checkMetrics checks that member m's /metrics has every line in want.
func checkMetrics(t *testing.T, c *serverCluster, m *testServer, want ...string) {
	t.Helper()
	resp, err := (&http.Client{Transport: c.transport}).Get(m.url() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, w := range want {
		if !strings.Contains(string(b), w) {
			t.Errorf("member %s: /metrics lacks %q", m.id, w)
		}
	}
}
