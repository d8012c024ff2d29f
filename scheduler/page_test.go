package scheduler

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

func stepIDs(steps []cluster.Step) []cluster.StepID {
	out := []cluster.StepID{}
	for _, s := range steps {
		out = append(out, s.ID)
	}
	return out
}

// pageAll reads every page of f, limit steps at a time.
func pageAll(st *State, f StepFilter, limit int) (ids []cluster.StepID, pages int) {
	var from StepCursor
	for {
		steps, next, more := st.StepsPage(f, from, limit)
		ids = append(ids, stepIDs(steps)...)
		pages++
		if !more {
			return ids, pages
		}
		from = next
	}
}

// TestStepsPage checks the ordered indexes of steps: every filter pages
// through exactly its steps, oldest first, and they follow every change of
// state and a snapshot restore.
func TestStepsPage(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t, register("n1", 64, 64*gib), register("n2", 64, 64*gib))
	var all []cluster.StepID
	want := map[StepFilter][]cluster.StepID{}
	for i := range 25 {
		id := cluster.StepID(fmt.Sprintf("s%02d", i))
		all = append(all, id)
		f.mustApply(t, submit(id, false))
		node := cluster.NodeID([]string{"n1", "n2"}[i%2])
		switch i % 5 {
		case 0: // queued
			want[StepFilter{State: cluster.StateQueued}] = append(want[StepFilter{State: cluster.StateQueued}], id)
			continue
		case 1, 2: // running
			f.mustApply(t, place(id, node), phase(id, node, 1, cluster.StateStarting), phase(id, node, 1, cluster.StateRunning))
			want[StepFilter{State: cluster.StateRunning}] = append(want[StepFilter{State: cluster.StateRunning}], id)
			want[StepFilter{State: cluster.StateRunning, Node: node}] = append(want[StepFilter{State: cluster.StateRunning, Node: node}], id)
		default: // exited
			f.mustApply(t, place(id, node), phase(id, node, 1, cluster.StateRunning), exit(id, node, 1, cluster.StateExited, 0))
			want[StepFilter{State: cluster.StateExited}] = append(want[StepFilter{State: cluster.StateExited}], id)
		}
		want[StepFilter{Node: node}] = append(want[StepFilter{Node: node}], id)
	}
	want[StepFilter{}] = all
	want[StepFilter{State: cluster.StateLost}] = nil
	want[StepFilter{Node: "n9"}] = nil
	// Indexes every step left (they stay, empty).
	want[StepFilter{State: cluster.StatePlaced}] = nil
	want[StepFilter{State: cluster.StateStarting, Node: "n1"}] = nil

	check := func(t *testing.T, st *State) {
		t.Helper()
		for f, ids := range want {
			for _, limit := range []int{1, 3, 100} {
				got, pages := pageAll(st, f, limit)
				if !cmp.Equal(got, ids, cmpEmpty) {
					t.Errorf("pages of %+v by %d = %v, want %v", f, limit, got, ids)
				}
				if wantPages := max(1, (len(ids)+limit-1)/limit); pages != wantPages {
					t.Errorf("pages of %+v by %d: %d pages, want %d", f, limit, pages, wantPages)
				}
			}
			if got := stepIDs(st.Steps(f)); !cmp.Equal(got, ids, cmpEmpty) {
				t.Errorf("Steps(%+v) = %v, want %v", f, got, ids)
			}
		}
		// The indexes hold each step's current record, not an earlier one.
		for _, s := range st.Steps(StepFilter{}) {
			if cur, _ := st.Step(s.ID); !cmp.Equal(s, cur) {
				t.Errorf("Steps() has %s as %s (index %d), the state has it %s (index %d)", s.ID, s.State, s.ModifyIndex, cur.State, cur.ModifyIndex)
			}
		}
	}
	check(t, f.State())

	// A snapshot restore builds the indexes again.
	g := newTestFSM(t)
	if err := g.Restore(io.NopCloser(bytes.NewReader(persist(t, f.FSM)))); err != nil {
		t.Fatal(err)
	}
	check(t, g.State())

	// A cursor past the end, and one of a step that is gone, still page.
	if steps, _, more := f.State().StepsPage(StepFilter{}, StepCursor{CreateIndex: 1 << 40}, 10); len(steps) != 0 || more {
		t.Errorf("page past the end = %v, %v; want nothing", stepIDs(steps), more)
	}
	s10 := f.step(t, "s10")
	steps, _, _ := f.State().StepsPage(StepFilter{}, StepCursor{CreateIndex: s10.CreateIndex, ID: "s0"}, 2)
	if got := stepIDs(steps); !cmp.Equal(got, []cluster.StepID{"s10", "s11"}) {
		t.Errorf("page from before s10 = %v, want s10 s11", got)
	}
}

var cmpEmpty = cmp.Comparer(func(a, b []cluster.StepID) bool {
	return len(a) == 0 && len(b) == 0 || cmp.Equal([]cluster.StepID(a), []cluster.StepID(b))
})

func TestRecordsPage(t *testing.T) {
	f := newTestFSM(t)
	for i := range 30 {
		f.mustApply(t, put("runs", fmt.Sprintf("r-%02d", i), 0, `{}`))
	}
	f.mustApply(t, put("runs", "a", 0, `{}`), put("runs", "z", 0, `{}`), put("keys", "r-00", 0, `{}`), del("runs", "r-05", 1))
	st := f.State()
	read := func(prefix string, limit int) (ids []string, pages int) {
		cursor := ""
		for {
			recs, next, more := st.RecordsPage("runs", prefix, cursor, limit)
			for _, r := range recs {
				ids = append(ids, r.ID)
			}
			pages++
			if !more {
				return ids, pages
			}
			cursor = next
		}
	}
	var want []string
	for i := range 30 {
		if i != 5 {
			want = append(want, fmt.Sprintf("r-%02d", i))
		}
	}
	for _, limit := range []int{1, 7, 1000} {
		if got, pages := read("r-", limit); !cmp.Equal(got, want) || pages != max(1, (len(want)+limit-1)/limit) {
			t.Errorf("pages of runs r- by %d = %v (%d pages), want %v", limit, got, pages, want)
		}
		if got, _ := read("", limit); !cmp.Equal(got, append(append([]string{"a"}, want...), "z")) {
			t.Errorf("pages of runs by %d = %v", limit, got)
		}
	}
	if recs, _, more := st.RecordsPage("nope", "", "", 10); len(recs) != 0 || more {
		t.Errorf("RecordsPage(nope) = %v, %v; want none", recs, more)
	}
}

// TestListPagination checks the page parameters and the X-Next-Cursor
// header on every list route of a running member.
func TestListPagination(t *testing.T) {
	c := newServerCluster(t, 1, nil)
	cl := c.client()
	ctx := t.Context()
	for i := range 5 {
		newAgent(t, cl, cluster.NodeID(fmt.Sprintf("n%d", i)), 1, gib)
	}
	for i := range 250 {
		if _, err := cl.PutRecord(ctx, "runs", fmt.Sprintf("run-%03d", i), 0, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.DrainNode(ctx, "n0", 0); err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		// Bound to a node that is draining: they stay queued.
		if _, err := cl.SubmitStep(ctx, api.StepRequest{ID: fmt.Sprintf("s%02d", i), Image: "base", Args: []string{"true"},
			CPU: 1, MemoryBytes: gib, Node: "n0"}); err != nil {
			t.Fatal(err)
		}
	}

	get := func(path string) (int, http.Header, string) {
		t.Helper()
		resp, err := (&http.Client{Transport: c.transport}).Get(c.members[0].url() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	count := func(body string) int { return strings.Count(body, `"id":`) }

	// The default page is 100; the last page has no X-Next-Cursor.
	status, h, body := get("/v1/records/runs")
	if status != 200 || count(body) != 100 || h.Get(NextCursorHeader) == "" {
		t.Fatalf("GET /v1/records/runs = %d, %d records, next %q; want 100 and a cursor", status, count(body), h.Get(NextCursorHeader))
	}
	status, h, body = get("/v1/records/runs?limit=200&cursor=" + h.Get(NextCursorHeader))
	if status != 200 || count(body) != 150 || h.Get(NextCursorHeader) != "" || !strings.Contains(body, `"run-100"`) {
		t.Errorf("second page = %d, %d records, next %q; want the 150 from run-100, no cursor", status, count(body), h.Get(NextCursorHeader))
	}
	// Over the maximum is capped.
	if _, _, body := get("/v1/records/runs?limit=5000"); count(body) != 250 {
		t.Errorf("limit=5000: %d records, want all 250 (capped at 1000)", count(body))
	}
	for _, p := range []string{"/v1/steps", "/v1/nodes", "/v1/members"} {
		status, h, body := get(p + "?limit=2")
		if status != 200 || count(body) != 2 && !(p == "/v1/members" && count(body) == 1) {
			t.Errorf("GET %s?limit=2 = %d %s", p, status, body)
		}
		if p != "/v1/members" && h.Get(NextCursorHeader) == "" {
			t.Errorf("GET %s?limit=2: no %s", p, NextCursorHeader)
		}
	}
	// Pages of steps through the client, filtered.
	var ids []string
	cursor := ""
	for pages := 1; ; pages++ {
		steps, next, err := cl.StepsPage(ctx, "queued", "", 5, cursor)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range steps {
			ids = append(ids, s.ID)
		}
		if next == "" {
			if pages != 3 {
				t.Errorf("%d pages of 12 queued steps by 5, want 3", pages)
			}
			break
		}
		cursor = next
	}
	if len(ids) != 12 || ids[0] != "s00" || ids[11] != "s11" {
		t.Errorf("paged queued steps = %v, want s00 to s11", ids)
	}
	if nodes, err := cl.Nodes(ctx); err != nil || len(nodes) != 5 {
		t.Errorf("Nodes() = %d nodes, %v; want 5", len(nodes), err)
	}

	// Bad parameters are 400s naming them; a cursor of another list too.
	_, h, _ = get("/v1/nodes?limit=1")
	nodeCursor := h.Get(NextCursorHeader)
	for _, p := range []string{"/v1/steps?limit=0", "/v1/steps?limit=x", "/v1/records/runs?cursor=!!", "/v1/steps?cursor=" + nodeCursor,
		"/v1/members?limit=-1", "/v1/nodes?cursor=abc"} {
		status, _, body := get(p)
		param := "limit"
		if strings.Contains(p, "cursor") {
			param = "cursor"
		}
		if status != 400 || !strings.Contains(body, "query parameter "+param) {
			t.Errorf("GET %s = %d %s; want 400 naming %s", p, status, body, param)
		}
	}
}

func TestPageParameters(t *testing.T) {
	for _, tc := range []struct {
		query string
		want  page
		err   string
	}{
		{"", page{limit: 100}, ""},
		{"limit=1", page{limit: 1}, ""},
		{"limit=1000", page{limit: 1000}, ""},
		{"limit=5000", page{limit: 1000}, ""},
		{"limit=0", page{}, "query parameter limit"},
		{"limit=-3", page{}, "query parameter limit"},
		{"cursor=" + encodeCursor(cursorRecords, "run-7"), page{limit: 100, key: "run-7"}, ""},
		{"cursor=" + encodeCursor(cursorNodes, "n1"), page{}, "query parameter cursor"},
		{"cursor=abc", page{}, "query parameter cursor"},
	} {
		r, _ := http.NewRequest(http.MethodGet, "/v1/records/runs?"+tc.query, nil)
		got, err := pageOf(r, cursorRecords)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("pageOf(%s) = %+v, %v; want an error naming %q", tc.query, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("pageOf(%s) = %+v, %v; want %+v", tc.query, got, err, tc.want)
		}
	}
}
