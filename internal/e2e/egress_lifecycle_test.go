package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// TestEgressLifecycle runs 100 networked steps, some cancelled and some
// ended by their timeout, and SIGKILLs agentd while steps run. While no
// agent runs, a running step's traffic must not leave its sandbox (the
// filter is gone with agentd, and the node's rules drop what it did not
// pass); after the restart the step is adopted and its filter attached
// again. At the end no namespace, veth, TCX link, NAT rule or pinned
// object is left.
func TestEgressLifecycle(t *testing.T) {
	testenv.RequireContainerd(t)
	testenv.RequireNetAdmin(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	w := newWorld(t)
	platformFile := filepath.Join(t.TempDir(), "platform")
	os.WriteFile(platformFile, nil, 0o644)
	// A node TTL long enough for agentd to be dead a while and come back
	// before its steps are lost: the pinger must be adopted, not lost.
	f := &fleet{wsRoot: t.TempDir(), nodeTTL: 30 * time.Second}
	startSchedulers(t, f, 1)
	dataDir := t.TempDir()
	agent := startEgressAgent(t, f, w, "n1", dataDir, platformFile, "ready")
	c := newClient(t, f.urls())
	ctx := context.Background()

	// The pinger connects to the public stand-in five times a second.
	pinger := fmt.Sprintf(`import socket, time
while True:
    try:
        socket.create_connection((%q, 80), timeout=0.5).close()
    except OSError:
        pass
    time.sleep(0.2)`, w.publicAddr)
	if _, err := c.SubmitStep(ctx, api.StepRequest{ID: "pinger", Image: "python", CPU: 0.2, MemoryBytes: 128 << 20,
		Args: []string{"python3", "-c", pinger}, Timeout: api.Duration(5 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	public := w.hosts["public"]
	waitFor(t, 60*time.Second, "the pinger to reach the public stand-in", func() bool { return public.hits.Load() >= 3 })

	var ids []string
	for i := range 100 {
		req := api.StepRequest{ID: fmt.Sprintf("net-%03d", i), Image: "base", CPU: 0.05, MemoryBytes: 64 << 20,
			Args: []string{"sh", "-c", "exit 0"}}
		switch {
		case i%10 == 3: // cancelled while it runs
			req.Args = []string{"sleep", "300"}
		case i%10 == 7: // ended by its timeout
			req.Args = []string{"sleep", "300"}
			req.Timeout = api.Duration(2 * time.Second)
		}
		if _, err := c.SubmitStep(ctx, req); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, req.ID)
	}
	ended := func() int {
		n := 0
		for _, id := range ids {
			if s, err := c.Step(ctx, id); err == nil && isTerminal(s.State) {
				n++
			}
		}
		return n
	}
	waitFor(t, 3*time.Minute, "40 of the steps to end", func() bool { return ended() >= 40 })

	first := agent
	agent.kill()
	// With agentd gone, its TCX links are gone: the pinger's SYNs must
	// stop at the node's rules. Allow a moment for a connect in flight.
	time.Sleep(time.Second)
	hits := public.hits.Load()
	time.Sleep(3 * time.Second)
	if got := public.hits.Load(); got != hits {
		t.Errorf("with agentd killed, the pinger reached the public stand-in %d more times; want none (fail closed)", got-hits)
	}

	agent = startEgressAgent(t, f, w, "n1", dataDir, platformFile, "ready")
	hits = public.hits.Load()
	// The new agent first destroys the sandboxes of steps no longer
	// assigned and adopts the pinger after them, while it starts the
	// queued steps: on a slow 2-vCPU host the pinger (0.2 CPU) was adopted
	// 16 s after the agent was ready and still had no connect through by
	// 30 s (CI at 2fb4b64).
	waitFor(t, 90*time.Second, "the adopted pinger to reach the public stand-in again", func() bool { return public.hits.Load() > hits+2 })

	for _, id := range append(ids, "pinger") {
		if s, err := c.Step(ctx, id); err == nil && !isTerminal(s.State) && (id == "pinger" || strings.HasSuffix(id, "3")) {
			waitFor(t, 60*time.Second, id+" to start", func() bool {
				s, err := c.Step(ctx, id)
				return err == nil && (s.State == "running" || isTerminal(s.State))
			})
			if _, err := c.CancelStep(ctx, id, "test"); err != nil && !strings.Contains(err.Error(), "ended") {
				t.Errorf("cancel %s: %v", id, err)
			}
		}
	}
	deadline := time.Now().Add(4 * time.Minute)
	for ended() != len(ids) {
		if time.Now().After(deadline) {
			for _, id := range ids {
				if s, err := c.Step(ctx, id); err == nil && !isTerminal(s.State) {
					t.Logf("%s: %s attempts %d cancel %+v events %+v", id, s.State, s.Attempts, s.Cancel, s.Events)
					for _, p := range []*proc{first, agent} {
						for _, line := range strings.Split(p.out.String(), "\n") {
							if strings.Contains(line, `"`+id) {
								t.Logf("  %s: %s", p.name, line)
							}
						}
					}
				}
			}
			t.Fatalf("steps did not all end within 4 minutes")
		}
		time.Sleep(time.Second)
	}
	waitFor(t, 60*time.Second, "the pinger to end", func() bool {
		s, err := c.Step(ctx, "pinger")
		return err == nil && isTerminal(s.State)
	})
	// Cleanup of the last sandboxes follows their exit.
	waitFor(t, 60*time.Second, "every sandbox network to be gone", func() bool {
		return len(sandboxNetworks(t, w)) == 0
	})
	agent.stop(30 * time.Second)
	if n := egressLinks(t); n != 0 {
		t.Errorf("%d TCX links of the egress filter left after agentd stopped", n)
	}
	out, err := exec.Command(bin+"/agentd", "cleanup", "--node-id", "n1", "--data-dir", dataDir,
		"--node-netns", w.nodePath(), "--dns", "none", "--remove-nat").CombinedOutput()
	if err != nil {
		t.Fatalf("agentd cleanup --remove-nat: %v\n%s", err, out)
	}
	if tables := nftTables(t, w); strings.Contains(tables, "rodon") {
		t.Errorf("nft tables in the node namespace after cleanup: %q", tables)
	}
	checkNodeNetClean(t, w)
}

func isTerminal(state string) bool {
	switch state {
	case "exited", "failed", "cancelled", "lost", "expired":
		return true
	}
	return false
}

// sandboxNetworks lists sandbox veths in the node namespace and sandbox
// namespaces.
func sandboxNetworks(t *testing.T, w *world) []string {
	t.Helper()
	var left []string
	inNS(w.nodeH, func() error {
		names, err := netInterfaces()
		for _, n := range names {
			if strings.HasPrefix(n, "rv") {
				left = append(left, n)
			}
		}
		return err
	})
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "rodon-") {
			left = append(left, e.Name())
		}
	}
	return left
}

// egressLinks counts the TCX links in the kernel whose program is the
// egress filter.
func egressLinks(t *testing.T) int {
	t.Helper()
	it := new(link.Iterator)
	defer it.Close()
	n := 0
	for it.Next() {
		info, err := it.Link.Info()
		it.Link.Close()
		if err != nil || info.Type != link.TCXType {
			continue
		}
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatalf("iterate BPF links: %v", err)
	}
	return n
}

func nftTables(t *testing.T, w *world) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", w.nodeNS, "nft", "list", "tables").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list tables in node namespace: %v\n%s", err, out)
	}
	return string(out)
}

// denyBPFLinkEnv makes the test binary, run as a wrapper, install a seccomp
// filter that refuses bpf(BPF_LINK_CREATE) with EPERM and then exec its
// arguments: an agentd whose kernel refuses every TCX attach, as on a node
// where attaching fails.
const denyBPFLinkEnv = "RODON_E2E_DENY_BPF_LINK"

// execDenyingBPFLink is called by TestMain when denyBPFLinkEnv is set.
func execDenyingBPFLink(argv []string) {
	const (
		auditArchX8664 = 0xc000003e
		bpfLinkCreate  = 28
		retAllow       = 0x7fff0000
		retErrno       = 0x00050000
	)
	ld := func(off uint32) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}
	}
	jeq := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k, Jt: jt, Jf: jf}
	}
	ret := func(k uint32) unix.SockFilter { return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: k} }
	prog := []unix.SockFilter{
		ld(4), jeq(auditArchX8664, 1, 0), ret(retAllow),
		ld(0), jeq(unix.SYS_BPF, 0, 3),
		ld(16), jeq(bpfLinkCreate, 0, 1), ret(retErrno | uint32(unix.EPERM)),
		ret(retAllow),
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "no_new_privs:", err)
		os.Exit(126)
	}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		fmt.Fprintln(os.Stderr, "seccomp:", errno)
		os.Exit(126)
	}
	env := make([]string, 0, len(os.Environ()))
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, denyBPFLinkEnv+"=") {
			env = append(env, e)
		}
	}
	err := syscall.Exec(argv[0], argv, env)
	fmt.Fprintln(os.Stderr, "exec:", err)
	os.Exit(126)
}

// TestEgressAttachFails runs agentd where the kernel refuses to attach the
// egress filter: the node must register as degraded, say why, and receive
// no steps.
func TestEgressAttachFails(t *testing.T) {
	testenv.RequireContainerd(t)
	testenv.RequireNetAdmin(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	w := newWorld(t)
	platformFile := filepath.Join(t.TempDir(), "platform")
	os.WriteFile(platformFile, nil, 0o644)
	f := &fleet{wsRoot: t.TempDir()}
	startSchedulers(t, f, 1)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	agent := startEgressAgent(t, f, w, "n1", t.TempDir(), platformFile, "degraded", "env", denyBPFLinkEnv+"=1", self)
	c := newClient(t, f.urls())
	ctx := context.Background()
	n, err := c.Node(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	reasons := strings.Join(n.DegradedReasons, "; ")
	t.Logf("node n1 is %s: %s", n.State, reasons)
	if !strings.Contains(reasons, "attach egress filter") {
		t.Errorf("degraded reasons = %q, want one naming the failed attach", reasons)
	}
	if _, err := c.SubmitStep(ctx, api.StepRequest{ID: "unplaced", Image: "base", CPU: 0.1, MemoryBytes: 64 << 20,
		Args: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	s, err := c.Step(ctx, "unplaced")
	if err != nil {
		t.Fatal(err)
	}
	if s.State != "queued" || s.Node != "" {
		t.Errorf("step on a cluster whose only node is degraded: state %s node %q, want queued on none", s.State, s.Node)
	}
	if _, err := c.CancelStep(ctx, "unplaced", "test"); err != nil {
		t.Fatal(err)
	}
	agent.stop(30 * time.Second)
	checkNodeNetClean(t, w)
}
