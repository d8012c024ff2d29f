package scheduler

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// compactHistory is a history of steps s0..s9 ending at at(100+10*i) on
// node n1, step "live" running, "waiting" queued, and "old", an ended
// step recorded before EndedAt existed (it ended at at(5)).
func compactHistory() []cluster.Command {
	cmds := []cluster.Command{register("n1", 64, 64*gib)}
	for i := range 10 {
		id := cluster.StepID(fmt.Sprintf("s%d", i))
		e := exit(id, "n1", 1, cluster.StateExited, 0)
		e.At = at(100 + 10*i)
		cmds = append(cmds, submit(id, false), place(id, "n1"), phase(id, "n1", 1, cluster.StateRunning), e)
	}
	cmds = append(cmds, submit("live", false), place("live", "n1"), phase("live", "n1", 1, cluster.StateRunning), submit("waiting", false))
	old := cluster.Step{ID: "old", Spec: spec(1, gib, false), State: cluster.StateExited, Node: "n1", Attempts: 1,
		Phases: cluster.Phases{Queued: at(1), Exited: at(5)}}
	return append(cmds, oldStep{old})
}

// oldStep is not a log entry: applyHistory puts its step in the state as a
// snapshot of an older version would hold it.
type oldStep struct{ s cluster.Step }

func (oldStep) CommandType() cluster.CommandType { return 0 }

// applyHistory applies cmds to f; an oldStep goes into the state directly.
func applyHistory(t *testing.T, f *testFSM, cmds []cluster.Command) {
	t.Helper()
	for _, c := range cmds {
		switch c := c.(type) {
		case oldStep:
			f.idx++
			st := f.State()
			st.mu.Lock()
			s := c.s.Clone()
			s.CreateIndex, s.ModifyIndex = f.idx, f.idx
			st.putStep(nil, &s)
			st.advance(f.idx)
			st.mu.Unlock()
		default:
			f.mustApply(t, c)
		}
	}
}

func TestApplyCompactSteps(t *testing.T) {
	f, g := newTestFSM(t), newTestFSM(t)
	applyHistory(t, f, compactHistory())
	applyHistory(t, g, compactHistory())
	ids := func(f *testFSM) []cluster.StepID { return stepIDs(f.State().Steps(StepFilter{})) }
	compact := func(before time.Time, limit int) cluster.CompactSteps {
		return cluster.CompactSteps{Before: before, Limit: limit, At: before.Add(time.Hour)}
	}
	// Ended before at(125): old (at 5), s0 (100), s1 (110), s2 (120); at
	// most 3 per entry, the first ended first.
	res := f.apply(t, compact(at(125), 3))
	if r, ok := res.(*CompactResult); !ok || r.Dropped != 3 {
		t.Fatalf("compact_steps = %#v, want 3 dropped", res)
	}
	want := []cluster.StepID{"s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "live", "waiting"}
	if got := ids(f); !cmp.Equal(got, want) {
		t.Errorf("steps after compaction = %v, want %v", got, want)
	}
	res = f.apply(t, compact(at(125), 3))
	if r, ok := res.(*CompactResult); !ok || r.Dropped != 1 {
		t.Errorf("second compact_steps = %#v, want s2 dropped", res)
	}
	if got, ok := f.State().OldestEnded(); !ok || !got.Equal(at(130)) {
		t.Errorf("OldestEnded() = %v, %v; want s3's end, at(130)", got, ok)
	}
	// Live and queued steps stay, whatever their age.
	f.mustApply(t, compact(at(1_000_000), maxCompact))
	if got := ids(f); !cmp.Equal(got, []cluster.StepID{"live", "waiting"}) {
		t.Errorf("steps after compacting everything ended = %v, want live, waiting", got)
	}
	if n := f.State().StepCounts(); n[cluster.StateExited] != 0 || n[cluster.StateRunning] != 1 || n[cluster.StateQueued] != 1 {
		t.Errorf("StepCounts() = %v", n)
	}
	if _, ok := f.State().OldestEnded(); ok {
		t.Errorf("OldestEnded() found a step after all were compacted")
	}
	if steps, _, _ := f.State().StepsPage(StepFilter{Node: "n1"}, StepCursor{}, 100); !cmp.Equal(stepIDs(steps), []cluster.StepID{"live"}) {
		t.Errorf("steps of n1 = %v, want live only", stepIDs(steps))
	}
	// The snapshot no longer holds them, and a member that applies the
	// same entries holds the same state.
	data := persist(t, f.FSM)
	if bytes.Contains(data, []byte(`"s3"`)) || bytes.Contains(data, []byte(`"old"`)) {
		t.Errorf("the snapshot still holds compacted steps:\n%s", data)
	}
	g.mustApply(t, compact(at(125), 3), compact(at(125), 3), compact(at(1_000_000), maxCompact))
	g.idx = f.idx
	if !bytes.Equal(persist(t, g.FSM), data) {
		t.Errorf("two members applying the same compactions differ")
	}
	checkErr(t, "limit 0", f.applyErr(t, compact(at(1), 0)), ErrInvalid)
	checkErr(t, "limit too large", f.applyErr(t, compact(at(1), maxCompact+1)), ErrInvalid)
}

// TestRetention: with the retention set to a second, the terminal steps
// leave the replicated state of every member (their reads answer 404),
// the live ones stay, and the leader's metrics count the compaction.
func TestRetention(t *testing.T) {
	c := newServerCluster(t, 3, func(cfg *Config) { cfg.StepRetention = time.Second })
	cl := c.client()
	a := newAgent(t, cl, "n1", 8, 16*gib)
	for _, id := range []string{"done-1", "done-2", "running"} {
		if _, err := cl.SubmitStep(t.Context(), api.StepRequest{ID: id, Image: "base", Args: []string{"true"}, CPU: 1, MemoryBytes: gib}); err != nil {
			t.Fatal(err)
		}
		waitStep(t, cl, id, "placed", stateIs("placed"))
		a.run(id, 1)
	}
	a.exit("done-1", 1, cluster.StateExited, 0, cluster.ByExit)
	a.exit("done-2", 1, cluster.StateExited, 3, cluster.ByExit)
	ended := time.Now()
	if _, err := cl.SubmitStep(t.Context(), api.StepRequest{ID: "failed-at-once", Image: "base", Args: []string{"true"}, CPU: 64, MemoryBytes: gib}); !client.IsCode(err, api.CodeUnplaceable) {
		t.Fatalf("SubmitStep(64 cores) = %v, want unplaceable", err)
	}
	waitFor(t, "the ended steps compacted on every member", func() bool {
		for _, m := range c.members {
			for _, id := range []cluster.StepID{"done-1", "done-2", "failed-at-once"} {
				if _, ok := m.srv.fsm.State().Step(id); ok {
					return false
				}
			}
		}
		return true
	})
	if d := time.Since(ended); d < time.Second || d > 4*time.Second {
		t.Errorf("compacted %v after the steps ended, want after the retention of 1s, soon", d)
	}
	for _, m := range c.members {
		if _, ok := m.srv.fsm.State().Step("running"); !ok {
			t.Errorf("member %s: the running step was compacted", m.id)
		}
		if data := persist(t, m.srv.fsm); bytes.Contains(data, []byte(`"done-1"`)) {
			t.Errorf("member %s: its snapshot still holds done-1", m.id)
		}
	}
	if _, err := cl.Step(t.Context(), "done-1"); !client.IsNotFound(err) {
		t.Errorf("Step(done-1) = %v, want not found", err)
	}
	// The leader counts them once its apply returned.
	var metrics string
	waitFor(t, "the leader's compaction metrics", func() bool {
		resp, err := (&http.Client{Transport: c.transport}).Get(c.waitLeader().url() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		metrics = grepLines(string(b), "compact")
		return strings.Contains(metrics, "rodon_scheduler_compacted_steps_total 3") &&
			!strings.Contains(metrics, "rodon_scheduler_compaction_last_run_timestamp_seconds 0\n")
	})
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}
