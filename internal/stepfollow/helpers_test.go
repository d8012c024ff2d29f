package stepfollow

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/scheduler/schedulertest"
)

var testNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// testAgent serves agentd's stream route (NDJSON) in plain HTTP from a
// fixed list of frames. The first cut requests are cut in the middle of
// the frame after the first one they send; with hang, a request that has
// sent every frame stays open until the client goes.
type testAgent struct {
	srv    *httptest.Server
	frames []api.Frame
	hang   bool

	mu   sync.Mutex
	cut  int
	from []int64
}

func newTestAgent(t *testing.T, frames []api.Frame, cut int, hang bool) *testAgent {
	a := &testAgent{frames: frames, cut: cut, hang: hang}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *testAgent) serve(w http.ResponseWriter, r *http.Request) {
	from, _ := strconv.ParseInt(r.URL.Query().Get("from"), 10, 64)
	a.mu.Lock()
	a.from = append(a.from, from)
	cut := a.cut > 0
	if cut {
		a.cut--
	}
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-ndjson")
	sent := 0
	for _, f := range a.frames {
		if f.Seq <= from {
			continue
		}
		b, _ := json.Marshal(f)
		if cut && sent == 1 {
			w.Write(b[:len(b)/2])
			return
		}
		w.Write(append(b, '\n'))
		w.(http.Flusher).Flush()
		sent++
	}
	if a.hang && r.URL.Query().Get("follow") == "1" {
		<-r.Context().Done()
	}
}

// requests returns the from= of each request so far.
func (a *testAgent) requests() []int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]int64(nil), a.from...)
}

// streamURL is the scheduler's answer for step id on a's node n1.
func (a *testAgent) streamURL(id string) api.StreamURL {
	return api.StreamURL{URL: a.srv.URL + "/v1/steps/" + id + "/stream", Node: "n1"}
}

// output returns frames of the chunks, alternately stdout and stderr,
// and an exit frame when exit is set.
func output(exit *api.Exit, chunks ...string) []api.Frame {
	var fs []api.Frame
	for i, c := range chunks {
		kind := api.KindStdout
		if i%2 == 1 {
			kind = api.KindStderr
		}
		fs = append(fs, api.NewOutputFrame(int64(i+1), kind, []byte(c), testNow))
	}
	if exit != nil {
		fs = append(fs, api.NewExitFrame(int64(len(fs)+1), *exit, testNow))
	}
	return fs
}

// warnings collects what Config.Warn reports.
type warnings struct{ testenv.SyncBuffer }

func (w *warnings) warn(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }

// startCluster starts a plaintext scheduler that knows node n1 at a's
// address and step s1 of state on it.
func startCluster(t *testing.T, a *testAgent, state cluster.StepState) *schedulertest.Cluster {
	c := schedulertest.New(t, schedulertest.Options{})
	u, err := url.Parse(a.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddrPort(u.Host)
	now := time.Now().UTC()
	node := cluster.Node{ID: "n1", Address: addr, State: cluster.NodeReady,
		Health:   cluster.Health{State: cluster.NodeReady},
		Capacity: cluster.Resources{CPU: 4, MemoryBytes: 8 << 30}, MaxStarting: cluster.DefaultMaxStarting,
		LastHeartbeat: time.Now()}
	step := cluster.Step{ID: "s1", State: state, Node: "n1", Attempts: 1,
		Spec:   cluster.StepSpec{Image: "base", Args: []string{"true"}, CPU: 1, MemoryBytes: 512 << 20},
		Phases: cluster.Phases{Queued: now, Placed: now, Created: now, Started: now}, Events: []cluster.Event{}}
	if state.Terminal() {
		step.Phases.Exited, step.Phases.CleanedUp, step.EndedAt = now, now, now
		step.ExitCode, step.TerminatedBy = new(int), cluster.ByExit
	}
	c.Restore([]cluster.Node{node}, []cluster.Step{step})
	return c
}
