package agentd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/manifest"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/scheduler/schedulertest"
)

func startAgent(t *testing.T, rt *Runtime, sched Scheduler) *logstore.Store {
	t.Helper()
	return startAgentWith(t, rt, sched, nil)
}

// startAgentWith is startAgent with the agent's and its log store's
// configurations edited.
func startAgentWith(t *testing.T, rt *Runtime, sched Scheduler, edit func(*AgentConfig, *logstore.Config)) *logstore.Store {
	t.Helper()
	logs, stop := runTestAgent(t, rt, sched, edit)
	t.Cleanup(stop)
	return logs
}

// runTestAgent starts an agent as startAgentWith does, and returns the
// func that stops it (and waits until its Run returned).
func runTestAgent(t *testing.T, rt *Runtime, sched Scheduler, edit func(*AgentConfig, *logstore.Config)) (*logstore.Store, func()) {
	t.Helper()
	return runAgentWithPool(t, rt, sched, edit, nil)
}

// runAgentWithPool is runTestAgent for an agent that runs the warm pool
// p, if not nil.
func runAgentWithPool(t *testing.T, rt *Runtime, sched Scheduler, edit func(*AgentConfig, *logstore.Config), p *Pool) (*logstore.Store, func()) {
	t.Helper()
	cfg := logstore.DefaultConfig()
	cfg.Dir = t.TempDir()
	acfg := DefaultAgentConfig()
	acfg.Node = "n1"
	acfg.Address = netip.MustParseAddrPort("127.0.0.1:7200")
	acfg.Capacity = cluster.Resources{CPU: 2, MemoryBytes: 4 << 30}
	acfg.Heartbeat = 200 * time.Millisecond
	acfg.PollWait = time.Second
	acfg.ProbeImage = baseImage
	if edit != nil {
		edit(&acfg, &cfg)
	}
	logs, err := logstore.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAgent(acfg, rt, sched, logs, rt.logger)
	if err != nil {
		t.Fatal(err)
	}
	a.pool = p
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	return logs, sync.OnceFunc(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("agent did not stop within 30s of cancel")
		}
	})
}

func TestAgentRunsAssignedStep(t *testing.T) {
	rt := newTestRuntime(t)
	sched := newRecordingScheduler(t)
	startAgent(t, rt, sched)
	sched.assign(cluster.Step{ID: "a-1", State: cluster.StatePlaced, Node: "n1", Attempts: 1, Spec: cluster.StepSpec{
		Image: "base", Args: []string{"sh", "-c", "echo line >> log.txt; exit 3"}, CPU: 1, MemoryBytes: 256 << 20, Workspace: "ws-1",
	}})
	sched.waitFor(t, "cleanup of a-1", func() bool { return len(sched.reports) > 0 && sched.reports[len(sched.reports)-1] == "cleaned up" })
	want := []string{"register ready", "phase starting", "phase running", "exit 3 exit", "cleaned up"}
	if fmt.Sprint(sched.reports) != fmt.Sprint(want) {
		t.Errorf("reports = %q, want %q", sched.reports, want)
	}
	if b, ok := sched.file("ws-1", "log.txt"); b != "line\n" {
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
		Image: "base", Args: []string{"sh", "-c", "touch ran"}, CPU: 1, MemoryBytes: 256 << 20, Workspace: "ws-1",
		EnvError: "the value of environment variable K does not open with the env key of scheduler member m1",
	}})
	sched.waitFor(t, "the exit of e-1", func() bool { _, ok := sched.exits["e-1"]; return ok })
	sched.mu.Lock()
	rec := sched.exits["e-1"]
	sched.mu.Unlock()
	if rec.State != cluster.StateFailed || !strings.Contains(rec.Reason, "environment variable K does not open") {
		t.Errorf("exit record = %+v, want failed with the env error as its reason", rec)
	}
	if _, ok := sched.file("ws-1", "ran"); ok {
		t.Error("the step ran without its environment")
	}
}

// TestAgentCancelOrder: a step that ignores SIGTERM is cancelled; the
// cancel is confirmed only after its exit was reported.
func TestAgentCancelOrder(t *testing.T) {
	rt := newTestRuntime(t)
	rt.cfg.KillGrace = time.Second
	sched := newRecordingScheduler(t)
	logs := startAgent(t, rt, sched)
	sched.assign(cluster.Step{ID: "c-1", State: cluster.StatePlaced, Node: "n1", Attempts: 1, Spec: cluster.StepSpec{
		Image: "base", Args: []string{"sh", "-c", "trap '' TERM; echo up; sleep 100"}, CPU: 1, MemoryBytes: 256 << 20,
	}})
	sched.waitFor(t, "c-1 running", func() bool { return sched.steps["c-1"].State == cluster.StateRunning })
	// Cancelled once its trap is set (it printed): "running" is reported
	// as soon as the process starts, before sh has read its script.
	waitOutput(t, logs, "c-1", "up\n")
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
	spec := cluster.StepSpec{Image: "base", CPU: 1, MemoryBytes: 256 << 20, Workspace: "ws-1",
		Pids: 100, Timeout: time.Minute, WorkspaceBytes: 4 << 20, OutputBytes: 1 << 20,
		Args: []string{"sh", "-c", "grep 'Max processes' /proc/self/limits | awk '{print $3}' > pids; df -k /workspace | tail -n 1 > df"}}
	sched.assign(cluster.Step{ID: "in-1", State: cluster.StatePlaced, Node: "n1", Attempts: 1, Spec: spec})
	spec.Pids = 201
	// The scheduler does not place it on n1 (past its maxima): put it
	// there, as an older scheduler might.
	sched.place(cluster.Step{ID: "past-1", State: cluster.StatePlaced, Node: "n1", Attempts: 1, Spec: spec})
	sched.waitFor(t, "both exits", func() bool { return len(sched.exits) == 2 })
	pids, _ := sched.file("ws-1", "pids")
	b, _ := sched.file("ws-1", "df")
	sched.mu.Lock()
	defer sched.mu.Unlock()
	if sched.registered.MaxLimits != max {
		t.Errorf("registered max_limits %+v, want %+v", sched.registered.MaxLimits, max)
	}
	if rec := sched.exits["in-1"]; rec.State != cluster.StateExited || rec.ExitCode != 0 {
		t.Errorf("in-1: %+v, want exited 0", rec)
	}
	if strings.TrimSpace(pids) != "100" {
		t.Errorf("max processes inside in-1 = %q, want its pids limit 100", pids)
	}
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

// TestAgentWorkspaceFromStore, with the real scheduler and its local
// blob store: a step sees at /workspace the revision its assignment
// names (materialised from the blob cache, modes kept) and the library
// read-only at /library; what it leaves comes back as a result manifest
// with the contents' digests, uploaded with only the blobs the store
// lacked, and committed with its exit as the step's revision; the link it
// planted to a host file is not in it. A step that changes nothing makes
// no revision; one whose uploads fail ends without one and says so.
// Nothing of the attempts stays on the node.
func TestAgentWorkspaceFromStore(t *testing.T) {
	rt := newTestRuntime(t)
	sched := newRecordingScheduler(t)
	startAgent(t, rt, sched)
	sched.waitNode("n1")
	base := sched.seed("ws-1", map[string]string{"in.txt": "hello\n", "tool.sh*": "#!/bin/sh\necho tool ran\n", "gone.txt": "x"}) // the head
	sched.seed("ws-lib", map[string]string{"ref.txt": "reference\n"})
	script := `cat in.txt > seen.txt; ./tool.sh >> seen.txt; echo made > out.txt; rm gone.txt; mkdir empty
cat /library/ref.txt > lib.txt
if echo x > /library/ref.txt || touch /library/new; then echo yes > library-writable; fi
ln -s /etc/passwd passwd; ln -s in.txt alias`
	spec := cluster.StepSpec{Image: "base", Args: []string{"sh", "-c", script}, CPU: 1, MemoryBytes: 256 << 20, Workspace: "ws-1", Library: "ws-lib"}
	sched.assign(cluster.Step{ID: "w-1", State: cluster.StatePlaced, Node: "n1", Attempts: 1, Spec: spec})
	sched.waitFor(t, "the exit of w-1", func() bool { _, ok := sched.exits["w-1"]; return ok })
	sched.mu.Lock()
	rec, uploads, events := sched.exits["w-1"], slices.Clone(sched.uploads), slices.Clone(sched.events["w-1"])
	sched.mu.Unlock()
	if rec.State != cluster.StateExited || rec.ExitCode != 0 || rec.Workspace == nil || rec.Workspace.Base != base.Manifest {
		t.Fatalf("exit record %+v (workspace %+v), want exited 0 with a result from %s", rec, rec.Workspace, base.Manifest)
	}
	step, _ := sched.c.State().Step("w-1")
	if step.Revision == "" {
		t.Fatalf("step w-1 made no revision: %+v", step)
	}
	tree := sched.tree("ws-1", step.Revision)
	for p, want := range map[string]string{"seen.txt": "hello\ntool ran\n", "out.txt": "made\n", "lib.txt": "reference\n", "in.txt": "hello\n"} {
		e, ok := tree[p]
		got, _ := sched.file("ws-1", p)
		if !ok || got != want || e.SHA256 != manifest.Digest([]byte(want)) || e.Mode != 0o644 {
			t.Errorf("result %s: %+v, %q; want %q, mode 0644, its digest", p, e, got, want)
		}
	}
	if e := tree["tool.sh"]; e.Mode != 0o755 {
		t.Errorf("tool.sh in the result: %+v, want mode 0755", e)
	}
	if e, ok := tree["alias"]; !ok || e.Type != "symlink" || e.Target != "in.txt" {
		t.Errorf("alias in the result: %+v, %v; want a link to in.txt", e, ok)
	}
	for _, p := range []string{"passwd", "gone.txt", "library-writable"} {
		if e, ok := tree[p]; ok {
			t.Errorf("result holds %s: %+v", p, e)
		}
	}
	if e, ok := tree["empty"]; !ok || e.Type != "dir" {
		t.Errorf("empty directory in the result: %+v, %v", e, ok)
	}
	// Only what the store lacked was asked for: not in.txt nor tool.sh.
	if len(uploads) != 1 {
		t.Fatalf("uploads %+v, want one request", uploads)
	}
	for _, b := range uploads[0].Blobs {
		if b.SHA256 == manifest.Digest([]byte("hello\n")) {
			t.Errorf("the upload asked for in.txt, which the base has")
		}
	}
	var fc *api.FilesChanged
	var dropped bool
	for _, e := range events {
		switch {
		case e.Kind == cluster.EventFilesChanged:
			fc = e.Files
		case e.Kind == cluster.EventWarning && e.Warning.Cause == api.WarningWorkspacePathsDropped:
			dropped = strings.Contains(e.Message, "passwd -> /etc/passwd")
		}
	}
	if fc == nil || !slices.Equal(fc.Added, []string{"alias", "empty", "lib.txt", "out.txt", "seen.txt"}) || !slices.Equal(fc.Removed, []string{"gone.txt"}) || len(fc.Modified) != 0 {
		t.Errorf("files_changed %+v, want the diff of the manifests", fc)
	}
	if rev, err := sched.cl.Revision(t.Context(), "ws-1", step.Revision); err != nil || rev.Author.Kind != "step" || !slices.Equal(rev.Changes.Added, fc.Added) {
		t.Errorf("revision %+v, %v; want authored by the step, with the event's changes", rev, err)
	}
	if !dropped {
		t.Errorf("no warning that the link to /etc/passwd was dropped: %+v", events)
	}

	// Nothing changed: no revision, nothing uploaded.
	spec.Args = []string{"cat", "in.txt"}
	sched.assign(cluster.Step{ID: "w-2", State: cluster.StatePlaced, Node: "n1", Attempts: 1, Spec: spec})
	sched.waitFor(t, "the exit of w-2", func() bool { _, ok := sched.exits["w-2"]; return ok })
	sched.mu.Lock()
	if rec := sched.exits["w-2"]; rec.ExitCode != 0 || rec.Workspace != nil || len(sched.uploads) != 1 {
		t.Errorf("unchanged tree: %+v (workspace %+v), %d upload requests; want exit 0, no result, no upload", rec, rec.Workspace, len(sched.uploads))
	}
	sched.mu.Unlock()

	// Every upload fails: the exit is reported without a result.
	sched.c.FailNext(uploadTries, http.StatusServiceUnavailable, schedulertest.Match(http.MethodPut, "/v1/blobs/"))
	spec.Args = []string{"sh", "-c", "echo lost > lost.txt"}
	sched.assign(cluster.Step{ID: "w-3", State: cluster.StatePlaced, Node: "n1", Attempts: 1, Spec: spec})
	waitLong(t, sched, time.Minute, "the exit of w-3", func() bool { _, ok := sched.exits["w-3"]; return ok })
	sched.mu.Lock()
	rec, events = sched.exits["w-3"], sched.events["w-3"]
	sched.mu.Unlock()
	if rec.ExitCode != 0 || rec.Workspace != nil {
		t.Errorf("failed upload: %+v (workspace %+v), want exit 0 without a result", rec, rec.Workspace)
	}
	if ws := eventsOfCluster(events, cluster.EventWarning); len(ws) == 0 || ws[len(ws)-1].Warning.Cause != api.WarningWorkspaceNotSaved {
		t.Errorf("failed upload: warnings %+v, want workspace_not_saved", ws)
	}
	if _, ok := sched.file("ws-1", "lost.txt"); ok {
		t.Error("lost.txt is in the head")
	}
	sched.waitFor(t, "cleanup of w-3", func() bool { return sched.reports[len(sched.reports)-1] == "cleaned up" })
	noTrees(t, rt)
}

// noTrees fails t if an attempt's tree or a temporary file of the blob
// cache is left on the node.
func noTrees(t *testing.T, rt *Runtime) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() error {
		ents, _ := os.ReadDir(treesDir(rt.cfg))
		if len(ents) > 0 {
			return fmt.Errorf("attempt trees left: %v", ents)
		}
		return nil
	})
	filepath.WalkDir(filepath.Join(rt.cfg.DataDir, "blob-cache"), func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".tmp-") {
			t.Errorf("blob cache temporary file left: %s", p)
		}
		return nil
	})
}

// TestAgentAdoptsWorkspaceStep: an agent that stops while a step with a
// workspace runs leaves its sandbox and tree; the next agent of the node
// adopts the step, and the tree the step left after the restart is still
// saved as its revision (the base fetched again through the re-read
// assignment). The first agent is made to look dead by its owner label.
func TestAgentAdoptsWorkspaceStep(t *testing.T) {
	rtA := newTestRuntime(t)
	rtA.owner = "999999999:0" // no such process: dead once it stops
	sched := newRecordingScheduler(t)
	_, stopA := runTestAgent(t, rtA, sched, nil)
	sched.waitNode("n1")
	sched.seed("ws-1", map[string]string{"in.txt": "hello\n"})
	spec := cluster.StepSpec{Image: "base", Args: []string{"sh", "-c", "sleep 4; cat in.txt > late.txt"}, CPU: 1, MemoryBytes: 256 << 20, Workspace: "ws-1"}
	sched.assign(cluster.Step{ID: "ad-1", State: cluster.StatePlaced, Node: "n1", Attempts: 1, Spec: spec})
	sched.waitFor(t, "ad-1 running", func() bool { return sched.steps["ad-1"].State == cluster.StateRunning })
	stopA()
	if ents, _ := os.ReadDir(treesDir(rtA.cfg)); len(ents) != 1 {
		t.Fatalf("trees after the first agent stopped: %v, want the running attempt's", ents)
	}
	rtB, err := NewRuntime(t.Context(), rtA.cfg, rtA.logger)
	if err != nil {
		t.Fatal(err)
	}
	defer rtB.Close()
	startAgent(t, rtB, sched)
	waitLong(t, sched, time.Minute, "the exit of ad-1", func() bool { _, ok := sched.exits["ad-1"]; return ok })
	sched.mu.Lock()
	rec := sched.exits["ad-1"]
	sched.mu.Unlock()
	if rec.ExitCode != 0 || rec.Workspace == nil {
		t.Fatalf("adopted step's exit %+v (workspace %+v), want exit 0 with a result", rec, rec.Workspace)
	}
	if got, _ := sched.file("ws-1", "late.txt"); got != "hello\n" {
		t.Errorf("late.txt in the head = %q, want what the step wrote after the restart", got)
	}
	sched.waitFor(t, "cleanup of ad-1", func() bool { return sched.reports[len(sched.reports)-1] == "cleaned up" })
	noTrees(t, rtB)
}

// waitOutput waits (at most 30 s) until the stdout of step id in logs
// starts with want.
func waitOutput(t *testing.T, logs *logstore.Store, id cluster.StepID, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r, err := logs.Open(id, logstore.ReadOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out strings.Builder
	for !strings.HasPrefix(out.String(), want) {
		f, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("step %s printed %q, waiting for %q: %v", id, out.String(), want, err)
		}
		if f.Kind == api.KindStdout {
			p, _ := f.Output()
			out.Write(p)
		}
	}
}
