package agentd

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/oci"
)

const (
	baseImage   = "rodon.local/base:latest"
	pythonImage = "rodon.local/python:latest"
)

// newTestRuntime connects to Rodon's containerd with a data dir of the
// test's own, and checks after the test that nothing was left behind.
func newTestRuntime(t *testing.T) *Runtime {
	t.Helper()
	testenv.RequireContainerd(t)
	cfg := DefaultRuntimeConfig()
	cfg.DataDir = t.TempDir()
	cfg.KillGrace = 2 * time.Second
	rt, err := NewRuntime(t.Context(), cfg, testenv.Logger(t))
	if err != nil {
		t.Fatalf("NewRuntime() = %v", err)
	}
	t.Cleanup(func() {
		testenv.CheckNoLeaks(t, cfg.Namespace, cfg.CgroupParent)
		ents, _ := os.ReadDir(workspacesDir(cfg))
		for _, e := range ents {
			t.Errorf("workspace copy left behind: %s", e.Name())
		}
		rt.Close()
	})
	return rt
}

var stepSeq atomic.Int64

func newStep(t *testing.T, args ...string) Step {
	return Step{ID: cluster.StepID(fmt.Sprintf("t-%d-%d", time.Now().UnixNano()%1e9, stepSeq.Add(1))), Image: baseImage, Args: args}
}

func runStep(t *testing.T, rt *Runtime, st Step) (cluster.ExitRecord, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	rec, err := rt.Run(t.Context(), st, &stdout, &stderr)
	if err != nil {
		t.Fatalf("Run(%v) = %v", st.Args, err)
	}
	return rec, stdout.String(), stderr.String()
}

func TestRunsUnderGVisor(t *testing.T) {
	rt := newTestRuntime(t)
	rec, out, errOut := runStep(t, rt, newStep(t, "sh", "-c", "uname -r; dmesg | head -n 2"))
	if rec.ExitCode != 0 || rec.State != cluster.StateExited {
		t.Fatalf("record = %+v, stderr %q", rec, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 3 || !strings.Contains(lines[0], "gvisor") && !strings.HasPrefix(lines[0], "4.4.0") {
		t.Errorf("uname -r = %q, want gVisor's kernel banner", lines[0])
	}
	if !strings.Contains(out, "gVisor") {
		t.Errorf("dmesg output %q does not mention gVisor", out)
	}
	if host, _ := os.ReadFile("/proc/sys/kernel/osrelease"); strings.TrimSpace(string(host)) == lines[0] {
		t.Errorf("sandbox kernel %q equals the host's", lines[0])
	}
	p := rec.Phases
	if p.Created.IsZero() || p.Started.Before(p.Created) || p.FirstOutput.Before(p.Started) || p.Exited.Before(p.Started) || p.CleanedUp.Before(p.Exited) {
		t.Errorf("phases out of order: %+v", p)
	}
}

func TestExitCodes(t *testing.T) {
	rt := newTestRuntime(t)
	for _, tt := range []struct {
		args []string
		want int
	}{
		{[]string{"true"}, 0},
		{[]string{"false"}, 1},
		{[]string{"sh", "-c", "exit 7"}, 7},
		{[]string{"sh", "-c", "exit 200"}, 200},
		{[]string{"sh", "-c", "kill -9 $$"}, 137},
	} {
		rec, _, errOut := runStep(t, rt, newStep(t, tt.args...))
		if rec.ExitCode != tt.want || rec.TerminatedBy != cluster.ByExit {
			t.Errorf("Run(%q) = exit %d by %s, want %d by exit (stderr %q)", tt.args, rec.ExitCode, rec.TerminatedBy, tt.want, errOut)
		}
	}
}

func TestPythonImage(t *testing.T) {
	rt := newTestRuntime(t)
	st := newStep(t, "python3", "-c", "import pandas, matplotlib; print(pandas.__version__)")
	st.Image = pythonImage
	rec, out, errOut := runStep(t, rt, st)
	if rec.ExitCode != 0 {
		t.Fatalf("import pandas, matplotlib: exit %d, stderr %q", rec.ExitCode, errOut)
	}
	if strings.TrimSpace(out) == "" {
		t.Errorf("no pandas version printed")
	}
}

func TestWorkspaceRoundTrip(t *testing.T) {
	rt := newTestRuntime(t)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "in.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "gone.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	st := newStep(t, "sh", "-c", "pwd; cat in.txt; echo made > /workspace/out.txt; mkdir -p sub; echo deep > sub/f; rm gone.txt; ln -s /etc/passwd link")
	st.Workspace = ws
	rec, out, errOut := runStep(t, rt, st)
	if rec.ExitCode != 0 {
		t.Fatalf("exit %d, stderr %q", rec.ExitCode, errOut)
	}
	if out != "/workspace\nhello\n" {
		t.Errorf("stdout = %q, want pwd and in.txt", out)
	}
	for name, want := range map[string]string{"out.txt": "made\n", "sub/f": "deep\n", "in.txt": "hello\n"} {
		got, err := os.ReadFile(filepath.Join(ws, name))
		if err != nil || string(got) != want {
			t.Errorf("workspace %s = %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "gone.txt")); !os.IsNotExist(err) {
		t.Errorf("gone.txt still in workspace (stat: %v)", err)
	}
	if target, err := os.Readlink(filepath.Join(ws, "link")); err != nil || target != "/etc/passwd" {
		t.Errorf("link = %q, %v; want a symlink copied as a symlink", target, err)
	}
}

// TestHostInvisible attacks the sandbox's isolation: the step looks for the
// host's secrets, processes and the containerd socket.
func TestHostInvisible(t *testing.T) {
	rt := newTestRuntime(t)
	// The secret is passed in two halves so that the step's own command
	// line, which it may print, does not contain it.
	secret := fmt.Sprintf("rodon-host-secret-%d", time.Now().UnixNano())
	half := len(secret) / 2
	secretFile := filepath.Join("/var/lib/rodon", secret)
	if err := os.MkdirAll("/var/lib/rodon", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secretFile, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(secretFile) })
	hostShadow, err := os.ReadFile("/etc/shadow")
	if err != nil {
		t.Fatal(err)
	}
	// A host process with a distinctive command line.
	marker := exec.Command("sleep", "31337.5")
	if err := marker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { marker.Process.Kill(); marker.Wait() })
	script := `
cat /etc/shadow
cat "/var/lib/rodon/$A$B" 2>/dev/null
grep -r "$A$B" /var /etc /root /run /tmp /home 2>/dev/null | head -n 3
echo procs:; for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done
test -S /run/rodon/containerd/containerd.sock && echo SOCKET-VISIBLE
find / -xdev -type s 2>/dev/null | sed 's/^/host socket: /'
echo end
`
	st := newStep(t, "sh", "-c", script)
	st.Env = []string{"A=" + secret[:half], "B=" + secret[half:]}
	rec, out, errOut := runStep(t, rt, st)
	if rec.State != cluster.StateExited || !strings.HasSuffix(out, "end\n") {
		t.Fatalf("record %+v, stdout %q, stderr %q", rec, out, errOut)
	}
	all := out + errOut
	if strings.Contains(all, secret) {
		t.Errorf("host secret visible in the sandbox:\n%s", all)
	}
	for _, line := range strings.Split(string(hostShadow), "\n") {
		if user, rest, _ := strings.Cut(line, ":"); user == "root" && len(rest) > 3 && strings.Contains(all, line) {
			t.Errorf("host /etc/shadow line for root visible in the sandbox")
		}
	}
	if strings.Contains(all, "31337.5") {
		t.Errorf("host process visible in the sandbox:\n%s", all)
	}
	for _, line := range strings.Split(out, "\n") {
		if line == "SOCKET-VISIBLE" || strings.HasPrefix(line, "host socket: /") {
			t.Errorf("host socket visible in the sandbox: %s", line)
		}
	}
}

func TestMissingCommandFailsFast(t *testing.T) {
	rt := newTestRuntime(t)
	start := time.Now()
	rec, _, _ := runStep(t, rt, newStep(t, "/no/such/command", "arg"))
	if rec.State != cluster.StateFailed {
		t.Fatalf("state = %s, want failed (record %+v)", rec.State, rec)
	}
	if !strings.Contains(rec.Reason, "/no/such/command") || !strings.Contains(rec.Reason, "not found") {
		t.Errorf("reason = %q, want it to name the missing command", rec.Reason)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("failing took %v, want fast", d)
	}
}

func TestMissingImage(t *testing.T) {
	rt := newTestRuntime(t)
	st := newStep(t, "true")
	st.Image = "rodon.local/nope:latest"
	rec, _, _ := runStep(t, rt, st)
	if rec.State != cluster.StateFailed || !strings.Contains(rec.Reason, "nope") {
		t.Errorf("record = %+v, want failed naming the image", rec)
	}
}

func TestLargeOutput(t *testing.T) {
	rt := newTestRuntime(t)
	// About 10 MB on stdout and 1 MB on stderr, interleaved in time.
	rec, out, errOut := runStep(t, rt, newStep(t, "sh", "-c", "seq 1 1400000 & seq 1 150000 >&2; wait"))
	if rec.ExitCode != 0 {
		t.Fatalf("exit %d", rec.ExitCode)
	}
	want := func(n int) string {
		var b strings.Builder
		for i := 1; i <= n; i++ {
			fmt.Fprintf(&b, "%d\n", i)
		}
		return b.String()
	}
	if w := want(1400000); out != w {
		t.Errorf("stdout: got %d bytes, want %d, equal prefix %d", len(out), len(w), commonPrefix(out, w))
	}
	if w := want(150000); errOut != w {
		t.Errorf("stderr: got %d bytes, want %d, equal prefix %d", len(errOut), len(w), commonPrefix(errOut, w))
	}
	if rec.Stdout != int64(len(out)) || rec.Stderr != int64(len(errOut)) {
		t.Errorf("record counts %d/%d, want %d/%d", rec.Stdout, rec.Stderr, len(out), len(errOut))
	}
}

func commonPrefix(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

func TestLimits(t *testing.T) {
	rt := newTestRuntime(t)
	t.Run("memory", func(t *testing.T) {
		st := newStep(t, "sh", "-c", "head -c 400m /dev/zero | tail > /dev/null; echo survived")
		st.Limits = oci.Limits{MemoryBytes: 64 << 20}
		rec, out, errOut := runStep(t, rt, st)
		if rec.TerminatedBy != cluster.ByOOM {
			t.Errorf("memory hog: record %+v (stdout %q, stderr %q), want terminated_by oom", rec, out, errOut)
		}
	})
	t.Run("pids", func(t *testing.T) {
		// Start far more sleepers than allowed and count those that
		// exist: forks past the limit must fail inside the sandbox.
		// bash gives up when a fork fails; the outer shell then counts
		// the processes with builtins only (no fork needed).
		st := newStep(t, "sh", "-c", `bash -c 'for i in $(seq 1 100); do sleep 30 & done'; set -- /proc/[0-9]*; echo $#`)
		st.Limits = oci.Limits{Pids: 32}
		rec, out, errOut := runStep(t, rt, st)
		n, err := strconv.Atoi(strings.TrimSpace(out))
		if rec.ExitCode != 0 || err != nil || n > 32 || n < 20 {
			t.Errorf("100 sleepers under a pids limit of 32: %d processes counted (%q), record %+v; want at most 32", n, out, rec)
		}
		if !strings.Contains(errOut, "fork: Resource temporarily unavailable") {
			t.Errorf("stderr %q, want bash's fork failure (EAGAIN)", trim(errOut))
		}
	})
	t.Run("fork bomb", func(t *testing.T) {
		st := newStep(t, "sh", "-c", "bomb() { bomb | bomb & }; bomb; sleep 100")
		st.Limits = oci.Limits{Pids: 64}
		st.Timeout = 4 * time.Second
		rec, _, _ := runStep(t, rt, st)
		if rec.State != cluster.StateExited || rec.TerminatedBy != cluster.ByTimeout {
			t.Errorf("fork bomb: record %+v, want it contained until its timeout", rec)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		st := newStep(t, "sleep", "100")
		st.Timeout = 2 * time.Second
		rec, _, _ := runStep(t, rt, st)
		if rec.TerminatedBy != cluster.ByTimeout {
			t.Errorf("record %+v, want terminated_by timeout", rec)
		}
		if late := rec.Phases.Exited.Sub(rec.Phases.Started) - st.Timeout; late > time.Second || late < 0 {
			t.Errorf("step ended %v after its deadline, want within 1s", late)
		}
	})
	t.Run("cpu", func(t *testing.T) {
		// A cold sandbox boots without the step's CPU quota and gets it
		// before the step starts: a busy loop of 2 s under a quota of 0.2
		// CPU may use about 0.4 s of CPU, whatever the boot used.
		st := newStep(t, "timeout", "2", "sh", "-c", "while :; do :; done")
		st.Limits = oci.Limits{CPU: 0.2}
		sb, err := rt.Create(t.Context(), st)
		if err != nil {
			t.Fatalf("Create() = %v", err)
		}
		defer sb.Destroy(context.WithoutCancel(t.Context()))
		if r := sb.checkLimits(sb.step.Limits); len(r) > 0 {
			t.Errorf("limits of a cold sandbox before its step: %v", r)
		}
		before := cpuUsage(t, sb.cgroupPath())
		var out, errOut bytes.Buffer
		rec, err := rt.runIn(t.Context(), sb, sb.step, &out, &errOut)
		used := cpuUsage(t, sb.cgroupPath()) - before
		if err != nil || rec.ExitCode != 124 {
			t.Fatalf("busy loop: record %+v, %v (stderr %q), want exit 124 from timeout", rec, err, errOut.String())
		}
		if wall := rec.Phases.Exited.Sub(rec.Phases.Started); used > time.Duration(float64(wall)*0.2*1.5) {
			t.Errorf("busy loop under 0.2 CPU used %v of CPU in %v, want at most 0.3 of it", used, wall)
		}
	})
	t.Run("still works", func(t *testing.T) {
		rec, out, _ := runStep(t, rt, newStep(t, "echo", "ok"))
		if rec.ExitCode != 0 || out != "ok\n" {
			t.Errorf("after the limit tests: %+v, %q", rec, out)
		}
	})
}

func trim(s string) string {
	if len(s) > 400 {
		return s[:400] + "..."
	}
	return s
}

func TestCancel(t *testing.T) {
	rt := newTestRuntime(t)
	ctx, cancel := context.WithCancel(t.Context())
	st := newStep(t, "sh", "-c", "trap '' TERM; echo ready; sleep 100")
	time.AfterFunc(1500*time.Millisecond, cancel)
	var out bytes.Buffer
	rec, err := rt.Run(ctx, st, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != cluster.StateCancelled || rec.TerminatedBy != cluster.ByUser || rec.ExitCode != 137 {
		t.Errorf("record %+v, want cancelled by user with 137 (SIGTERM ignored)", rec)
	}
}

func TestProbe(t *testing.T) {
	rt := newTestRuntime(t)
	if h := rt.Probe(t.Context(), baseImage); h.State != cluster.NodeReady {
		t.Errorf("Probe() = %+v, want ready", h)
	}
	if h := rt.Probe(t.Context(), "rodon.local/nope:latest"); h.State != cluster.NodeDegraded || len(h.Reasons) == 0 {
		t.Errorf("Probe(missing image) = %+v, want degraded with a reason", h)
	}
}

// cpuUsage reads the CPU time used by the processes of the sandbox cgroup
// cg so far (cgroup v1 cpuacct.usage or v2 cpu.stat usage_usec).
func cpuUsage(t *testing.T, cg string) time.Duration {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(cgroupRoot, "cpuacct", cg, "cpuacct.usage")); err == nil {
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatalf("cpuacct.usage of %s: %v", cg, err)
		}
		return time.Duration(n)
	}
	b, err := os.ReadFile(filepath.Join(cgroupRoot, cg, "cpu.stat"))
	if err != nil {
		t.Fatalf("CPU usage of sandbox cgroup %s: %v", cg, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("cpu.stat of %s: %v", cg, err)
			}
			return time.Duration(n) * time.Microsecond
		}
	}
	t.Fatalf("cpu.stat of %s has no usage_usec", cg)
	return 0
}

// TestCreateCancelledLeavesNothing: a cold create whose context ends
// while runsc makes the sandbox (an agent stopping) fails or finishes, and
// either way leaves no shim, runsc process, cgroup or mount behind once
// its sandbox is destroyed (newTestRuntime checks).
func TestCreateCancelledLeavesNothing(t *testing.T) {
	rt := newTestRuntime(t)
	for _, after := range []time.Duration{30 * time.Millisecond, 120 * time.Millisecond, 220 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(t.Context(), after)
		sb, err := rt.Create(ctx, newStep(t, "true"))
		cancel()
		if err == nil {
			if err := sb.Destroy(context.WithoutCancel(t.Context())); err != nil {
				t.Errorf("cancelled after %v: Destroy() = %v", after, err)
			}
		}
		t.Logf("create cancelled after %v: %v", after, err)
	}
	if left := testenv.Leftovers(t.Context(), rt.cfg.Namespace, rt.cfg.CgroupParent); len(left) > 0 {
		t.Errorf("left behind by cancelled creates: %q", left)
	}
}
