package gateway

import (
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/api"
)

// asTenant sends a request as credential name acting in tenant (as
// serveRoute will set it) and checks the status.
func (f *fixture) asTenant(tenant, name, method, path, body string, want int, out any) *httptest.ResponseRecorder {
	f.t.Helper()
	r := f.request(f.creds[name], method, path, body)
	w := f.serve(r.WithContext(withTenant(r.Context(), tenant)))
	if w.Code != want {
		f.t.Fatalf("%s %s as %s in %q = %d %s, want %d", method, path, name, tenant, w.Code, w.Body, want)
	}
	if out != nil {
		if err := json.Unmarshal(w.Body.Bytes(), out); err != nil {
			f.t.Fatalf("%s %s: decode %s: %v", method, path, w.Body, err)
		}
	}
	return w
}

// auditDocs reads every page of the audit of tenant at query (limit per
// page) and returns the documents, with the number of pages.
func (f *fixture) auditDocs(tenant, query string, limit int) (docs []api.AuditDocument, pages int) {
	f.t.Helper()
	cursor := ""
	for pages < 100 {
		q := query + "&limit=" + strconv.Itoa(limit)
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		var es []api.AuditEntry
		w := f.asTenant(tenant, "owner", "GET", "/v1/audit?"+q, "", 200, &es)
		pages++
		for _, e := range es {
			if e.Tenant != tenant {
				f.t.Fatalf("GET /v1/audit?%s in %q answered entry %d of tenant %q", q, tenant, e.Seq, e.Tenant)
			}
			var d api.AuditDocument
			if err := json.Unmarshal(e.Entry, &d); err != nil {
				f.t.Fatal(err)
			}
			docs = append(docs, d)
		}
		if cursor = w.Header().Get(nextCursorHeader); cursor == "" {
			return docs, pages
		}
	}
	f.t.Fatalf("GET /v1/audit?%s never ended", query)
	return nil, pages
}

// TestAuditPerTenant: each tenant's audit holds its entries only,
// filtered by who, action and time and paged; a drop drops only the
// caller's tenant's, and is itself in its audit.
func TestAuditPerTenant(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var now time.Time
	f.store.c.SetNow(func() time.Time { return now })
	t.Cleanup(func() { f.store.c.SetNow(nil) })
	type seed struct {
		tenant, who, action string
		min                 int
	}
	seeds := []seed{
		{testTenant, "ann", "run.create", 0}, {"acct-b", "bob", "run.create", 1}, {testTenant, "amy", "secret.set", 2},
		{testTenant, "ann", "secret.set", 3}, {"acct-b", "ann", "secret.set", 4}, {testTenant, "ann", "run.create", 5},
		{testTenant, "amy", "run.create", 6},
	}
	for _, s := range seeds {
		now = base.Add(time.Duration(s.min) * time.Minute)
		doc, _ := json.Marshal(api.AuditDocument{Account: s.tenant, Who: s.who, Action: s.action, Target: "m" + strconv.Itoa(s.min), Result: "ok"})
		if _, err := f.store.AppendAuditEntry(ctx, api.AppendAuditRequest{Entry: doc, Tenant: s.tenant, Who: s.who, Action: s.action}); err != nil {
			t.Fatal(err)
		}
	}
	f.store.c.SetNow(nil)
	targets := func(docs []api.AuditDocument) []string {
		out := []string{}
		for _, d := range docs {
			// The seeds' entries only, not the fixture's own.
			if len(d.Target) < 2 || d.Target[0] != 'm' || d.Target[1] < '0' || d.Target[1] > '9' {
				continue
			}
			out = append(out, d.Target)
		}
		return out
	}
	for _, tc := range []struct {
		tenant, query string
		want          []string
	}{
		{testTenant, "", []string{"m0", "m2", "m3", "m5", "m6"}},
		{testTenant, "who=ann", []string{"m0", "m3", "m5"}},
		{testTenant, "action=secret.set", []string{"m2", "m3"}},
		{testTenant, "who=ann&action=run.create", []string{"m0", "m5"}},
		{testTenant, "since=2026-03-01T12:03:00Z", []string{"m3", "m5", "m6"}},
		{testTenant, "until=2026-03-01T12:03:00Z", []string{"m0", "m2"}},
		{testTenant, "since=2026-03-01T12:01:00Z&until=2026-03-01T12:05:00%2B00:00", []string{"m2", "m3"}},
		{testTenant, "since=2026-03-01T13:02:00%2B01:00&who=amy", []string{"m2", "m6"}},
	} {
		for _, limit := range []int{1, 2, 100} {
			docs, pages := f.auditDocs(tc.tenant, tc.query, limit)
			if got := targets(docs); !cmp.Equal(got, tc.want) {
				t.Errorf("GET /v1/audit?%s in %s, pages of %d = %v, want %v", tc.query, tc.tenant, limit, got, tc.want)
			}
			if limit == 1 && pages < len(tc.want) {
				t.Errorf("GET /v1/audit?%s in %s, pages of 1: %d pages for %d entries", tc.query, tc.tenant, pages, len(tc.want))
			}
			for _, d := range docs {
				if d.Account != tc.tenant {
					t.Errorf("GET /v1/audit in %s answered a document of %q", tc.tenant, d.Account)
				}
			}
		}
	}

	// A drop drops the caller's tenant's entries and is audited in it;
	// the other tenants' entries stay (the scheduler's
	// TestAuditDropTenant checks them; the fixture's callers act in one
	// tenant).
	var all []api.AuditEntry
	f.asTenant(testTenant, "owner", "GET", "/v1/audit?limit=1000", "", 200, &all)
	before := all[len(all)-1].Seq + 1
	var ans api.AuditDropAnswer
	f.asTenant(testTenant, "owner", "POST", "/v1/audit/drop", `{"before":`+strconv.FormatUint(before, 10)+`}`, 200, &ans)
	if ans.Dropped < 5 {
		t.Errorf("drop in %s = %d dropped, want at least the 5 seeded", testTenant, ans.Dropped)
	}
	if docs, _ := f.auditDocs(testTenant, "", 100); len(docs) != 1 || docs[0].Action != "audit.drop" {
		t.Errorf("%s after its drop = %+v, want only the drop's entry", testTenant, docs)
	}
	es, _, err := f.raw.AuditPage(ctx, api.AuditFilter{Tenant: "acct-b"}, 100, "")
	if err != nil || len(es) != 2 {
		t.Errorf("acct-b after %s's drop = %d entries, %v; want its 2", testTenant, len(es), err)
	}
}

// TestAuditBadQuery: a bad parameter is a 400 naming it.
func TestAuditBadQuery(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct{ query, param string }{
		{"since=yesterday", "since"},
		{"until=2026-03-01", "until"},
		{"since=2026-03-02T00:00:00Z&until=2026-03-01T00:00:00Z", "until"},
		{"who=" + strings.Repeat("w", 201), "who"},
		{"action=a%0Ab", "action"},
		{"after=x", "after"},
		{"limit=0", "limit"},
		{"cursor=x", "cursor"},
		{"cursor=" + encodeCursor("audit", position{store: "17"}), "cursor"},
		{"after=1&cursor=" + encodeCursor("audit", position{store: "1"}), "cursor"},
	} {
		w := f.asTenant(testTenant, "owner", "GET", "/v1/audit?"+tc.query, "", 400, nil)
		if !strings.Contains(w.Body.String(), tc.param) {
			t.Errorf("GET /v1/audit?%.40s = %s, want it to name %s", tc.query, w.Body, tc.param)
		}
	}
}
