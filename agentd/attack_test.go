package agentd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/oci"
)

// The attack tests of issue 15 ("Nothing unbounded"): each attack runs
// against the real stack (containerd, runsc) and is followed by a normal
// step that must still run.

// allocatedTree is what the regular files under dir occupy on disk.
func allocatedTree(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += allocatedBytes(p)
		}
		return nil
	})
	return n
}

// watchImages samples, until stop is called, the largest disk use of any
// workspace image under the runtime's data directory.
func watchImages(rt *Runtime) (stop func() int64) {
	var peak atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			imgs, _ := filepath.Glob(filepath.Join(workspacesDir(rt.cfg), "*.img"))
			for _, img := range imgs {
				if n := allocatedBytes(img); n > peak.Load() {
					peak.Store(n)
				}
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	return func() int64 { close(done); wg.Wait(); return peak.Load() }
}

// TestAttackWorkspaceQuota: a 10 TiB sparse file and a dd past the quota.
// The step sees ENOSPC, the image on the node never takes more than the
// quota, the workspace that comes back holds the sparse file as a sparse
// file, and a normal step afterwards gets it copied in at once, with the
// default workspace size when it names none.
func TestAttackWorkspaceQuota(t *testing.T) {
	rt := newTestRuntime(t)
	ws := t.TempDir()
	const quota = 64 << 20
	st := newStep(t, "sh", "-c", `truncate -s 10T /workspace/huge && echo truncated
dd if=/dev/zero of=/workspace/fill bs=1M count=256 2>&1; echo "dd exit $?"
df -k /workspace | tail -n 1; sleep 1`)
	st.Workspace, st.WorkspaceBytes = ws, quota
	before, _ := statSpace(ws)
	stop := watchImages(rt)
	start := time.Now()
	rec, out, errOut := runStep(t, rt, st)
	peak := stop()
	after, _ := statSpace(ws)
	t.Logf("attack step took %v; stdout:\n%s", time.Since(start).Round(time.Millisecond), out)
	if rec.State != cluster.StateExited || rec.ExitCode != 0 {
		t.Fatalf("record %+v, stderr %q", rec, errOut)
	}
	if !strings.Contains(out, "truncated") {
		t.Errorf("truncate -s 10T failed inside the sandbox: %q", out)
	}
	if !strings.Contains(out, "No space left on device") || strings.Contains(out, "dd exit 0") {
		t.Errorf("dd of 256 MiB into a 64 MiB workspace: %q, want ENOSPC", out)
	}
	if peak > quota {
		t.Errorf("the workspace image took %d bytes of the node's disk, want at most the quota %d", peak, quota)
	}
	huge := filepath.Join(ws, "huge")
	if fi, err := os.Stat(huge); err != nil || fi.Size() != 10<<40 {
		t.Errorf("huge after read-back: %v, %v; want a 10 TiB file", fi, err)
	}
	if n := allocatedTree(t, ws); n > quota {
		t.Errorf("the workspace read back takes %d bytes, want at most the quota %d", n, quota)
	}
	t.Logf("image peak %d bytes; workspace read back: %d bytes allocated; free space of its file system %d -> %d (other users of the disk move it too)",
		peak, allocatedTree(t, ws), before.avail, after.avail)

	// A normal step: the workspace (10 TiB apparent) comes in at once,
	// and without a workspace size the default applies.
	norm := newStep(t, "sh", "-c", "ls -l huge fill | wc -l; df -B1 /workspace | tail -n 1")
	norm.Workspace = ws
	start = time.Now()
	rec, out, errOut = runStep(t, rt, norm)
	if rec.ExitCode != 0 || !strings.HasPrefix(out, "2\n") {
		t.Fatalf("normal step after the attack: record %+v, stdout %q, stderr %q", rec, out, errOut)
	}
	fields := strings.Fields(strings.Split(out, "\n")[1])
	total, _ := strconv.ParseInt(fields[1], 10, 64)
	if d := cluster.DefaultLimits.WorkspaceBytes; total > d || total < d*9/10 {
		t.Errorf("df /workspace of a step without a workspace size: %d bytes, want about the default %d", total, d)
	}
	t.Logf("normal step with the 10 TiB sparse file copied in and out: %v", time.Since(start).Round(time.Millisecond))
}

// TestAttackWorkspaceTooLarge: a workspace bigger than the step's quota is
// refused before the step starts, with the limit named, and nothing of it
// is changed.
func TestAttackWorkspaceTooLarge(t *testing.T) {
	rt := newTestRuntime(t)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "big"), bytes.Repeat([]byte("x"), 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	st := newStep(t, "touch", "ran")
	st.Workspace, st.WorkspaceBytes = ws, 2<<20
	rec, _, _ := runStep(t, rt, st)
	if rec.State != cluster.StateFailed || !strings.Contains(rec.Reason, "workspace") || !strings.Contains(rec.Reason, "2MiB") {
		t.Errorf("record %+v, want failed naming the workspace limit", rec)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
		t.Error("the step ran")
	}
}

// hostTasks counts the host's processes and threads (/proc/loadavg).
func hostTasks(t *testing.T) int {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	_, total, _ := strings.Cut(f[3], "/")
	n, _ := strconv.Atoi(total)
	return n
}

// TestAttackForkBomb: a fork bomb under the default pids limit. The step
// ends (at its timeout), the sandbox's host tasks never pass the host
// backstop (oci.HostPids of the default), the node's task count stays
// bounded, and containerd and the runtime go on running steps.
func TestAttackForkBomb(t *testing.T) {
	rt := newTestRuntime(t)
	st := newStep(t, "sh", "-c", "bomb() { bomb | bomb & }; bomb; sleep 100")
	st.Timeout = 8 * time.Second // the default pids limit applies: none is set
	base := hostTasks(t)
	var peakHost, peakCgroup atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if n := int64(hostTasks(t) - base); n > peakHost.Load() {
				peakHost.Store(n)
			}
			for _, f := range []string{"pids" + rt.cfg.CgroupParent, "unified" + rt.cfg.CgroupParent, rt.cfg.CgroupParent} {
				dirs, _ := filepath.Glob(filepath.Join(cgroupRoot, f, "t-*", "pids.current"))
				for _, d := range dirs {
					if n, err := readInt(d); err == nil && n > peakCgroup.Load() {
						peakCgroup.Store(n)
					}
				}
			}
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	start := time.Now()
	rec, _, errOut := runStep(t, rt, st)
	close(done)
	wg.Wait()
	t.Logf("fork bomb: record %s/%s after %v; peak host tasks +%d, peak sandbox pids.current %d (backstop %d, kernel pid_max 32768)",
		rec.State, rec.TerminatedBy, time.Since(start).Round(time.Millisecond), peakHost.Load(), peakCgroup.Load(), oci.HostPids(cluster.DefaultLimits.Pids))
	// Contained: the step runs to its timeout (or, now and then, gVisor
	// kills its shell with SIGKILL first); an exit 128 would be the
	// sandbox crashing at the host backstop (gvisor#2490).
	if rec.State != cluster.StateExited || rec.TerminatedBy != cluster.ByTimeout && rec.ExitCode != 137 {
		t.Errorf("fork bomb: record %+v (stderr %q), want it contained until its timeout", rec, trim(errOut))
	}
	if limit := oci.HostPids(cluster.DefaultLimits.Pids); peakCgroup.Load() >= limit {
		t.Errorf("the sandbox reached %d host tasks, its backstop %d (gVisor crashes there)", peakCgroup.Load(), limit)
	}
	if peakHost.Load() > 2*oci.HostPids(cluster.DefaultLimits.Pids) {
		t.Errorf("the node's task count grew by %d during the fork bomb, want it bounded by the sandbox's limit", peakHost.Load())
	}
	rec, out, _ := runStep(t, rt, newStep(t, "echo", "ok"))
	if rec.ExitCode != 0 || out != "ok\n" {
		t.Errorf("a normal step after the fork bomb: %+v, %q", rec, out)
	}
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// sandboxProcesses lists the host processes of the sandbox with containerd
// id id: runsc's sandbox and gofer, and the shim, whose command lines name
// it.
func sandboxProcesses(id string) []string {
	var out []string
	for _, p := range testenv.Processes(id) {
		if strings.Contains(p, "runsc") {
			out = append(out, p)
		}
	}
	return out
}

// TestAttackSurvivingProcess: a step leaves `setsid sleep 1000` behind and
// exits (and, second, is cancelled while it ignores SIGTERM). When the exit
// is reported, nothing of the sandbox runs any more, and the cancel is
// confirmed only after the exit.
func TestAttackSurvivingProcess(t *testing.T) {
	rt := newTestRuntime(t)
	rt.cfg.KillGrace = time.Second
	sched := newRecordingScheduler(t)
	var mu sync.Mutex
	atExit := map[cluster.StepID][]string{}
	sched.onExit = func(x cluster.StepExit) {
		procs := sandboxProcesses(fmt.Sprintf("%s.%d", x.Record.Step, x.Attempt))
		mu.Lock()
		atExit[x.Record.Step] = procs
		mu.Unlock()
	}
	startAgent(t, rt, sched)
	spec := cluster.StepSpec{Image: "base", CPU: 1, MemoryBytes: 256 << 20, Workspace: "ws-1",
		Args: []string{"sh", "-c", "setsid sleep 1000 & echo started > started; exit 0"}}
	sched.assign(cluster.Step{ID: "bg-1", State: cluster.StatePlaced, Node: "n1", Attempts: 1, Spec: spec})
	sched.waitFor(t, "cleanup of bg-1", func() bool { return len(sched.reports) > 0 && sched.reports[len(sched.reports)-1] == "cleaned up" })

	spec.Args = []string{"sh", "-c", "trap '' TERM; setsid sh -c 'trap \"\" TERM HUP; sleep 1000' & sleep 1000"}
	sched.assign(cluster.Step{ID: "bg-2", State: cluster.StatePlaced, Node: "n1", Attempts: 1, Spec: spec})
	sched.waitFor(t, "bg-2 running", func() bool { return sched.steps["bg-2"].State == cluster.StateRunning })
	time.Sleep(500 * time.Millisecond)
	if len(sandboxProcesses("bg-2.1")) == 0 {
		t.Fatalf("no runsc process names the running sandbox bg-2.1: the check at the exit would prove nothing")
	}
	sched.cancel("bg-2")
	sched.waitFor(t, "cleanup of bg-2", func() bool { return sched.reports[len(sched.reports)-1] == "cleaned up" })
	// A normal step after them.
	spec.Args = []string{"sh", "-c", "cat started"}
	sched.assign(cluster.Step{ID: "ok-1", State: cluster.StatePlaced, Node: "n1", Attempts: 1, Spec: spec})
	sched.waitFor(t, "cleanup of ok-1", func() bool {
		_, ok := sched.exits["ok-1"]
		return ok && sched.reports[len(sched.reports)-1] == "cleaned up"
	})

	mu.Lock()
	defer mu.Unlock()
	for _, id := range []cluster.StepID{"bg-1", "bg-2"} {
		if procs, ok := atExit[id]; !ok || len(procs) > 0 {
			t.Errorf("%s: processes of the sandbox when its exit was reported: %q (reported: %v), want none", id, procs, ok)
		}
	}
	want := []string{"register ready", "phase starting", "phase running", "exit 0 exit", "cleaned up",
		"phase starting", "phase running", "cancel requested", "exit 137 user", "cancel confirmed", "cleaned up",
		"phase starting", "phase running", "exit 0 exit", "cleaned up"}
	if fmt.Sprint(sched.reports) != fmt.Sprint(want) {
		t.Errorf("reports = %q, want %q", sched.reports, want)
	}
}

// TestAttackYes: `yes` for 60 seconds (10 in -short mode) into a log capped
// at 1 MiB: the log keeps at most the cap, the output_truncated event in the
// log and reported to the scheduler says how much was dropped, and the
// tail kept is what yes printed last. Then 200 MB of output from a step
// that names no cap: the default of 64 MiB applies.
func TestAttackYes(t *testing.T) {
	rt := newTestRuntime(t)
	sched := newRecordingScheduler(t)
	logs := startAgent(t, rt, sched)
	secs := 60
	if testing.Short() {
		secs = 10
	}
	const capBytes = 1 << 20
	spec := cluster.StepSpec{Image: "base", CPU: 1, MemoryBytes: 256 << 20, OutputBytes: capBytes,
		Args: []string{"sh", "-c", fmt.Sprintf("timeout %d yes; echo the end", secs)}}
	sched.assign(cluster.Step{ID: "yes-1", State: cluster.StatePlaced, Node: "n1", Attempts: 1, Spec: spec})
	var maxDisk atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if n := dirBytes(logs.Dir()); n > maxDisk.Load() {
				maxDisk.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	start := time.Now()
	deadline := time.Duration(secs+60) * time.Second
	waitLong(t, sched, deadline, "exit of yes-1", func() bool { _, ok := sched.exits["yes-1"]; return ok })
	close(stop)
	wg.Wait()
	took := time.Since(start)
	rec := sched.exits["yes-1"]
	kept, frames := keptOutput(t, logs, "yes-1")
	trunc := api.EventsOf(frames, cluster.EventOutputTruncated)
	t.Logf("yes for %ds: %d bytes written, %d kept, %d frames; log on disk at most %d bytes; step took %v", secs, rec.Stdout, len(kept), len(frames), maxDisk.Load(), took.Round(time.Millisecond))
	if rec.State != cluster.StateExited || rec.ExitCode != 0 {
		t.Fatalf("yes-1: record %+v", rec)
	}
	if len(kept) > capBytes {
		t.Errorf("kept %d bytes of output, want at most the cap %d", len(kept), capBytes)
	}
	if len(trunc) != 1 || trunc[0].Output == nil || trunc[0].Output.DroppedBytes != rec.Stdout-int64(len(kept)) {
		t.Errorf("output_truncated events %+v, want one dropping %d bytes", trunc, rec.Stdout-int64(len(kept)))
	}
	if !bytes.HasSuffix(kept, []byte("y\ny\nthe end\n")) || !bytes.HasPrefix(kept, []byte("y\ny\n")) {
		t.Errorf("kept output does not hold yes's head and the step's last line")
	}
	sched.mu.Lock()
	reported := sched.events["yes-1"]
	sched.mu.Unlock()
	if e := eventsOfCluster(reported, cluster.EventOutputTruncated); len(e) != 1 || e[0].Output == nil || e[0].Output.DroppedBytes != trunc[0].Output.DroppedBytes {
		t.Errorf("events reported to the scheduler %+v, want the output_truncated event", reported)
	}
	if maxDisk.Load() > 3*capBytes {
		t.Errorf("the log took %d bytes of disk while yes ran, want about its cap", maxDisk.Load())
	}

	// The default cap.
	spec.OutputBytes = 0
	spec.Args = []string{"sh", "-c", "yes | head -c 200000000"}
	sched.assign(cluster.Step{ID: "yes-2", State: cluster.StatePlaced, Node: "n1", Attempts: 1, Spec: spec})
	waitLong(t, sched, 3*time.Minute, "exit of yes-2", func() bool { _, ok := sched.exits["yes-2"]; return ok })
	kept, frames = keptOutput(t, logs, "yes-2")
	trunc = api.EventsOf(frames, cluster.EventOutputTruncated)
	d := cluster.DefaultLimits.OutputBytes
	t.Logf("200 MB with the default cap: kept %d bytes, events %+v", len(kept), trunc)
	if int64(len(kept)) > d || int64(len(kept)) < d/2 || len(trunc) != 1 || trunc[0].Output == nil || trunc[0].Output.DroppedBytes != 200000000-int64(len(kept)) {
		t.Errorf("200 MB of output under the default cap: kept %d, events %+v; want at most %d kept and the rest counted", len(kept), trunc, d)
	}
	rec, out, _ := runStep(t, rt, newStep(t, "echo", "ok"))
	if rec.ExitCode != 0 || out != "ok\n" {
		t.Errorf("a normal step after yes: %+v, %q", rec, out)
	}
}

func waitLong(t *testing.T, f *recordingScheduler, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		f.mu.Lock()
		done := ok()
		f.mu.Unlock()
		if done {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t.Fatalf("timed out waiting for %s; reports %q", what, f.reports)
}

func dirBytes(dir string) int64 {
	var n int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		n += allocatedBytes(filepath.Join(dir, e.Name()))
	}
	return n
}

// keptOutput reads a finished log: its stdout, and all its frames.
func keptOutput(t *testing.T, logs *logstore.Store, id cluster.StepID) ([]byte, []api.Frame) {
	t.Helper()
	r, err := logs.Open(id, logstore.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out bytes.Buffer
	var frames []api.Frame
	for {
		f, err := r.Next(t.Context())
		if errors.Is(err, io.EOF) {
			return out.Bytes(), frames
		}
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
		if f.Kind == api.KindStdout {
			p, _ := f.Output()
			out.Write(p)
		}
	}
}

func eventsOfCluster(evs []cluster.Event, kind string) []cluster.Event {
	var out []cluster.Event
	for _, e := range evs {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// TestTinyWritesLogCost: a step printing 100,000 single bytes, through
// the real stack into the agent's log, without coalescing (a frame per
// write, as before issue 15) and with the default: what the log takes on
// disk.
func TestTinyWritesLogCost(t *testing.T) {
	rt := newTestRuntime(t)
	script := `i=0; while [ $i -lt 100000 ]; do printf x; i=$((i+1)); done`
	for _, tc := range []struct {
		name  string
		delay time.Duration
	}{{"a frame per write", 0}, {"coalesced (default)", logstore.DefaultFlushDelay}} {
		t.Run(tc.name, func(t *testing.T) {
			sched := newRecordingScheduler(t)
			logs := startAgentWith(t, rt, sched, func(_ *AgentConfig, c *logstore.Config) { c.FlushDelay = tc.delay })
			sched.assign(cluster.Step{ID: "tiny", State: cluster.StatePlaced, Node: "n1", Attempts: 1,
				Spec: cluster.StepSpec{Image: "base", CPU: 1, MemoryBytes: 256 << 20, Args: []string{"sh", "-c", script}}})
			start := time.Now()
			waitLong(t, sched, 3*time.Minute, "exit of tiny", func() bool { _, ok := sched.exits["tiny"]; return ok })
			kept, frames := keptOutput(t, logs, "tiny")
			disk := dirBytes(logs.Dir())
			var size int64
			ents, _ := os.ReadDir(logs.Dir())
			for _, e := range ents {
				if fi, err := e.Info(); err == nil {
					size += fi.Size()
				}
			}
			t.Logf("%s: %d bytes of output in %d frames; the log's files hold %d bytes (%d allocated); step took %v",
				tc.name, len(kept), len(frames), size, disk, time.Since(start).Round(time.Millisecond))
			if len(kept) != 100000 {
				t.Errorf("kept %d bytes, want 100000", len(kept))
			}
			if tc.delay > 0 && size > 1<<20 {
				t.Errorf("coalesced log holds %d bytes for 100,000 bytes of output, want well under 1 MiB", size)
			}
		})
	}
}
