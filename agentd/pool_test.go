package agentd

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/vishvananda/netns"

	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/netpolicy"
	"github.com/rodon-compute/rodon/oci"
)

// The tests of this file need root, Rodon's containerd, runsc and eBPF
// (the egress filter of the pooled sandboxes' networks): they skip where
// one is missing, and fail under CI=true.

// newPoolEgress gives the test a node network namespace of its own (no
// uplink: nothing a sandbox sends leaves it) with the egress filter.
func newPoolEgress(t *testing.T) *netpolicy.Egress {
	t.Helper()
	testenv.RequireNetAdmin(t)
	var b [3]byte
	rand.Read(b[:])
	name := "rodonpool-" + hex.EncodeToString(b[:])
	func() {
		goruntime.LockOSThread()
		defer goruntime.UnlockOSThread()
		orig, err := netns.Get()
		if err != nil {
			t.Fatal(err)
		}
		defer orig.Close()
		h, err := netns.NewNamed(name)
		if err != nil {
			t.Fatalf("create node namespace %s: %v", name, err)
		}
		if err := netns.Set(orig); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			h.Close()
			netns.DeleteNamed(name)
		})
	}()
	cfg := netpolicy.DefaultConfig()
	cfg.HostNS = filepath.Join(netpolicy.DefaultNSDir, name)
	cfg.NSDir = filepath.Join(t.TempDir(), "netns")
	e, err := netpolicy.NewEgress(netpolicy.EgressConfig{Net: cfg}, testenv.Logger(t))
	if err != nil {
		testenv.Missing(t, "egress filter cannot load: "+err.Error())
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Egress.Close: %v", err)
		}
	})
	return e
}

// newPoolRuntime is newTestRuntime with sandbox networks and a warm pool
// (a budget of 4 sandboxes), run by the test unless an agent runs it
// (agentRuns). After the test the pool is stopped and closed before the
// runtime's leak check.
func newPoolRuntime(t *testing.T, agentRuns bool) (*Runtime, *Pool) {
	t.Helper()
	testenv.RequireContainerd(t)
	e := newPoolEgress(t)
	cfg := DefaultRuntimeConfig()
	cfg.DataDir = t.TempDir()
	cfg.KillGrace = 2 * time.Second
	cfg.Network = e
	cfg.Node = "pool-test"
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
	pcfg := DefaultPoolConfig()
	pcfg.MemoryBudget = 4 * initialCost
	pcfg.DefaultImage = baseImage
	p, err := NewPool(pcfg, rt, nil, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	if agentRuns {
		done <- nil
	} else {
		go func() { done <- p.Run(ctx) }()
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Pool.Run() = %v", err)
		}
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := p.Close(cctx); err != nil {
			t.Errorf("Pool.Close() = %v", err)
		}
		if s := p.Status(); s.Ready+s.Creating != 0 {
			t.Errorf("Status() after Close = %+v, want nothing left", *s)
		}
	})
	return rt, p
}

// waitReady waits until the pool has a ready sandbox of st's class.
func waitReady(t *testing.T, rt *Runtime, p *Pool, st Step) {
	t.Helper()
	c, ok := rt.classOf(t.Context(), st)
	if !ok {
		t.Fatalf("step %s has no pool class", st.ID)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if len(p.ready[c]) == 0 {
			return errPoolEmpty
		}
		return nil
	})
}

var errPoolEmpty = errors.New("no sandbox of the class ready")

func testCounter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// pooledRun is a step run in a claimed sandbox of the pool, as the agent
// runs one: claim, start, wait, quiesce, read back, destroy.
type pooledRun struct {
	sb               *Sandbox
	rec              cluster.ExitRecord
	stdout, stderr   string
	denied           map[netpolicy.Reason]netpolicy.Count
	afterClaim       func(*Sandbox) // checks made once claimed, before the step starts
	claims, destroys int
}

func runPooled(t *testing.T, rt *Runtime, p *Pool, st Step, afterClaim func(*Sandbox)) pooledRun {
	t.Helper()
	waitReady(t, rt, p, st)
	sb := p.claim(t.Context(), rt, st)
	if sb == nil {
		t.Fatalf("claim(%s) = nil with a sandbox of its class ready, want a hit", st.ID)
	}
	run := pooledRun{sb: sb, claims: 1}
	if afterClaim != nil {
		afterClaim(sb)
	}
	var stdout, stderr bytes.Buffer
	rec, err := rt.runIn(t.Context(), sb, st, &stdout, &stderr)
	if err != nil {
		t.Errorf("run %s in pooled sandbox %s: %v", st.ID, sb.ID(), err)
	}
	run.rec, run.stdout, run.stderr = rec, stdout.String(), stderr.String()
	if sb.net != nil {
		if run.denied, err = sb.Denied(); err != nil {
			t.Errorf("egress counters of %s: %v", sb.ID(), err)
		}
	}
	if err := sb.Quiesce(t.Context()); err != nil {
		t.Errorf("Quiesce(%s) = %v", sb.ID(), err)
	}
	if _, err := sb.ReadBack(); err != nil {
		t.Errorf("ReadBack(%s) = %v", sb.ID(), err)
	}
	if err := sb.Destroy(context.WithoutCancel(t.Context())); err != nil {
		t.Errorf("Destroy(%s) = %v", sb.ID(), err)
	} else {
		run.destroys++
	}
	if _, err := rt.client.LoadContainer(rt.nsCtx(t.Context()), sb.ID()); !errdefs.IsNotFound(err) {
		t.Errorf("sandbox %s after its one step: LoadContainer = %v, want it gone", sb.ID(), err)
	}
	return run
}

// TestPoolGVisorOneStepPerSandbox (Done 4): a pooled sandbox runs one
// step and is destroyed. Step A cannot write the read-only root (EROFS)
// and writes /tmp/marker; step B, of the same class and taken from the
// same pool, sees neither marker, in a sandbox of another id.
func TestPoolGVisorOneStepPerSandbox(t *testing.T) {
	rt, p := newPoolRuntime(t, false)
	a := newStep(t, "sh", "-c", `echo A > /marker || echo root=refused; echo A > /tmp/marker && echo tmp=ok`)
	ra := runPooled(t, rt, p, a, nil)
	if ra.rec.ExitCode != 0 || ra.stdout != "root=refused\ntmp=ok\n" || !strings.Contains(ra.stderr, "Read-only file system") {
		t.Errorf("step A: %+v, stdout %q, stderr %q; want the root write refused with EROFS and /tmp written", ra.rec, ra.stdout, ra.stderr)
	}
	b := newStep(t, "sh", "-c", `test -e /marker && echo root-marker; test -e /tmp/marker && echo tmp-marker; ls -A /tmp; echo done`)
	rb := runPooled(t, rt, p, b, nil)
	if rb.rec.ExitCode != 0 || rb.stdout != "done\n" {
		t.Errorf("step B: %+v, stdout %q, stderr %q; want no marker of step A and an empty /tmp", rb.rec, rb.stdout, rb.stderr)
	}
	if ra.sb.ID() == rb.sb.ID() || !strings.HasPrefix(ra.sb.ID(), "pool-") {
		t.Errorf("sandbox ids %s and %s, want two different pooled sandboxes", ra.sb.ID(), rb.sb.ID())
	}
	if claims, destroys := ra.claims+rb.claims, ra.destroys+rb.destroys; claims != destroys || claims != 2 {
		t.Errorf("%d claims, %d destroys; want 2 of each", claims, destroys)
	}
	if hits := testCounter(t, p.metrics.pool.claims.WithLabelValues("hit")); hits != 2 {
		t.Errorf("pool claims hit = %v, want 2", hits)
	}
}

// TestPoolGVisorStepOwnsItsSandbox (Done 4): once claimed, the sandbox has
// the step's limits (read back from the host's cgroups, other values
// than the pool boots with, RLIMIT_NPROC the class's pids), the step's
// environment in its process only (not in the container's spec or
// labels), egress counters of its own (0 at claim, the step's denial
// counted), and the step's workspace and nothing of the previous step's.
func TestPoolGVisorStepOwnsItsSandbox(t *testing.T) {
	rt, p := newPoolRuntime(t, false)
	wsA, wsB := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(wsA, "a.txt"), []byte("mine A\n"), 0o644)
	os.WriteFile(filepath.Join(wsB, "b.txt"), []byte("mine B\n"), 0o644)
	value := testenv.Marker()
	limits := oci.Limits{CPU: 0.5, MemoryBytes: 256 << 20, Pids: cluster.DefaultLimits.Pids}
	st := newStep(t, "bash", "-c", `echo "env=$RODON_POOL_VALUE"; echo "nproc=$(ulimit -u)"; ls -A /workspace; cat /workspace/*.txt
echo new > /workspace/new.txt
exec 3<>/dev/tcp/10.99.0.10/80 && echo connected`)
	st.Env, st.Limits, st.Workspace = []string{"RODON_POOL_VALUE=" + value}, limits, wsA
	ra := runPooled(t, rt, p, st, func(sb *Sandbox) {
		if sb.boot == limits {
			t.Fatalf("pool boot limits %+v equal the step's: the test proves nothing", sb.boot)
		}
		if r := sb.checkLimits(limits); len(r) > 0 {
			t.Errorf("limits after the claim: %q", r)
		}
		if c, err := sb.Denied(); err != nil || countDenied(c) != 0 {
			t.Errorf("egress counters at claim = %v, %v; want 0", c, err)
		}
		assertNotInSandbox(t, rt, sb, value)
	})
	want := "env=" + value + "\nnproc=" + strconv.FormatInt(limits.Pids, 10) + "\na.txt\nmine A\n"
	if ra.stdout != want {
		t.Errorf("step: stdout %q (stderr %q), want %q: its env, the class's pids as RLIMIT_NPROC, its own workspace", ra.stdout, ra.stderr, want)
	}
	if ra.rec.ExitCode == 0 || countDenied(ra.denied) == 0 {
		t.Errorf("connect to a private address: %+v, denied %v; want it refused and counted for this step", ra.rec, ra.denied)
	}
	if b, err := os.ReadFile(filepath.Join(wsA, "new.txt")); err != nil || string(b) != "new\n" {
		t.Errorf("the step's workspace after read-back: new.txt %q, %v; want its write", b, err)
	}

	// The next step of the class sees its own workspace only.
	st2 := newStep(t, "sh", "-c", `ls -A /workspace; test -e /workspace/new.txt && echo leaked; echo "env=$RODON_POOL_VALUE"`)
	st2.Workspace = wsB
	rb := runPooled(t, rt, p, st2, nil)
	if rb.stdout != "b.txt\nenv=\n" {
		t.Errorf("next step: stdout %q (stderr %q), want only its workspace and no env of the previous step", rb.stdout, rb.stderr)
	}

	// A read-only workspace (Addendum): its class's sandbox mounts it
	// read-only, and nothing comes back.
	ro := newStep(t, "sh", "-c", `cat /workspace/b.txt; echo x > /workspace/x 2>&1 || echo refused`)
	ro.Workspace, ro.WorkspaceReadOnly = wsB, true
	p.claim(t.Context(), rt, ro) // a miss that asks for the class
	rr := runPooled(t, rt, p, ro, nil)
	if rr.stdout != "mine B\nrefused\n" || !strings.Contains(rr.stderr, "Read-only file system") {
		t.Errorf("read-only step: stdout %q, stderr %q; want its file read and the write refused (EROFS)", rr.stdout, rr.stderr)
	}
	if _, err := os.Stat(filepath.Join(wsB, "x")); err == nil {
		t.Errorf("a read-only step's write came back")
	}
}

// TestAttackPoolSecretNeverInSpec: a secret given to a pooled sandbox's
// step is in the step's process only, never in what the pooled sandbox
// was made with or labelled with, while the step runs and after.
func TestAttackPoolSecretNeverInSpec(t *testing.T) {
	rt, p := newPoolRuntime(t, false)
	value := testenv.Marker()
	st := newStep(t, "sh", "-c", `test -n "$SECRET_TOKEN" && echo has-secret; sleep 1`)
	st.Env = []string{"SECRET_TOKEN=" + value}
	var wg sync.WaitGroup
	r := runPooled(t, rt, p, st, func(sb *Sandbox) {
		assertNotInSandbox(t, rt, sb, value)
		wg.Add(1)
		go func() { // and while the step runs
			defer wg.Done()
			time.Sleep(500 * time.Millisecond)
			assertNotInSandbox(t, rt, sb, value)
		}()
	})
	wg.Wait()
	if r.stdout != "has-secret\n" {
		t.Errorf("step: stdout %q, stderr %q; want its secret in its env", r.stdout, r.stderr)
	}
}

// assertNotInSandbox fails t if value is in the sandbox's container record
// (spec, labels, extensions), its bundle's config.json, its control
// directory or the pool's log.
func assertNotInSandbox(t *testing.T, rt *Runtime, sb *Sandbox, value string) {
	t.Helper()
	ctx := rt.nsCtx(context.WithoutCancel(t.Context()))
	info, err := sb.container.Info(ctx)
	if err != nil {
		t.Errorf("container info of %s: %v", sb.ID(), err)
		return
	}
	b, _ := json.Marshal(info)
	if testenv.Holds(b, value) {
		t.Errorf("the value is in the container record of pooled sandbox %s (spec or labels)", sb.ID())
	}
	if sb.spec != nil && slicesContainValue(sb.spec.Process.Env, value) {
		t.Errorf("the value is in the pod spec's environment of %s", sb.ID())
	}
	bundles, _ := filepath.Glob(filepath.Join("/run/rodon/containerd/*/rodon", sb.ID(), "config.json"))
	more, _ := filepath.Glob(filepath.Join("/run/containerd/*/rodon", sb.ID(), "config.json"))
	if len(bundles)+len(more) == 0 {
		t.Errorf("no bundle config.json of %s found to look into", sb.ID())
	}
	for _, f := range append(append(bundles, more...), sb.ctlDir) {
		if files := testenv.FilesHolding(t, f, value); len(files) > 0 {
			t.Errorf("the value is in %v", files)
		}
	}
}

func slicesContainValue(env []string, value string) bool {
	for _, e := range env {
		if strings.Contains(e, value) {
			return true
		}
	}
	return false
}

func countDenied(c map[netpolicy.Reason]netpolicy.Count) uint64 {
	var n uint64
	for _, v := range c {
		n += v.Packets
	}
	return n
}

// poolScheduler is a recordingScheduler that keeps the pool status of
// the heartbeats.
type poolScheduler struct {
	*recordingScheduler
	mu   sync.Mutex
	pool *cluster.PoolStatus
}

func (f *poolScheduler) Heartbeat(ctx context.Context, req cluster.Heartbeat) (cluster.HeartbeatResult, error) {
	f.mu.Lock()
	f.pool = req.Pool
	f.mu.Unlock()
	return f.recordingScheduler.Heartbeat(ctx, req)
}

func (f *poolScheduler) lastPool() cluster.PoolStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pool == nil {
		return cluster.PoolStatus{}
	}
	return *f.pool
}

// TestPoolGVisorAgentWarmStep: an agent with a warm pool runs an assigned
// step in a pooled sandbox: the step records a sandbox_warm event made
// before its created phase, its heartbeats carry the pool's status, and
// the pool is made again after the claim.
func TestPoolGVisorAgentWarmStep(t *testing.T) {
	rt, p := newPoolRuntime(t, true)
	sched := &poolScheduler{recordingScheduler: newRecordingScheduler(t)}
	logs, stop := runPoolAgent(t, rt, sched, p)
	t.Cleanup(stop)
	sched.waitNode("n1")
	sched.waitFor(t, "a ready pooled sandbox in a heartbeat", func() bool { return sched.lastPool().Ready >= 1 })
	if s := sched.lastPool(); s.BudgetBytes != p.cfg.MemoryBudget || s.Classes < 1 {
		t.Errorf("heartbeat pool status %+v, want the budget and a class", s)
	}
	sched.assign(cluster.Step{ID: "warm-1", State: cluster.StatePlaced, Node: "n1", Attempts: 1, Spec: cluster.StepSpec{
		Image: "base", Args: []string{"sh", "-c", "echo warm; exit 4"}, CPU: 1, MemoryBytes: 256 << 20,
	}})
	sched.waitFor(t, "cleanup of warm-1", func() bool {
		return len(sched.reports) > 0 && sched.reports[len(sched.reports)-1] == "cleaned up"
	})
	sched.mu.Lock()
	rec, events := sched.exits["warm-1"], eventsOfCluster(sched.events["warm-1"], cluster.EventSandboxWarm)
	sched.mu.Unlock()
	if rec.ExitCode != 4 || rec.State != cluster.StateExited {
		out, _ := keptOutput(t, logs, "warm-1")
		t.Errorf("warm step: %+v, output %q; want exited 4", rec, out)
	}
	if len(events) != 1 || events[0].Warm == nil || events[0].Warm.CreatedAt.IsZero() || !events[0].Warm.CreatedAt.Before(rec.Phases.Created) {
		t.Errorf("sandbox_warm events %+v (created phase %v), want one made before the claim", events, rec.Phases.Created)
	} else if events[0].Warm.Class == "" {
		t.Errorf("sandbox_warm event without its class: %+v", events[0].Warm)
	}
	sched.waitFor(t, "the pool made again", func() bool { return sched.lastPool().Ready >= 1 })
}

// runPoolAgent is runTestAgent (agent_test.go) for an agent that runs the
// warm pool p.
func runPoolAgent(t *testing.T, rt *Runtime, sched Scheduler, p *Pool) (*logstore.Store, func()) {
	t.Helper()
	return runAgentWithPool(t, rt, sched, nil, p)
}

// TestPoolGVisorStopWhileMaking: a pool stopped while it makes a sandbox
// finishes making it, and Close destroys it: nothing is left (runsc's
// cgroups of a task create cut short were).
func TestPoolGVisorStopWhileMaking(t *testing.T) {
	testenv.RequireContainerd(t)
	e := newPoolEgress(t)
	cfg := DefaultRuntimeConfig()
	cfg.DataDir, cfg.Network, cfg.Node = t.TempDir(), e, "pool-test"
	rt, err := NewRuntime(t.Context(), cfg, testenv.Logger(t))
	if err != nil {
		t.Fatalf("NewRuntime() = %v", err)
	}
	defer rt.Close()
	pcfg := DefaultPoolConfig()
	pcfg.MemoryBudget, pcfg.DefaultImage = 4*initialCost, baseImage
	p, err := NewPool(pcfg, rt, nil, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	testenv.Eventually(t, 30*time.Second, func() error {
		if p.Status().Creating == 0 {
			return errPoolEmpty
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Pool.Run() = %v", err)
	}
	if err := p.Close(context.WithoutCancel(t.Context())); err != nil {
		t.Errorf("Pool.Close() = %v", err)
	}
	testenv.CheckNoLeaks(t, cfg.Namespace, cfg.CgroupParent)
}
