package schedulertest_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/pki/pkitest"
	"github.com/rodon-compute/rodon/scheduler/client"
	"github.com/rodon-compute/rodon/scheduler/schedulertest"
)

// waitState waits until step id is in state.
func waitState(t *testing.T, c *client.Client, id, state string) api.Step {
	t.Helper()
	var st api.Step
	schedulertest.Eventually(t, "step "+id+" "+state, func() bool {
		var err error
		st, err = c.Step(t.Context(), id)
		return err == nil && st.State == state
	})
	return st
}

func TestStepLifecycle(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts schedulertest.Options
	}{
		{"plaintext", schedulertest.Options{}},
		{"tls", schedulertest.Options{CA: pkitest.New(t)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := schedulertest.New(t, tc.opts)
			a := c.Agent(t, "n1", schedulertest.AgentOptions{})
			cl := c.ClientAs("gateway/gateway")
			if _, err := cl.SubmitStep(t.Context(), api.StepRequest{ID: "s-1", Image: "base", Args: []string{"true"}, CPU: 1, MemoryBytes: 1 << 30}); err != nil {
				t.Fatal(err)
			}
			a.Start("s-1")
			waitState(t, cl, "s-1", "running")
			a.Exit("s-1", 3)
			st := waitState(t, cl, "s-1", "exited")
			if st.ExitCode == nil || *st.ExitCode != 3 || st.Node != "n1" {
				t.Errorf("step = %+v, want exited 3 on n1", st)
			}
			c.Compact("s-1")
			if _, err := cl.Step(t.Context(), "s-1"); !client.IsNotFound(err) {
				t.Errorf("Step() after Compact = %v, want not found", err)
			}
		})
	}
}

func TestPartition(t *testing.T) {
	c := schedulertest.New(t, schedulertest.Options{Members: 3})
	old := c.Leader()
	c.Disconnect(old)
	schedulertest.Eventually(t, "a new leader", func() bool { l := c.Leader(); return l != old })
	var other *schedulertest.Member
	for _, m := range c.Members {
		if m != old {
			other = m
		}
	}
	// The majority takes writes, through any of its members.
	if _, err := c.Client(other).PutRecord(t.Context(), "k", "a", 0, []byte(`1`)); err != nil {
		t.Fatalf("PutRecord() on the majority = %v", err)
	}
	c.Reconnect(old)
	schedulertest.Eventually(t, "the old leader to catch up", func() bool {
		_, ok := old.Server.FSM().State().Record("k", "a")
		return ok
	})
}

func TestFailNext(t *testing.T) {
	c := schedulertest.New(t, schedulertest.Options{})
	c.FailNext(1, http.StatusServiceUnavailable, schedulertest.Match("PUT", "/v1/records/"))
	cl := c.ClientWith("", client.Options{RetryFor: -1})
	if _, err := cl.PutRecord(t.Context(), "k", "a", 0, []byte(`1`)); !client.IsCode(err, api.CodeUnavailable) {
		t.Fatalf("first PutRecord() = %v, want unavailable", err)
	}
	if _, err := cl.PutRecord(t.Context(), "k", "a", 0, []byte(`1`)); err != nil {
		t.Fatalf("second PutRecord() = %v", err)
	}
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c.SetNow(func() time.Time { return base })
	e, err := cl.AppendAudit(t.Context(), []byte(`{"a":1}`))
	if err != nil || !e.Time.Equal(base) {
		t.Errorf("AppendAudit() = %+v, %v; want stamped %v", e, err, base)
	}
}

// TestExitWithFiles: steps' changes become revisions, each next step sees
// the tree before it, and two from one head changing one path conflict.
func TestExitWithFiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts schedulertest.Options
	}{
		{"plaintext", schedulertest.Options{}},
		{"tls, three members", schedulertest.Options{CA: pkitest.New(t), Members: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := schedulertest.New(t, tc.opts)
			a := c.Agent(t, "n1", schedulertest.AgentOptions{})
			cl := c.ClientAs("gateway/gateway")
			submit := func(id string) {
				t.Helper()
				if _, err := cl.SubmitStep(t.Context(), api.StepRequest{ID: id, Image: "base", Args: []string{"true"}, CPU: 1, MemoryBytes: 1 << 30, Workspace: "ws-a"}); err != nil {
					t.Fatal(err)
				}
			}
			submit("s-1")
			first := a.ExitWithFiles("s-1", 0, map[string]string{"a.txt": "a"})
			submit("s-2")
			second := a.ExitWithFiles("s-2", 0, map[string]string{"b.txt": "b"})
			r2, ok := c.State().Revision(second.Revision)
			if first.Revision == "" || !ok || r2.Parent != first.Revision || r2.Files != 2 {
				t.Fatalf("revisions %q then %+v, want the second after the first with both files", first.Revision, r2)
			}
			submit("s-3")
			submit("s-4")
			a.ExitWithFiles("s-3", 0, map[string]string{"a.txt": "3"})
			lost := a.ExitWithFiles("s-4", 0, map[string]string{"a.txt": "4"})
			if d, _ := c.State().Revision(lost.Revision); lost.State != "failed" || lost.Cause != api.CauseWorkspaceConflict || !d.Detached {
				t.Errorf("the second writer of a.txt: %s (%s), revision %+v; want failed, its tree detached", lost.State, lost.Cause, d)
			}
		})
	}
}

// TestExitWithTree: a step's symlinks inside the tree are committed as
// links; a tree with one pointing out of it makes no revision.
func TestExitWithTree(t *testing.T) {
	c := schedulertest.New(t, schedulertest.Options{})
	a := c.Agent(t, "n1", schedulertest.AgentOptions{})
	cl := c.ClientAs("gateway/gateway")
	for _, id := range []string{"s-1", "s-2"} {
		if _, err := cl.SubmitStep(t.Context(), api.StepRequest{ID: id, Image: "base", Args: []string{"true"}, CPU: 1, MemoryBytes: 1 << 30, Workspace: "ws-a"}); err != nil {
			t.Fatal(err)
		}
	}
	in := a.ExitWithTree("s-1", 0, map[string]string{"a.txt": "a"}, map[string]string{"l": "a.txt"})
	tree, err := cl.Tree(t.Context(), "ws-a", in.Revision, "l")
	if in.Revision == "" || err != nil || len(tree) != 1 || tree[0].Type != "symlink" || tree[0].Target != "a.txt" {
		t.Fatalf("revision %q, tree of l %+v, %v; want the link to a.txt", in.Revision, tree, err)
	}
	out := a.ExitWithTree("s-2", 0, nil, map[string]string{"up": "../x"})
	if out.Revision != "" || out.State != "exited" {
		t.Errorf("a link out of the tree: step %s, revision %q; want exited without a revision", out.State, out.Revision)
	}
}
