package e2e

import (
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// TestRetention is issue 15's "Done means" 6 against the real stack: with
// the retentions set to seconds, a finished step leaves the scheduler's
// replicated state and its output log leaves the node, and the run page
// (GET /v1/runs/{id}) still shows what it showed: the gateway kept the
// step's view in its run record when the step ended.
func TestRetention(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	f := &fleet{schedArgs: []string{"--step-retention", "3s"}, agentArgs: []string{"--log-retention", "3s"}}
	startSchedulers(t, f, 1)
	agent := startNamedAgent(t, f, "retention-node-a1")
	_, owner, wsID := ownerWithWorkspace(t, f, "kept")

	op := owner.startRun(wsID, map[string]any{"image": "base", "args": []string{"sh", "-c", "echo kept"}, "cpu": 0.5, "memory": "128Mi"})
	if got := string(stdout(t, owner.openStream(op.Steps[0].ID, 0).untilExit(), 1)); got != "kept\n" {
		t.Fatalf("step stdout = %q, want %q", got, "kept\n")
	}
	done := owner.waitRun(op.ID, 2*time.Minute)
	if done.State != "succeeded" || len(done.Steps) != 1 {
		t.Fatalf("run = %+v, want succeeded with one step", done)
	}
	stepID := done.Steps[0].ID
	// The view is kept once the step is final (cleaned up).
	waitFor(t, time.Minute, "the step's clean-up on the run page", func() bool {
		owner.must(http.StatusOK, http.MethodGet, "/v1/runs/"+op.ID, nil, &done)
		return !done.Steps[0].Phases.CleanedUp.IsZero()
	})
	before := done.Steps[0]

	c := newClient(t, f.urls())
	waitFor(t, 30*time.Second, "the scheduler to compact the step out", func() bool {
		_, err := c.Step(t.Context(), stepID)
		return client.IsCode(err, "not_found")
	})
	logs := filepath.Join(agent.dataDir, "logs", stepID+"*")
	waitFor(t, 30*time.Second, "the node to drop the step's log", func() bool {
		m, err := filepath.Glob(logs)
		return err == nil && len(m) == 0
	})

	var after gwOperation
	owner.must(http.StatusOK, http.MethodGet, "/v1/runs/"+op.ID, nil, &after)
	if after.State != "succeeded" || len(after.Steps) != 1 {
		t.Fatalf("run after retention = %+v, want it as it was", after)
	}
	got := after.Steps[0]
	if got.State != before.State || got.ExitCode == nil || *got.ExitCode != 0 || got.TerminatedBy != before.TerminatedBy ||
		!got.Phases.Exited.Equal(before.Phases.Exited) || !got.Phases.CleanedUp.Equal(before.Phases.CleanedUp) {
		t.Errorf("run page's step after retention = %+v, want what it showed before: %+v", got, before)
	}
}
