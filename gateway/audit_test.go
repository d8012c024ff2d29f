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
		{"acct-a", "ann", "run.create", 0}, {"acct-b", "bob", "run.create", 1}, {"acct-a", "amy", "secret.set", 2},
		{"acct-a", "ann", "secret.set", 3}, {"acct-b", "ann", "secret.set", 4}, {"acct-a", "ann", "run.create", 5},
		{"acct-a", "amy", "run.create", 6},
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
			out = append(out, d.Target)
		}
		return out
	}
	for _, tc := range []struct {
		tenant, query string
		want          []string
	}{
		{"acct-a", "", []string{"m0", "m2", "m3", "m5", "m6"}},
		{"acct-b", "", []string{"m1", "m4"}},
		{"acct-c", "", []string{}},
		{"acct-a", "who=ann", []string{"m0", "m3", "m5"}},
		{"acct-b", "who=ann", []string{"m4"}},
		{"acct-a", "action=secret.set", []string{"m2", "m3"}},
		{"acct-a", "who=ann&action=run.create", []string{"m0", "m5"}},
		{"acct-a", "since=2026-03-01T12:03:00Z", []string{"m3", "m5", "m6"}},
		{"acct-a", "until=2026-03-01T12:03:00Z", []string{"m0", "m2"}},
		{"acct-a", "since=2026-03-01T12:01:00Z&until=2026-03-01T12:05:00%2B00:00", []string{"m2", "m3"}},
		{"acct-a", "since=2026-03-01T13:02:00%2B01:00&who=amy", []string{"m2", "m6"}},
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

	// What the gateway audits names the tenant of the call.
	f.asTenant("acct-b", "editor", "POST", "/v1/sessions", `{"workspace":"ws-main","title":"in b"}`, 201, nil)
	docs, _ := f.auditDocs("acct-b", "action=session.create", 100)
	if len(docs) != 1 || docs[0].Account != "acct-b" || docs[0].Who == "" {
		t.Fatalf("acct-b's session.create entries = %+v, want one of acct-b naming its author", docs)
	}
	if docs, _ := f.auditDocs("acct-a", "action=session.create", 100); len(docs) != 0 {
		t.Errorf("acct-a sees acct-b's session.create: %+v", docs)
	}

	// A drop drops only the caller's tenant's entries, and is audited in it.
	var all []api.AuditEntry
	f.asTenant("acct-a", "owner", "GET", "/v1/audit?limit=1000", "", 200, &all)
	before := all[len(all)-1].Seq + 1
	var ans api.AuditDropAnswer
	f.asTenant("acct-a", "owner", "POST", "/v1/audit/drop", `{"before":`+strconv.FormatUint(before, 10)+`}`, 200, &ans)
	if ans.Dropped != 5 {
		t.Errorf("drop in acct-a = %d dropped, want 5", ans.Dropped)
	}
	if docs, _ := f.auditDocs("acct-a", "", 100); len(docs) != 1 || docs[0].Action != "audit.drop" {
		t.Errorf("acct-a after its drop = %+v, want only the drop's entry", docs)
	}
	var drop []api.AuditEntry
	f.asTenant("acct-a", "owner", "GET", "/v1/audit?action=audit.drop", "", 200, &drop)
	if len(drop) != 1 || drop[0].Who == "" || !strings.Contains(string(drop[0].Entry), `"account":"acct-a"`) {
		t.Errorf("drop entry = %+v, want one naming its author and acct-a", drop)
	}
	if docs, _ := f.auditDocs("acct-b", "", 100); len(docs) != 3 || !cmp.Equal(targets(docs[:2]), []string{"m1", "m4"}) || docs[2].Action != "session.create" {
		t.Errorf("acct-b after acct-a's drop = %+v, want m1 m4 and its session.create", docs)
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
		w := f.asTenant("acct-a", "owner", "GET", "/v1/audit?"+tc.query, "", 400, nil)
		if !strings.Contains(w.Body.String(), tc.param) {
			t.Errorf("GET /v1/audit?%.40s = %s, want it to name %s", tc.query, w.Body, tc.param)
		}
	}
}
