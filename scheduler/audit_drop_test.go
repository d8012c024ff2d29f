package scheduler

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/scheduler/client"
)

func auditSeqs(es []AuditEntry) []uint64 {
	out := []uint64{}
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

func TestApplyAuditDrop(t *testing.T) {
	f := newTestFSM(t)
	for i := range 5 {
		f.mustApply(t, audit(`{"n":1}`, i))
	}
	snap := persist(t, f.FSM)
	res := f.apply(t, AuditDrop{Before: 4, By: json.RawMessage(`{"who":"owner-1"}`), At: at(10)})
	d, ok := res.(*AuditDropResult)
	if !ok || d.Dropped != 3 || d.Entry.Seq != 6 {
		t.Fatalf("audit_drop = %#v, want 3 dropped and entry 6", res)
	}
	want := `{"action":"audit.drop","before":4,"dropped":3,"by":{"who":"owner-1"}}`
	if string(d.Entry.Entry) != want || !d.Entry.Time.Equal(at(10)) {
		t.Errorf("drop entry = %s at %v, want %s at %v", d.Entry.Entry, d.Entry.Time, want, at(10))
	}
	st := f.State()
	if got := auditSeqs(st.Audit(0, 100)); !cmp.Equal(got, []uint64{4, 5, 6}) {
		t.Errorf("audit after the drop = %v, want 4 5 6", got)
	}
	// The sequence goes on, also after dropping everything.
	f.mustApply(t, AuditDrop{Before: 7, At: at(11)}, audit(`{"n":2}`, 12))
	if got := auditSeqs(st.Audit(0, 100)); !cmp.Equal(got, []uint64{7, 8}) || st.AuditSeq() != 8 {
		t.Errorf("audit after dropping all = %v (seq %d), want 7 8", got, st.AuditSeq())
	}
	// A snapshot taken before still holds what it held.
	if !bytes.Contains(snap, []byte(`"seq":1`)) {
		t.Errorf("the snapshot before the drop lost entry 1")
	}
	g := newTestFSM(t)
	if err := g.Restore(io.NopCloser(bytes.NewReader(persist(t, f.FSM)))); err != nil {
		t.Fatal(err)
	}
	if got := auditSeqs(g.State().Audit(0, 100)); !cmp.Equal(got, []uint64{7, 8}) {
		t.Errorf("audit after restore = %v, want 7 8", got)
	}
	for _, bad := range []AuditDrop{{Before: 0}, {Before: 10}, {Before: 8, By: json.RawMessage(`null`)},
		{Before: 8, By: json.RawMessage(`"` + strings.Repeat("x", maxAuditBy) + `"`)}} {
		checkErr(t, "bad drop", f.applyErr(t, bad), ErrInvalid)
	}
	if got := auditSeqs(st.Audit(0, 100)); !cmp.Equal(got, []uint64{7, 8}) {
		t.Errorf("a refused drop changed the audit log: %v", got)
	}
}

// TestDropAudit drops old audit entries through the route and the client.
func TestDropAudit(t *testing.T) {
	c := newServerCluster(t, 3, nil)
	cl := c.client(c.follower())
	ctx := t.Context()
	for range 5 {
		if _, err := cl.AppendAudit(ctx, json.RawMessage(`{"who":"ann"}`)); err != nil {
			t.Fatal(err)
		}
	}
	n, err := cl.DropAudit(ctx, 4, json.RawMessage(`{"who":"acct-1","role":"owner"}`))
	if err != nil || n != 3 {
		t.Fatalf("DropAudit(4) = %d, %v; want 3", n, err)
	}
	es, err := cl.Audit(ctx, 0, 0)
	if err != nil || len(es) != 3 || es[0].Seq != 4 || es[2].Seq != 6 {
		t.Fatalf("Audit() after the drop = %+v, %v; want entries 4 to 6", es, err)
	}
	var doc map[string]any
	if err := json.Unmarshal(es[2].Entry, &doc); err != nil || doc["action"] != "audit.drop" || doc["dropped"] != 3.0 ||
		doc["before"] != 4.0 || doc["by"].(map[string]any)["who"] != "acct-1" {
		t.Errorf("drop entry = %s, want action audit.drop, before 4, dropped 3, by acct-1", es[2].Entry)
	}
	for _, bad := range []struct {
		before uint64
		by     string
		msg    string
	}{
		{0, "", `field "before"`},
		{100, "", "the last entry is 6"},
		{1, `"` + strings.Repeat("x", maxAuditBy) + `"`, `field "by"`},
	} {
		_, err := cl.DropAudit(ctx, bad.before, json.RawMessage(bad.by))
		if !client.IsCode(err, api.CodeBadRequest) || !strings.Contains(err.Error(), bad.msg) {
			t.Errorf("DropAudit(%d, %.20s) = %v, want 400 naming %q", bad.before, bad.by, err, bad.msg)
		}
	}
	if es, _ := cl.Audit(ctx, 0, 0); len(es) != 3 {
		t.Errorf("refused drops changed the audit log: %d entries, want 3", len(es))
	}
}
