package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// TestAgentLoss kills an agentd (SIGKILL) while it runs two steps: both
// become lost within the node TTL plus a heartbeat; the non-idempotent one
// is not run again, the idempotent one is, on the other node; a cancel of
// the lost step reads unverified; and when the agent comes back it destroys
// the sandboxes it left, so nothing stays running.
func TestAgentLoss(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	const ttl, heartbeat = 4 * time.Second, 500 * time.Millisecond
	f := &fleet{}
	startSchedulers(t, f, 1)
	startAgents(t, f, 1)
	c := newClient(t, f.urls())
	ctx := context.Background()

	submit := func(id string, idempotent bool, script string) {
		t.Helper()
		_, err := c.SubmitStep(ctx, api.StepRequest{ID: id, Image: "base", CPU: 0.2, MemoryBytes: 128 << 20,
			Args: []string{"sh", "-c", script}, Workspace: "ws-" + id, Idempotent: idempotent})
		if err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
	}
	submit("once", false, "echo ran >> /workspace/lines; sleep 100")
	submit("again", true, "echo ran >> /workspace/lines; sleep 2")
	waitFor(t, 60*time.Second, "both steps running on a1", func() bool {
		a, err1 := c.Step(ctx, "once")
		b, err2 := c.Step(ctx, "again")
		return err1 == nil && err2 == nil && a.State == "running" && b.State == "running"
	})
	a1 := f.agents[0]
	// A second node for the idempotent step's next attempt.
	startAgentNamed(t, f, "a2")
	a1.kill()
	killedAt := time.Now()

	waitFor(t, 30*time.Second, "the steps of a1 to be lost", func() bool {
		a, err := c.Step(ctx, "once")
		return err == nil && a.State == "lost"
	})
	if late := time.Since(killedAt); late > ttl+heartbeat+2*time.Second {
		t.Errorf("step lost %v after its agent died, want within the TTL %v plus a heartbeat", late, ttl)
	}
	once, _ := c.Step(ctx, "once")
	if once.TerminatedBy != "node_lost" || once.Attempts != 1 {
		t.Errorf("non-idempotent step after node loss: %+v, want lost by node_lost, 1 attempt", once)
	}
	st, err := c.CancelStep(ctx, "once", "test")
	if err != nil {
		t.Fatalf("cancel lost step: %v", err)
	}
	if st.Cancel == nil || st.Cancel.Unverified == "" || !st.Cancel.ConfirmedAt.IsZero() {
		t.Errorf("cancel of a lost step = %+v, want unverified with a reason", st.Cancel)
	}
	waitFor(t, 60*time.Second, "the idempotent step to run again and exit", func() bool {
		b, err := c.Step(ctx, "again")
		return err == nil && b.State == "exited"
	})
	again, _ := c.Step(ctx, "again")
	if again.Attempts != 2 || again.Node != "a2" {
		t.Errorf("idempotent step: attempts %d on %s, want attempt 2 on a2", again.Attempts, again.Node)
	}
	// The non-idempotent step never ran again; the idempotent one did.
	time.Sleep(time.Second)
	if n, revs := storeLines(t, c, "ws-once", "lines", "once"); n != 0 || revs != 0 {
		t.Errorf("non-idempotent step lost: its workspace has %d lines in %d revisions, want none: a lost attempt saves nothing and it never ran again", n, revs)
	}
	if n, revs := storeLines(t, c, "ws-again", "lines", "again"); n != 1 || revs != 1 {
		t.Errorf("idempotent step: its workspace has %d lines in %d revisions by it, want the one of the attempt that exited", n, revs)
	}

	// a1 comes back with its data dir and destroys what it left.
	restarted := start(t, "agentd a1 (restarted)", append([]string{bin + "/agentd"}, a1.cmd.Args[1:]...)...)
	waitFor(t, 60*time.Second, "a1 back and its orphans destroyed", func() bool {
		return strings.Count(restarted.out.String(), "destroying the sandbox of a step no longer assigned here") >= 1
	})
	for _, p := range append(f.agents, restarted) {
		p.stop(30 * time.Second)
	}
}

func startAgentNamed(t *testing.T, f *fleet, id string) {
	t.Helper()
	f.agents = append(f.agents, start(t, "agentd "+id, bin+"/agentd", "serve", "--tls-dir", tlsArgs(t, pki.RoleAgent, id)[1], "--scheduler", f.urls(),
		"--node-id", id, "--data-dir", t.TempDir(), "--listen", freePort(t),
		"--heartbeat", "500ms", "--cpu", "2", "--memory", "4g", "--log-level", "info", "--network", "none"))
	c := newClient(t, f.urls())
	waitFor(t, 60*time.Second, "node "+id+" ready", func() bool {
		n, err := c.Node(context.Background(), id)
		return err == nil && n.State == "ready"
	})
}
