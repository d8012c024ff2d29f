package scheduler

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// tenantAudit is an entry of tenant by who doing action at t0+sec.
func tenantAudit(tenant, who, action string, sec int) AuditAppend {
	doc, _ := json.Marshal(map[string]string{"account": tenant, "who": who, "action": action})
	return AuditAppend{Entry: doc, Tenant: tenant, Who: who, Action: action, At: at(sec)}
}

// auditHistory is the log of TestAuditTenants: entries 1-9 of tenants
// acct-a and acct-b and of none (before tenants), interleaved.
func auditHistory() []cluster.Command {
	return []cluster.Command{
		audit(`{"who":"legacy"}`, 0),                              // 1
		tenantAudit("acct-a", "ann", "run.create", 1),             // 2
		tenantAudit("acct-b", "bob", "run.create", 2),             // 3
		tenantAudit("acct-a", "amy", "secret.set", 3),             // 4
		tenantAudit("acct-b", "bob", "secret.set", 4),             // 5
		tenantAudit("acct-a", "ann", "secret.set", 5),             // 6
		tenantAudit("acct-a", "ann", "run.create", 6),             // 7
		tenantAudit("acct-b", "ann", "run.create", 7),             // 8: an "ann" of b
		AuditAppend{Entry: raw(`{"op":1}`), Who: "op", At: at(8)}, // 9: the operator's
	}
}

// allAudit reads every page of f, each with limit and budget, and fails
// t if a page holds more than limit or its next goes back.
func allAudit(t *testing.T, st *State, f AuditFilter, limit, budget int) []uint64 {
	t.Helper()
	var got []uint64
	after := uint64(0)
	for range 100 {
		es, next, more := st.auditPage(f, after, limit, budget)
		if len(es) > limit {
			t.Fatalf("auditPage(%+v, %d, %d) = %d entries", f, after, limit, len(es))
		}
		if next < after {
			t.Fatalf("auditPage(%+v, %d) next = %d, went back", f, after, next)
		}
		got = append(got, auditSeqs(es)...)
		if !more {
			return got
		}
		after = next
	}
	t.Fatalf("auditPage(%+v) never ended", f)
	return nil
}

// TestAuditTenants: a tenant's listing holds its entries only, however
// filtered and paged.
func TestAuditTenants(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, auditHistory()...)
	st := f.State()
	for _, tc := range []struct {
		name string
		f    AuditFilter
		want []uint64
	}{
		{"tenant a", AuditFilter{Tenant: "acct-a"}, []uint64{2, 4, 6, 7}},
		{"tenant b", AuditFilter{Tenant: "acct-b"}, []uint64{3, 5, 8}},
		{"no tenant", AuditFilter{}, []uint64{1, 9}},
		{"unknown tenant", AuditFilter{Tenant: "acct-c"}, nil},
		{"every tenant", AuditFilter{AllTenants: true}, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9}},
		{"who", AuditFilter{Tenant: "acct-a", Who: "ann"}, []uint64{2, 6, 7}},
		{"who of another tenant", AuditFilter{Tenant: "acct-b", Who: "ann"}, []uint64{8}},
		{"action", AuditFilter{Tenant: "acct-a", Action: "secret.set"}, []uint64{4, 6}},
		{"who and action", AuditFilter{Tenant: "acct-a", Who: "ann", Action: "run.create"}, []uint64{2, 7}},
		{"since", AuditFilter{Tenant: "acct-a", Since: at(5)}, []uint64{6, 7}},
		{"until", AuditFilter{Tenant: "acct-a", Until: at(5)}, []uint64{2, 4}},
		{"since and until", AuditFilter{Tenant: "acct-a", Since: at(3), Until: at(6)}, []uint64{4, 6}},
		{"every tenant by who", AuditFilter{AllTenants: true, Who: "ann"}, []uint64{2, 6, 7, 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, pg := range []struct{ limit, budget int }{{100, auditScanBudget}, {1, auditScanBudget}, {2, 1}, {1, 2}, {3, 3}} {
				if got := allAudit(t, st, tc.f, pg.limit, pg.budget); !cmp.Equal(got, tc.want) {
					t.Errorf("pages of %d, budget %d: AuditPage(%+v) = %v, want %v", pg.limit, pg.budget, tc.f, got, tc.want)
				}
			}
		})
	}
	// A page examines at most its budget: with none matching, it is
	// empty and still has a next.
	es, next, more := st.auditPage(AuditFilter{AllTenants: true, Who: "nobody"}, 0, 10, 4)
	if len(es) != 0 || next != 4 || !more {
		t.Errorf("auditPage(nobody, budget 4) = %v, next %d, more %v; want none, next 4, more", auditSeqs(es), next, more)
	}
	// The entry keeps its typed fields.
	es, _, _ = st.AuditPage(AuditFilter{Tenant: "acct-b"}, 7, 1)
	if len(es) != 1 || es[0].Tenant != "acct-b" || es[0].Who != "ann" || es[0].Action != "run.create" || !es[0].Time.Equal(at(7)) {
		t.Errorf("AuditPage(acct-b, after 7) = %+v, want entry 8 of acct-b, ann, run.create", es)
	}
}

// TestAuditDropTenant: a tenant's drop leaves every other tenant's entries
// and is itself an entry of that tenant; snapshots keep the tenants.
func TestAuditDropTenant(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, auditHistory()...)
	before := persist(t, f.FSM)
	res := f.apply(t, AuditDropTenant{Tenant: "acct-a", Before: 7, Who: "amy", By: raw(`{"who":"amy","role":"owner"}`), At: at(20)})
	d, ok := res.(*AuditDropResult)
	if !ok || d.Dropped != 3 {
		t.Fatalf("audit_drop_tenant = %#v, want 3 dropped", res)
	}
	wantEntry := AuditEntry{Seq: 10, Time: at(20), Tenant: "acct-a", Who: "amy", Action: "audit.drop",
		Entry: raw(`{"action":"audit.drop","before":7,"dropped":3,"by":{"who":"amy","role":"owner"}}`)}
	if diff := cmp.Diff(wantEntry, d.Entry); diff != "" {
		t.Errorf("drop entry (-want +got):\n%s", diff)
	}
	st := f.State()
	check := func(st *State, when string) {
		t.Helper()
		for _, tc := range []struct {
			f    AuditFilter
			want []uint64
		}{
			{AuditFilter{Tenant: "acct-a"}, []uint64{7, 10}},
			{AuditFilter{Tenant: "acct-b"}, []uint64{3, 5, 8}},
			{AuditFilter{}, []uint64{1, 9}},
			{AuditFilter{AllTenants: true}, []uint64{1, 3, 5, 7, 8, 9, 10}},
			{AuditFilter{Tenant: "acct-a", Action: "audit.drop", Who: "amy"}, []uint64{10}},
		} {
			if got := allAudit(t, st, tc.f, 2, 2); !cmp.Equal(got, tc.want) {
				t.Errorf("%s: AuditPage(%+v) = %v, want %v", when, tc.f, got, tc.want)
			}
		}
	}
	check(st, "after the drop")
	if !bytes.Contains(before, []byte(`"seq":2,`)) {
		t.Errorf("the snapshot before the drop lost entry 2")
	}

	// The snapshot carries the tenants: a restored member lists the same,
	// and its next snapshot is the same bytes.
	data := persist(t, f.FSM)
	if !bytes.Contains(data, []byte(`"tenant":"acct-b","who":"bob","action":"secret.set"`)) {
		t.Errorf("snapshot lacks the typed fields:\n%s", data)
	}
	g := newTestFSM(t)
	if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	check(g.State(), "after restore")
	if again := persist(t, g.FSM); !bytes.Equal(again, data) {
		t.Errorf("snapshot after restore differs:\n%s\n%s", data, again)
	}
	// The restored member goes on as the original: a drop of acct-b there
	// and here ends the same.
	g.idx = f.idx
	drop := AuditDropTenant{Tenant: "acct-b", Before: 11, Who: "bob", At: at(21)}
	f.mustApply(t, drop)
	g.mustApply(t, drop)
	if a, b := persist(t, f.FSM), persist(t, g.FSM); !bytes.Equal(a, b) {
		t.Errorf("snapshots differ after the same drop:\n%s\n%s", a, b)
	}
	if got := allAudit(t, g.State(), AuditFilter{AllTenants: true}, 100, 100); !cmp.Equal(got, []uint64{1, 7, 9, 10, 11}) {
		t.Errorf("after dropping acct-b: %v, want 1 7 9 10 11", got)
	}

	// Nothing to drop is still recorded; refused drops change nothing.
	if d := f.apply(t, AuditDropTenant{Tenant: "acct-c", Before: 5, Who: "cy", At: at(22)}).(*AuditDropResult); d.Dropped != 0 || d.Entry.Tenant != "acct-c" {
		t.Errorf("drop of a tenant with no entries = %+v, want 0 dropped, an entry of acct-c", d)
	}
	for _, bad := range []AuditDropTenant{
		{Tenant: "acct-a", Before: 0},
		{Tenant: "acct-a", Before: 100},
		{Tenant: "acct-a", Before: 5, By: raw(`null`)},
		{Tenant: "acct-a", Before: 5, Who: "a\nb"},
		{Tenant: strings.Repeat("x", maxAuditField+1), Before: 5},
	} {
		checkErr(t, "bad drop", f.applyErr(t, bad), ErrInvalid)
	}
	if got := allAudit(t, f.State(), AuditFilter{AllTenants: true}, 100, 100); !cmp.Equal(got, []uint64{1, 7, 9, 10, 11, 12}) {
		t.Errorf("after refused drops: %v, want 1 7 9 10 11 12", got)
	}
}

// TestApplyAuditFieldsInvalid: the typed fields are bounded.
func TestApplyAuditFieldsInvalid(t *testing.T) {
	f := newTestFSM(t)
	for _, c := range []AuditAppend{
		{Entry: raw(`{}`), Tenant: strings.Repeat("t", maxAuditField+1)},
		{Entry: raw(`{}`), Who: "a\x00b"},
		{Entry: raw(`{}`), Action: "a\tb"},
	} {
		checkErr(t, "append", f.applyErr(t, c), ErrInvalid)
	}
	if n := f.State().AuditLen(); n != 0 {
		t.Errorf("refused appends left %d entries", n)
	}
}

// TestAuditTenantsHTTP: the same through the routes and the client:
// typed fields in, filters and cursors out, a drop of one tenant.
func TestAuditTenantsHTTP(t *testing.T) {
	c := newServerCluster(t, 3, nil)
	cl := c.client(c.follower())
	ctx := t.Context()
	for _, e := range []api.AppendAuditRequest{
		{Entry: raw(`{"n":1}`)},
		{Entry: raw(`{"n":2}`), Tenant: "acct-a", Who: "ann", Action: "run.create"},
		{Entry: raw(`{"n":3}`), Tenant: "acct-b", Who: "bob", Action: "run.create"},
		{Entry: raw(`{"n":4}`), Tenant: "acct-a", Who: "amy", Action: "secret.set"},
		{Entry: raw(`{"n":5}`), Tenant: "acct-a", Who: "ann", Action: "secret.set"},
	} {
		got, err := cl.AppendAuditEntry(ctx, e)
		if err != nil || got.Tenant != e.Tenant || got.Who != e.Who || got.Action != e.Action {
			t.Fatalf("AppendAuditEntry(%+v) = %+v, %v", e, got, err)
		}
	}
	seqs := func(es []api.AuditEntry) []uint64 {
		out := []uint64{}
		for _, e := range es {
			out = append(out, e.Seq)
		}
		return out
	}
	all := func(f api.AuditFilter, limit int) []uint64 {
		t.Helper()
		var out []uint64
		cursor := ""
		for range 20 {
			es, next, err := cl.AuditPage(ctx, f, limit, cursor)
			if err != nil {
				t.Fatalf("AuditPage(%+v, %q) = %v", f, cursor, err)
			}
			out = append(out, seqs(es)...)
			if next == "" {
				return out
			}
			cursor = next
		}
		t.Fatalf("AuditPage(%+v) never ended", f)
		return nil
	}
	for _, tc := range []struct {
		f    api.AuditFilter
		want []uint64
	}{
		{api.AuditFilter{Tenant: "acct-a"}, []uint64{2, 4, 5}},
		{api.AuditFilter{Tenant: "acct-b"}, []uint64{3}},
		{api.AuditFilter{}, []uint64{1}},
		{api.AuditFilter{AllTenants: true}, []uint64{1, 2, 3, 4, 5}},
		{api.AuditFilter{Tenant: "acct-a", Who: "ann"}, []uint64{2, 5}},
		{api.AuditFilter{Tenant: "acct-a", Action: "secret.set", After: 4}, []uint64{5}},
		{api.AuditFilter{Tenant: "acct-a", Until: time.Now().Add(-time.Hour)}, nil},
		{api.AuditFilter{Tenant: "acct-a", Since: time.Now().Add(-time.Hour)}, []uint64{2, 4, 5}},
	} {
		for _, limit := range []int{0, 1, 2} {
			if got := all(tc.f, limit); !cmp.Equal(got, tc.want) {
				t.Errorf("AuditPage(%+v), pages of %d = %v, want %v", tc.f, limit, got, tc.want)
			}
		}
	}
	// The old listing is every tenant's.
	if es, err := cl.Audit(ctx, 0, 0); err != nil || !cmp.Equal(seqs(es), []uint64{1, 2, 3, 4, 5}) {
		t.Errorf("Audit(0, 0) = %v, %v; want 1 to 5", seqs(es), err)
	}

	n, err := cl.DropTenantAudit(ctx, "acct-a", 5, "amy", raw(`{"who":"amy"}`))
	if err != nil || n != 2 {
		t.Fatalf("DropTenantAudit(acct-a, 5) = %d, %v; want 2", n, err)
	}
	if got := all(api.AuditFilter{Tenant: "acct-a"}, 0); !cmp.Equal(got, []uint64{5, 6}) {
		t.Errorf("acct-a after its drop = %v, want 5 6", got)
	}
	if got := all(api.AuditFilter{AllTenants: true}, 0); !cmp.Equal(got, []uint64{1, 3, 5, 6}) {
		t.Errorf("every tenant after acct-a's drop = %v, want 1 3 5 6", got)
	}
	if es, _, err := cl.AuditPage(ctx, api.AuditFilter{Tenant: "acct-a", Action: "audit.drop"}, 0, ""); err != nil || len(es) != 1 || es[0].Who != "amy" {
		t.Errorf("acct-a's drop entry = %+v, %v; want one by amy", es, err)
	}

	tooLong := strings.Repeat("t", maxAuditField+1)
	if _, err := cl.DropTenantAudit(ctx, tooLong, 1, "", nil); !client.IsCode(err, api.CodeBadRequest) || !strings.Contains(err.Error(), "tenant") {
		t.Errorf("DropTenantAudit(a long tenant) = %v, want 400 naming tenant", err)
	}
	if _, err := cl.AppendAuditEntry(ctx, api.AppendAuditRequest{Entry: raw(`{}`), Who: tooLong}); !client.IsCode(err, api.CodeBadRequest) || !strings.Contains(err.Error(), "who") {
		t.Errorf("AppendAuditEntry(a long who) = %v, want 400 naming who", err)
	}
}
