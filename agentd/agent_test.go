package agentd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/cluster"
)

func startAgent(t *testing.T, rt *Runtime, sched Scheduler) *logstore.Store {
	t.Helper()
	return startAgentWith(t, rt, sched, nil)
}

// startAgentWith is startAgent with the agent's and its log store's
// configurations edited.
func startAgentWith(t *testing.T, rt *Runtime, sched Scheduler, edit func(*AgentConfig, *logstore.Config)) *logstore.Store {
	t.Helper()
	cfg := logstore.DefaultConfig()
	cfg.Dir = t.TempDir()
	acfg := DefaultAgentConfig()
	if edit != nil {
		edit(&acfg, &cfg)
	}
	logs, err := logstore.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	acfg.Node = "n1"
	acfg.Address = netip.MustParseAddrPort("127.0.0.1:7200")
	acfg.Capacity = cluster.Resources{CPU: 2, MemoryBytes: 4 << 30}
	acfg.Heartbeat = 200 * time.Millisecond
	acfg.PollWait = time.Second
	acfg.ProbeImage = baseImage
	a, err := NewAgent(acfg, rt, sched, logs, rt.logger)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("agent did not stop within 30s of cancel")
		}
	})
	return logs
}

func TestAgentRunsAssignedStep(t *testing.T) {
	rt := newTestRuntime(t)
	sched := newRecordingScheduler(t)
	startAgent(t, rt, sched)
	sched.assign(cluster.Step{ID: "a-1", State: cluster.StatePlaced, Node: "n1", Attempts: 1, Spec: cluster.StepSpec{
		Image: "base", Args: []string{"sh", "-c", "echo line >> log.txt; exit 3"}, CPU: 1, MemoryBytes: 256 << 20, Workspace: "ws1",
	}})
	sched.waitFor(t, "cleanup of a-1", func() bool { return len(sched.reports) > 0 && sched.reports[len(sched.reports)-1] == "cleaned up" })
	want := []string{"register ready", "phase starting", "phase running", "exit 3 exit", "cleaned up"}
	if fmt.Sprint(sched.reports) != fmt.Sprint(want) {
		t.Errorf("reports = %q, want %q", sched.reports, want)
	}
	if b, ok := sched.file("ws1", "log.txt"); b != "line\n" {
		t.Errorf("workspace log.txt = %q, %v; want one line", b, ok)
	}
}

// TestAgentFailsStepWithoutItsEnv: an assignment whose environment the
// scheduler could not open fails at start with that reason; the step never
// runs without its values.
func TestAgentFailsStepWithoutItsEnv(t *testing.T) {
	rt := newTestRuntime(t)
	sched := newRecordingScheduler(t)
	startAgent(t, rt, sched)
	sched.place(cluster.Step{ID: "e-1", State: cluster.StatePlaced, Node: "n1", Attempts: 1, Spec: cluster.StepSpec{
		Image: "base", Args: []string{"sh", "-c", "touch ran"}, CPU: 1, MemoryBytes: 256 << 20, Workspace: "ws1",
		EnvError: "the value of environment variable K does not open with the env key of scheduler member m1",
	}})
	sched.waitFor(t, "the exit of e-1", func() bool { _, ok := sched.exits["e-1"]; return ok })
	sched.mu.Lock()
	rec := sched.exits["e-1"]
	sched.mu.Unlock()
	if rec.State != cluster.StateFailed || !strings.Contains(rec.Reason, "environment variable K does not open") {
		t.Errorf("exit record = %+v, want failed with the env error as its reason", rec)
	}
	if _, ok := sched.file("ws1", "ran"); ok {
		t.Error("the step ran without its environment")
	}
}

// TestAgentCancelOrder: a step that ignores SIGTERM is cancelled; the
// cancel is confirmed only after its exit was reported.
func TestAgentCancelOrder(t *testing.T) {
	rt := newTestRuntime(t)
	rt.cfg.KillGrace = time.Second
	sched := newRecordingScheduler(t)
	startAgent(t, rt, sched)
	sched.assign(cluster.Step{ID: "c-1", State: cluster.StatePlaced, Node: "n1", Attempts: 1, Spec: cluster.StepSpec{
		Image: "base", Args: []string{"sh", "-c", "trap '' TERM; sleep 100"}, CPU: 1, MemoryBytes: 256 << 20,
	}})
	sched.waitFor(t, "c-1 running", func() bool { return sched.steps["c-1"].State == cluster.StateRunning })
	sched.cancel("c-1")
	sched.waitFor(t, "cleanup of c-1", func() bool { return sched.reports[len(sched.reports)-1] == "cleaned up" })
	want := []string{"register ready", "phase starting", "phase running", "cancel requested", "exit 137 user", "cancel confirmed", "cleaned up"}
	if fmt.Sprint(sched.reports) != fmt.Sprint(want) {
		t.Errorf("reports = %q, want %q", sched.reports, want)
	}
	if rec := sched.exits["c-1"]; rec.State != cluster.StateCancelled {
		t.Errorf("exit record %+v, want cancelled", rec)
	}
}

// TestAgentNodeMaxLimits: the agent registers the node's maxima, runs a
// step within them with the limits in force, and fails one past them
// with the limit and the flag named, without starting it.
func TestAgentNodeMaxLimits(t *testing.T) {
	rt := newTestRuntime(t)
	sched := newRecordingScheduler(t)
	max := cluster.Limits{Pids: 200, Timeout: 10 * time.Minute, WorkspaceBytes: 8 << 20, OutputBytes: 1 << 20}
	startAgentWith(t, rt, sched, func(c *AgentConfig, _ *logstore.Config) { c.MaxLimits = max })
	spec := cluster.StepSpec{Image: "base", CPU: 1, MemoryBytes: 256 << 20, Workspace: "ws1",
		Pids: 100, Timeout: time.Minute, WorkspaceBytes: 4 << 20, OutputBytes: 1 << 20,
		Args: []string{"sh", "-c", "grep 'Max processes' /proc/self/limits | awk '{print $3}' > pids; df -k /workspace | tail -n 1 > df"}}
	sched.assign(cluster.Step{ID: "in-1", State: cluster.StatePlaced, Node: "n1", Attempts: 1, Spec: spec})
	spec.Pids = 201
	// The scheduler does not place it on n1 (past its maxima): put it
	// there, as an older scheduler might.
	sched.place(cluster.Step{ID: "past-1", State: cluster.StatePlaced, Node: "n1", Attempts: 1, Spec: spec})
	sched.waitFor(t, "both exits", func() bool { return len(sched.exits) == 2 })
	sched.mu.Lock()
	defer sched.mu.Unlock()
	if sched.registered.MaxLimits != max {
		t.Errorf("registered max_limits %+v, want %+v", sched.registered.MaxLimits, max)
	}
	if rec := sched.exits["in-1"]; rec.State != cluster.StateExited || rec.ExitCode != 0 {
		t.Errorf("in-1: %+v, want exited 0", rec)
	}
	if b, _ := sched.file("ws1", "pids"); strings.TrimSpace(b) != "100" {
		t.Errorf("max processes inside in-1 = %q, want its pids limit 100", b)
	}
	b, _ := sched.file("ws1", "df")
	if f := strings.Fields(b); len(f) < 2 {
		t.Errorf("df /workspace inside in-1: %q", b)
	} else if kib, _ := strconv.Atoi(f[1]); kib > 4096 || kib < 3000 {
		t.Errorf("df /workspace inside in-1: %d KiB, want its workspace limit of 4 MiB", kib)
	}
	rec := sched.exits["past-1"]
	if rec.State != cluster.StateFailed || !strings.Contains(rec.Reason, "pids 201 exceeds this node's maximum of 200 (agentd serve --max-pids)") {
		t.Errorf("past-1: %+v, want failed naming the pids maximum and its flag", rec)
	}
	if !rec.Phases.Created.IsZero() {
		t.Errorf("past-1 had a sandbox created: %+v", rec.Phases)
	}
}
