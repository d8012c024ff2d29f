package scheduler

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

// The cost of a page of a list route (issue 15, "Done means" 5: the
// scheduler's reads and bytes per page do not depend on the number of
// runs). A run is a record of the gateway's; its steps are the
// scheduler's. The lists are filled through the real FSM's Apply and read
// through the real handlers (the member's state, the JSON answer), without
// the network.

// runValue is the size of a gateway run record: its spec and the view of
// its ended steps.
var runValue = fmt.Sprintf(`{"workspace":"ws-1","agent":"analyst","state":"exited","steps":[{"id":"s-x","state":"exited","exit_code":0}],"pad":%q}`,
	strings.Repeat("p", 200))

// listFixture is an FSM holding n runs (records of kind "runs") and n
// steps (mostly exited), and a Server around it to call the handlers.
type listFixture struct {
	srv *Server
	n   int
}

func newListFixture(t testing.TB, n int) *listFixture {
	t.Helper()
	f := newTestFSM(t)
	f.mustApply(t, register("n1", 1<<16, 1<<50))
	for i := range n {
		f.mustApply(t, put("runs", fmt.Sprintf("run-%07d", i), 0, runValue))
		id := cluster.StepID(fmt.Sprintf("s-%07d", i))
		f.mustApply(t, submit(id, false))
		if i%10 != 0 {
			f.mustApply(t, place(id, "n1"), phase(id, "n1", 1, cluster.StateRunning), exit(id, "n1", 1, cluster.StateExited, 0))
		}
	}
	return &listFixture{srv: &Server{fsm: f.FSM}, n: n}
}

// cost is what serving one page took, averaged.
type cost struct {
	allocs float64
	bytes  float64 // allocated
	answer int     // bytes of the JSON answer
	time   time.Duration
	items  int
}

// measure serves the request of path (to handler h) many times and
// returns its average cost.
func measure(t testing.TB, h handlerFunc, path string, pathValues map[string]string) cost {
	t.Helper()
	serve := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		for k, v := range pathValues {
			r.SetPathValue(k, v)
		}
		w := httptest.NewRecorder()
		if err := h(w, r); err != nil {
			t.Fatalf("GET %s = %v", path, err)
		}
		return w
	}
	w := serve()
	var c cost
	c.answer = w.Body.Len()
	c.items = countItems(w.Body.Bytes())
	c.allocs = testing.AllocsPerRun(20, func() { serve() })
	const runs = 50
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	for range runs {
		serve()
	}
	c.time = time.Since(start) / runs
	runtime.ReadMemStats(&after)
	c.bytes = float64(after.TotalAlloc-before.TotalAlloc) / runs
	return c
}

func countItems(b []byte) int {
	n, depth := 0, 0
	for _, c := range b {
		switch c {
		case '{':
			if depth == 1 {
				n++
			}
			depth++
		case '[':
			depth++
		case '}', ']':
			depth--
		}
	}
	return n
}

// cursorOfPage returns the cursor of page p (1 is the first) of limit
// entries of the list at path.
func cursorOfPage(t testing.TB, h handlerFunc, path string, pathValues map[string]string, p int) string {
	t.Helper()
	cursor := ""
	for range p - 1 {
		u := path + "&cursor=" + url.QueryEscape(cursor)
		if cursor == "" {
			u = path
		}
		r := httptest.NewRequest(http.MethodGet, u, nil)
		for k, v := range pathValues {
			r.SetPathValue(k, v)
		}
		w := httptest.NewRecorder()
		if err := h(w, r); err != nil {
			t.Fatal(err)
		}
		if cursor = w.Header().Get(NextCursorHeader); cursor == "" {
			t.Fatalf("%s has no page %d", path, p)
		}
	}
	return cursor
}

// TestPageCostIsFixed lists page 1 and page 50 (100 entries each) of
// 10,000 and of 100,000 runs and steps, and checks that the allocations,
// the bytes allocated and the answer's size per page do not grow with the
// total. The times are logged (they are noisy on a shared machine).
func TestPageCostIsFixed(t *testing.T) {
	if testing.Short() {
		t.Skip("fills an FSM with 100,000 runs and steps")
	}
	type list struct {
		name string
		h    func(*Server) handlerFunc
		path string
		pv   map[string]string
	}
	lists := []list{
		{"runs (records)", func(s *Server) handlerFunc { return s.handleRecords }, "/v1/records/runs?limit=100", map[string]string{"kind": "runs"}},
		{"steps", func(s *Server) handlerFunc { return s.handleSteps }, "/v1/steps?limit=100", nil},
		{"exited steps", func(s *Server) handlerFunc { return s.handleSteps }, "/v1/steps?state=exited&limit=100", nil},
	}
	costs := map[string]map[int]map[int]cost{}
	for _, n := range []int{10_000, 100_000} {
		start := time.Now()
		f := newListFixture(t, n)
		t.Logf("filled an FSM with %d runs and %d steps in %v", n, n, time.Since(start).Round(time.Millisecond))
		for _, l := range lists {
			h := l.h(f.srv)
			for _, p := range []int{1, 50} {
				path := l.path
				if p > 1 {
					path += "&cursor=" + url.QueryEscape(cursorOfPage(t, h, l.path, l.pv, p))
				}
				c := measure(t, h, path, l.pv)
				if c.items != 100 {
					t.Fatalf("%s page %d of %d: %d entries, want 100", l.name, p, n, c.items)
				}
				if costs[l.name] == nil {
					costs[l.name] = map[int]map[int]cost{}
				}
				if costs[l.name][n] == nil {
					costs[l.name][n] = map[int]cost{}
				}
				costs[l.name][n][p] = c
				t.Logf("%-14s total %7d page %2d: %5.0f allocs, %7.0f bytes allocated, answer %6d bytes, %v",
					l.name, n, p, c.allocs, c.bytes, c.answer, c.time.Round(time.Microsecond))
			}
		}
		f = nil
		runtime.GC()
	}
	for _, l := range lists {
		base := costs[l.name][10_000][1]
		for _, n := range []int{10_000, 100_000} {
			for _, p := range []int{1, 50} {
				c := costs[l.name][n][p]
				if c.allocs > base.allocs*1.02+2 {
					t.Errorf("%s, page %d of %d: %.0f allocations, page 1 of 10,000: %.0f; want no more", l.name, p, n, c.allocs, base.allocs)
				}
				if c.bytes > base.bytes*1.10 {
					t.Errorf("%s, page %d of %d: %.0f bytes allocated, page 1 of 10,000: %.0f; want at most 10%% more", l.name, p, n, c.bytes, base.bytes)
				}
				// Later entries have longer indexes ("modify_index": 1234567).
				if float64(c.answer) > float64(base.answer)*1.02 {
					t.Errorf("%s, page %d of %d: answer of %d bytes, page 1 of 10,000: %d; want at most 2%% more", l.name, p, n, c.answer, base.answer)
				}
			}
		}
	}
}

// BenchmarkListPage serves page 50 of 100 runs of a store of 10,000 and of
// 100,000: ns/op, B/op and allocs/op stay the same.
func BenchmarkListPage(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		f := newListFixture(b, n)
		h := f.srv.handleRecords
		pv := map[string]string{"kind": "runs"}
		path := "/v1/records/runs?limit=100&cursor=" + url.QueryEscape(cursorOfPage(b, h, "/v1/records/runs?limit=100", pv, 50))
		b.Run(fmt.Sprintf("runs=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest(http.MethodGet, path, nil)
				r.SetPathValue("kind", "runs")
				if err := h(httptest.NewRecorder(), r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
