package scheduler

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/cluster"
)

// raw returns s as a JSON value; "" is none (nil, encoded as null).
func raw(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

func put(kind, id string, version uint64, value string) RecordPut {
	return RecordPut{Kind: kind, ID: id, Version: version, Value: raw(value), At: at(1)}
}

func del(kind, id string, version uint64) RecordDelete {
	return RecordDelete{Kind: kind, ID: id, Version: version, At: at(1)}
}

func audit(entry string, sec int) AuditAppend {
	return AuditAppend{Entry: raw(entry), At: at(sec)}
}

// TestRecordCommandTypes pins the numbers and names of the record store's
// log entry types, which are in every stored Raft log.
func TestRecordCommandTypes(t *testing.T) {
	for n, c := range map[cluster.CommandType]cluster.Command{16: RecordPut{}, 17: RecordDelete{}, 18: AuditAppend{}, 24: AuditDrop{}, 27: AuditDropTenant{}} {
		if c.CommandType() != n || c.CommandType().Ignorable() {
			t.Errorf("%T.CommandType() = %d, want %d, not ignorable", c, c.CommandType(), n)
		}
		want := map[cluster.CommandType]string{16: "record_put", 17: "record_delete", 18: "audit_append", 24: "audit_drop", 27: "audit_drop_tenant"}[n]
		if got := n.String(); got != want {
			t.Errorf("CommandType(%d).String() = %q, want %q", n, got, want)
		}
	}
}

// TestApplyRecords applies a history of puts and deletes; each step says
// the business error it must meet, or the record it must leave.
func TestApplyRecords(t *testing.T) {
	f := newTestFSM(t)
	for _, tc := range []struct {
		name    string
		cmd     cluster.Command
		wantErr error
		msg     string
		// want is the record users/u1 afterwards (nil: absent).
		want *Record
	}{
		{name: "create", cmd: put("users", "u1", 0, `{"name":"ann"}`),
			want: &Record{Kind: "users", ID: "u1", Version: 1, Value: json.RawMessage(`{"name":"ann"}`), ModifyIndex: 1}},
		{name: "create again", cmd: put("users", "u1", 0, `{"name":"bob"}`), wantErr: ErrExists,
			msg:  "record users/u1: version 0 creates, but the record exists at version 1",
			want: &Record{Kind: "users", ID: "u1", Version: 1, Value: json.RawMessage(`{"name":"ann"}`), ModifyIndex: 1}},
		{name: "cas ok", cmd: put("users", "u1", 1, `{"name":"ann","age":3}`),
			want: &Record{Kind: "users", ID: "u1", Version: 2, Value: json.RawMessage(`{"name":"ann","age":3}`), ModifyIndex: 3}},
		{name: "cas stale", cmd: put("users", "u1", 1, `{"name":"eve"}`), wantErr: ErrVersionMismatch,
			msg:  "put names version 1, but the current version is 2",
			want: &Record{Kind: "users", ID: "u1", Version: 2, Value: json.RawMessage(`{"name":"ann","age":3}`), ModifyIndex: 3}},
		{name: "cas ahead", cmd: put("users", "u1", 7, `{}`), wantErr: ErrVersionMismatch, msg: "the current version is 2",
			want: &Record{Kind: "users", ID: "u1", Version: 2, Value: json.RawMessage(`{"name":"ann","age":3}`), ModifyIndex: 3}},
		{name: "put missing with a version", cmd: put("users", "u9", 1, `{}`), wantErr: ErrVersionMismatch, msg: "does not exist",
			want: &Record{Kind: "users", ID: "u1", Version: 2, Value: json.RawMessage(`{"name":"ann","age":3}`), ModifyIndex: 3}},
		{name: "same id, other kind", cmd: put("keys", "u1", 0, `"a string is a document"`),
			want: &Record{Kind: "users", ID: "u1", Version: 2, Value: json.RawMessage(`{"name":"ann","age":3}`), ModifyIndex: 3}},
		{name: "delete stale", cmd: del("users", "u1", 1), wantErr: ErrVersionMismatch,
			msg:  "delete names version 1, but the current version is 2",
			want: &Record{Kind: "users", ID: "u1", Version: 2, Value: json.RawMessage(`{"name":"ann","age":3}`), ModifyIndex: 3}},
		{name: "delete version 0", cmd: del("users", "u1", 0), wantErr: ErrInvalid,
			want: &Record{Kind: "users", ID: "u1", Version: 2, Value: json.RawMessage(`{"name":"ann","age":3}`), ModifyIndex: 3}},
		{name: "delete", cmd: del("users", "u1", 2)},
		{name: "delete again", cmd: del("users", "u1", 2), wantErr: ErrNotFound, msg: "record users/u1: not found"},
		{name: "create after delete", cmd: put("users", "u1", 0, `[1,2]`),
			want: &Record{Kind: "users", ID: "u1", Version: 1, Value: json.RawMessage(`[1,2]`), ModifyIndex: 12}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := f.apply(t, tc.cmd)
			err, _ := res.(error)
			checkErr(t, "apply "+tc.cmd.CommandType().String(), err, tc.wantErr)
			if err != nil && !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("apply %s = %q, want it to say %q", tc.cmd.CommandType().String(), err, tc.msg)
			}
			if p, ok := tc.cmd.(RecordPut); ok && err == nil {
				r, ok := res.(*Record)
				if !ok || r.Kind != p.Kind || r.ID != p.ID || r.Version != p.Version+1 || r.ModifyIndex != f.idx {
					t.Errorf("apply record_put = %#v, want the stored record", res)
				}
			}
			got, ok := f.State().Record("users", "u1")
			if tc.want == nil && ok {
				t.Errorf("Record(users, u1) = %+v, want none", got)
			}
			if tc.want != nil && !cmp.Equal(got, *tc.want) {
				t.Errorf("Record(users, u1) = %+v, want %+v", got, *tc.want)
			}
			if f.State().Index() != f.idx {
				t.Errorf("Index() = %d, want %d: a refused command is still applied", f.State().Index(), f.idx)
			}
		})
	}
}

// TestApplyRecordsInvalid: bad kinds, ids and values are refused with
// ErrInvalid, and the reserved kind "audit" cannot be put or deleted.
func TestApplyRecordsInvalid(t *testing.T) {
	f := newTestFSM(t)
	for _, tc := range []struct {
		name string
		cmd  cluster.Command
		msg  string
	}{
		{"put audit", put("audit", "1", 0, `{}`), `kind "audit" is reserved`},
		{"delete audit", del("audit", "1", 1), `kind "audit" is reserved`},
		{"empty kind", put("", "x", 0, `{}`), "record kind"},
		{"upper-case kind", put("Users", "x", 0, `{}`), `record kind "Users"`},
		{"kind with a dot", put("a.b", "x", 0, `{}`), "record kind"},
		{"kind too long", put(strings.Repeat("k", 33), "x", 0, `{}`), "1-32 characters"},
		{"empty id", put("users", "", 0, `{}`), "record id: empty"},
		{"id too long", put("users", strings.Repeat("i", 201), 0, `{}`), "201 bytes, at most 200"},
		{"id with a slash", put("users", "a/b", 0, `{}`), "without '/'"},
		{"id with a newline", put("users", "a\nb", 0, `{}`), "printable ASCII"},
		{"id not ascii", put("users", "zoë", 0, `{}`), "printable ASCII"},
		{"id dot-dot", put("users", "..", 0, `{}`), "no URL path"},
		{"delete bad id", del("users", "a/b", 1), "without '/'"},
		{"no value", put("users", "x", 0, ``), "value: null"},
		{"null value", put("users", "x", 0, `null`), "value: null"},
		{"value too large", put("users", "x", 0, `"`+strings.Repeat("v", maxRecordValue)+`"`), "at most 262144"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := f.applyErr(t, tc.cmd)
			checkErr(t, "apply "+tc.cmd.CommandType().String(), err, ErrInvalid)
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("apply %s = %q, want it to say %q", tc.cmd.CommandType().String(), err, tc.msg)
			}
		})
	}
	if n := f.State().RecordCount(); n != 0 {
		t.Errorf("RecordCount() after refused commands = %d, want 0", n)
	}
	// The largest value and the longest id pass.
	f.mustApply(t, put("users", strings.Repeat("i", 200), 0, `"`+strings.Repeat("v", maxRecordValue-2)+`"`),
		put("users", " !~", 0, `{}`))
}

func TestApplyAudit(t *testing.T) {
	f := newTestFSM(t)
	res := f.apply(t, audit(`{"who":"a"}`, 5))
	if e, ok := res.(*AuditEntry); !ok || e.Seq != 1 || !e.Time.Equal(at(5)) || string(e.Entry) != `{"who":"a"}` {
		t.Fatalf("apply audit_append = %#v, want entry 1 at the command's time", res)
	}
	for _, tc := range []struct{ name, entry, msg string }{
		{"none", ``, "want a JSON object, got null"},
		{"not an object", `[1]`, "want a JSON object"},
		{"a string", `"x"`, "want a JSON object"},
		{"too large", `{"a":"` + strings.Repeat("x", maxAuditEntry) + `"}`, "at most 65536"},
	} {
		err := f.applyErr(t, audit(tc.entry, 6))
		checkErr(t, "apply audit_append("+tc.name+")", err, ErrInvalid)
		if !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("apply audit_append(%s) = %q, want it to say %q", tc.name, err, tc.msg)
		}
	}
	f.mustApply(t, audit(`{"who":"b"}`, 7), audit(`{"who":"c"}`, 8))

	st := f.State()
	seqs := func(es []AuditEntry) []uint64 {
		out := []uint64{}
		for _, e := range es {
			out = append(out, e.Seq)
		}
		return out
	}
	for _, tc := range []struct {
		after uint64
		limit int
		want  []uint64
	}{
		{0, 100, []uint64{1, 2, 3}},
		{1, 100, []uint64{2, 3}},
		{0, 2, []uint64{1, 2}},
		{3, 100, []uint64{}},
		{99, 100, []uint64{}},
		{0, 0, []uint64{}},
	} {
		if got := seqs(st.Audit(tc.after, tc.limit)); !cmp.Equal(got, tc.want) {
			t.Errorf("Audit(%d, %d) = %v, want %v", tc.after, tc.limit, got, tc.want)
		}
	}
	if got := st.AuditSeq(); got != 3 {
		t.Errorf("AuditSeq() = %d, want 3", got)
	}
	// Reads return copies.
	got := st.Audit(0, 1)
	got[0].Entry[2] = 'X'
	if again := st.Audit(0, 1); string(again[0].Entry) != `{"who":"a"}` {
		t.Errorf("Audit() shares memory with the state: %s", again[0].Entry)
	}
}

func TestRecordsListAndCopies(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, put("sessions", "s-b", 0, `{}`), put("sessions", "s-a", 0, `{}`), put("sessions", "t-1", 0, `{}`),
		put("keys", "s-z", 0, `{"v":1}`))
	ids := func(rs []Record) []string {
		out := []string{}
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}
	for _, tc := range []struct {
		kind, prefix string
		want         []string
	}{
		{"sessions", "", []string{"s-a", "s-b", "t-1"}},
		{"sessions", "s-", []string{"s-a", "s-b"}},
		{"sessions", "nope", []string{}},
		{"none", "", []string{}},
		{"keys", "", []string{"s-z"}},
	} {
		if got := ids(f.State().Records(tc.kind, tc.prefix)); !cmp.Equal(got, tc.want) {
			t.Errorf("Records(%s, %q) = %v, want %v", tc.kind, tc.prefix, got, tc.want)
		}
	}
	r, _ := f.State().Record("keys", "s-z")
	r.Value[2] = 'X'
	if again, _ := f.State().Record("keys", "s-z"); string(again.Value) != `{"v":1}` {
		t.Errorf("Record() shares memory with the state: %s", again.Value)
	}
}

// TestRecordsSnapshotRestore: records and the audit log survive a
// snapshot, and what is applied after the snapshot stays out of it.
func TestRecordsSnapshotRestore(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, mixedHistory()...)
	f.mustApply(t, put("users", "u1", 0, `{"a":1}`), put("users", "u2", 0, `{}`), put("users", "u1", 1, `{"a":2}`),
		put("keys", "k1", 0, `{}`), del("users", "u2", 1), audit(`{"n":1}`, 1), audit(`{"n":2}`, 2))
	data := persist(t, f.FSM)
	f.mustApply(t, audit(`{"n":3}`, 3), put("users", "u3", 0, `{}`))
	if bytes.Contains(data, []byte(`"n":3`)) || bytes.Contains(data, []byte(`"u3"`)) {
		t.Fatalf("the snapshot holds what was applied after it:\n%s", data)
	}

	g := newTestFSM(t)
	if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	g.idx = f.idx - 2
	g.mustApply(t, audit(`{"n":3}`, 3), put("users", "u3", 0, `{}`))

	fs, gs := f.State(), g.State()
	for _, kind := range []string{"users", "keys"} {
		if diff := cmp.Diff(fs.Records(kind, ""), gs.Records(kind, "")); diff != "" {
			t.Errorf("records of %s after restore (-orig +restored):\n%s", kind, diff)
		}
	}
	if diff := cmp.Diff(fs.Audit(0, 100), gs.Audit(0, 100)); diff != "" {
		t.Errorf("audit after restore (-orig +restored):\n%s", diff)
	}
	if gs.AuditSeq() != 3 || gs.RecordCount() != 3 {
		t.Errorf("after restore: audit seq %d, %d records; want 3, 3", gs.AuditSeq(), gs.RecordCount())
	}
	if a, b := persist(t, f.FSM), persist(t, g.FSM); !bytes.Equal(a, b) {
		t.Errorf("snapshots differ after the same entries:\n%s\n%s", a, b)
	}
	// A snapshot from before the record store restores to an empty one.
	old := newTestFSM(t)
	if err := old.Restore(io.NopCloser(strings.NewReader(`{"version":1,"index":3,"nodes":[],"steps":[]}`))); err != nil {
		t.Fatal(err)
	}
	old.idx = 3
	old.mustApply(t, audit(`{}`, 1))
	if got := old.State().AuditSeq(); got != 1 {
		t.Errorf("first audit entry after restoring an old snapshot has seq %d, want 1", got)
	}
}

// TestApplyRestoreKeepsRecords: an operator's restore (cluster.Restore)
// replaces nodes and steps, never records or audit entries.
func TestApplyRestoreKeepsRecords(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, put("users", "u1", 0, `{}`), audit(`{"n":1}`, 1))
	doc := f.FSM.document()
	if len(doc.Records) != 1 || len(doc.Audit) != 1 {
		t.Fatalf("document() = %d records, %d audit entries; want 1, 1", len(doc.Records), len(doc.Audit))
	}
	f.mustApply(t, put("users", "u1", 1, `{"later":true}`), audit(`{"n":2}`, 2))
	f.mustApply(t, cluster.Restore{At: at(9)})
	if r, _ := f.State().Record("users", "u1"); r.Version != 2 {
		t.Errorf("Record(users, u1) after a restore = %+v, want version 2 kept", r)
	}
	if got := f.State().AuditSeq(); got != 2 {
		t.Errorf("AuditSeq() after a restore = %d, want 2 kept", got)
	}
}

// TestSnapshotWhileAppending persists a snapshot while entries are
// appended to the audit log and records put: it holds what was there when
// it was taken, nothing later.
func TestSnapshotWhileAppending(t *testing.T) {
	f := newTestFSM(t)
	for i := range 50 {
		f.mustApply(t, audit(fmt.Sprintf(`{"n":%d}`, i), i), put("runs", fmt.Sprintf("r%02d", i), 0, `{}`))
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var sink memSink
	done := make(chan error, 1)
	go func() { done <- snap.Persist(&sink) }()
	for i := 50; i < 100; i++ {
		f.mustApply(t, audit(fmt.Sprintf(`{"n":%d}`, i), i), put("runs", fmt.Sprintf("r%02d", i-50), 1, `{"v":2}`))
	}
	if err := <-done; err != nil {
		t.Fatalf("Persist() = %v", err)
	}
	var d snapshotData
	if err := json.Unmarshal(sink.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Audit) != 50 || d.Audit[49].Seq != 50 || len(d.Records) != 50 || d.Records[0].Version != 1 {
		t.Errorf("snapshot: %d audit entries (last %+v), %d records (first %+v); want 50 up to seq 50, 50 at version 1",
			len(d.Audit), d.Audit[len(d.Audit)-1], len(d.Records), d.Records[0])
	}
}
