package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/pki/pkitest"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// The control plane of TestControlPlaneDenied, at addresses that look
// globally routable (not private, not documentation ranges): the real
// daemons use them on the host's loopback, and stand-ins hold the same
// addresses in the world's inet namespace, where a packet that got past
// the egress filter would land.
var (
	cpScheduler   = netip.MustParseAddr("11.3.0.1")      // member m1: HTTP and Raft
	cpNode1       = netip.MustParseAddr("11.3.0.11")     // agent n1, whose sandboxes are probed
	cpNode2       = netip.MustParseAddr("2600:1f00::12") // agent n2, another node
	cpGateway4    = netip.MustParseAddr("11.3.0.20")     // gateway gw1 (gateway serve), registers itself
	cpGateway6    = netip.MustParseAddr("2600:1f00::20") // gateway gw6, registered through the client
	cpGatewaySeen = netip.MustParseAddr("11.3.0.21")     // gateway gw2, never registered, only seen connecting to n1
	cpPool4       = netip.MustParsePrefix("11.200.0.0/24")
	cpPoolPeer    = netip.MustParseAddr("11.200.0.250") // another sandbox's address in n1's pool
)

// cpProbeScript connects over TCP to every [name, addr, port] of argv[1]
// and sends a UDP datagram to port 7 of each address, all at once, and
// prints one JSON object per attempt.
const cpProbeScript = `
import json, socket, sys, threading, time
lock = threading.Lock()
def rec(**kw):
    with lock:
        print(json.dumps(kw), flush=True)
def fam(a):
    return socket.AF_INET6 if ':' in a else socket.AF_INET
def tcp(name, a, port):
    t0 = time.monotonic()
    s = socket.socket(fam(a), socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((a, port))
        ok, detail = True, 'connected'
    except Exception as e:
        ok, detail = False, type(e).__name__ + ': ' + str(e)
    finally:
        s.close()
    rec(target=name, kind='tcp', port=port, ok=ok, ms=int((time.monotonic() - t0) * 1000), detail=detail)
def udp(name, a):
    s = socket.socket(fam(a), socket.SOCK_DGRAM)
    s.settimeout(1)
    try:
        s.sendto(b'rodon', (a, 7))
        ok, detail = s.recv(64) == b'rodon', 'echo'
    except Exception as e:
        ok, detail = False, type(e).__name__ + ': ' + str(e)
    rec(target=name, kind='udp', port=7, ok=ok, ms=0, detail=detail)
targets = json.loads(sys.argv[1])
threads = [threading.Thread(target=tcp, args=(n, a, p)) for n, a, p in targets]
for n, a in sorted({(n, a) for n, a, p in targets}):
    threads.append(threading.Thread(target=udp, args=(n, a)))
for th in threads:
    th.start()
for th in threads:
    th.join()
`

type cpAttempt struct {
	Target string `json:"target"`
	Kind   string `json:"kind"`
	Port   int    `json:"port"`
	OK     bool   `json:"ok"`
	MS     int    `json:"ms"`
	Detail string `json:"detail"`
}

// TestControlPlaneDenied is SPEC's "Sandboxes never reach the control
// plane": on a node whose scheduler, other node and gateways have public
// addresses, a gVisor step's connects to any of them (and to its own
// node's agent, and to another sandbox's address in the pool) are refused
// at once and counted as platform denials, without any --platform-cidrs,
// while a public stand-in answers. Every daemon runs with mutual TLS.
func TestControlPlaneDenied(t *testing.T) {
	testenv.RequireContainerd(t)
	testenv.RequireNetAdmin(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	hostAddrs := []netip.Addr{cpScheduler, cpNode1, cpNode2, cpGateway4, cpGateway6, cpGatewaySeen}
	addLoopback(t, netns.None(), hostAddrs...)
	w := newWorld(t)
	standIns := append(append([]netip.Addr{}, hostAddrs...), cpPoolPeer)
	addLoopback(t, w.inetH, standIns...)
	names := map[netip.Addr]string{
		cpScheduler: "cp-scheduler", cpNode1: "cp-node1", cpNode2: "cp-node2", cpGateway4: "cp-gateway4",
		cpGateway6: "cp-gateway6", cpGatewaySeen: "cp-gateway-seen", cpPoolPeer: "cp-pool-peer",
	}

	ca := newTLSDir(t)
	for _, id := range []string{"member/m1", "agent/n1", "agent/n2", "operator/ops", "gateway/gw2", "gateway/gw6"} {
		ca.Issue(t, must(pki.ParseIdentity(id)), pki.IssueOptions{})
	}
	// gw1's certificate also serves its public HTTPS listener.
	ca.Issue(t, must(pki.ParseIdentity("gateway/gw1")), pki.IssueOptions{Hosts: []string{cpGateway4.String()}})
	httpPort, raftPort := freePortOn(t, cpScheduler), freePortOn(t, cpScheduler)
	n1Port, n2Port, gwPort := freePortOn(t, cpNode1), freePortOn(t, cpNode2), freePortOn(t, cpGateway4)
	// Stand-ins in inet: port 80 and UDP 7 of every address, and the
	// daemons' own ports, each counting what reaches it.
	ports := map[netip.Addr][]int{cpScheduler: {httpPort, raftPort}, cpNode1: {n1Port}, cpNode2: {n2Port}, cpGateway4: {gwPort}}
	for _, a := range standIns {
		w.hosts[names[a]] = w.serve(t, w.inetH, names[a], a)
		for _, p := range ports[a] {
			w.serveTCP(t, w.hosts[names[a]], p)
		}
	}

	schedURL := "https://" + netip.AddrPortFrom(cpScheduler, uint16(httpPort)).String()
	start(t, "scheduler m1", bin+"/scheduler", "serve", "--node-id", "m1", "--data-dir", t.TempDir(),
		"--raft-addr", netip.AddrPortFrom(cpScheduler, uint16(raftPort)).String(),
		"--http-addr", netip.AddrPortFrom(cpScheduler, uint16(httpPort)).String(),
		"--bootstrap", "--node-ttl", "4s", "--tls-dir", ca.Dir)
	ops := tlsClient(t, ca, "operator/ops", schedURL)
	waitFor(t, 30*time.Second, "member m1 to lead", func() bool {
		ms, err := ops.Members(t.Context())
		return err == nil && len(ms) == 1
	})

	// The other node and the gateways, before n1 starts: n1's first list
	// has them.
	start(t, "agentd n2", bin+"/agentd", "serve", "--scheduler", schedURL, "--node-id", "n2",
		"--data-dir", t.TempDir(), "--listen", netip.AddrPortFrom(cpNode2, uint16(n2Port)).String(),
		"--heartbeat", "500ms", "--cpu", "1", "--memory", "1g",
		"--log-level", "info", "--network", "none", "--tls-dir", ca.Dir)
	waitNode(t, ops, "n2")
	gwListen := netip.AddrPortFrom(cpGateway4, uint16(gwPort)).String()
	gw1Files := pki.DirFiles(ca.Dir, must(pki.ParseIdentity("gateway/gw1")))
	start(t, "gateway gw1", bin+"/gateway", "serve", "--scheduler", schedURL, "--name", "gw1", "--tls-dir", ca.Dir,
		"--listen", gwListen, "--https-cert", gw1Files.Cert, "--https-key", gw1Files.Key,
		"--data-dir", t.TempDir(), "--owner-email", "", "--log-level", "info", "--cluster-listen", freePort(t))
	// A gateway that only registers an address (gateway serve registers
	// the address of its one listener).
	gw6 := tlsClient(t, ca, "gateway/gw6", schedURL)
	if err := gw6.RegisterGateway(t.Context(), "gw6", []netip.Addr{cpGateway6}); err != nil {
		t.Fatalf("RegisterGateway(gw6) = %v", err)
	}
	waitFor(t, 30*time.Second, "gateway gw1 to register "+cpGateway4.String(), func() bool {
		snap, err := ops.Snapshot(t.Context())
		return err == nil && bytes.Contains(snap, []byte(`"name":"gw1","addresses":["`+cpGateway4.String()+`"]`))
	})

	n1 := start(t, "agentd n1", bin+"/agentd", "serve", "--scheduler", schedURL, "--node-id", "n1",
		"--data-dir", t.TempDir(), "--listen", netip.AddrPortFrom(cpNode1, uint16(n1Port)).String(),
		"--heartbeat", "500ms", "--cpu", "2", "--memory", "4g", "--log-level", "info",
		"--network", "egress", "--node-netns", w.nodePath(), "--dns", w.resolver.String(),
		"--pool4", cpPool4.String(), "--tls-dir", ca.Dir)
	waitNode(t, ops, "n1")

	// gw2 never registered: n1 learns its address when it connects with
	// its gateway certificate.
	n1URL := "https://" + netip.AddrPortFrom(cpNode1, uint16(n1Port)).String()
	if code, body := agentGet(t, ca, "gateway/gw2", "agent/n1", cpGatewaySeen, n1URL+"/healthz"); code != 200 {
		t.Fatalf("GET n1 /healthz as gateway/gw2 = %d %s", code, body)
	}
	for _, a := range []netip.Addr{cpScheduler, cpNode1, cpNode2, cpGateway4, cpGateway6, cpGatewaySeen} {
		// n1 logs each prefix it adds with its sources: "11.3.0.1/32 (member m1, scheduler_url)".
		want := `"` + netip.PrefixFrom(a, a.BitLen()).String() + " ("
		waitFor(t, 20*time.Second, "n1 to deny "+a.String(), func() bool { return strings.Contains(n1.out.String(), want) })
	}

	var targets [][3]any
	for _, a := range standIns {
		targets = append(targets, [3]any{names[a], a.String(), 80})
		for _, p := range ports[a] {
			targets = append(targets, [3]any{names[a], a.String(), p})
		}
	}
	targets = append(targets, [3]any{"public", w.publicAddr.String(), 80})
	tj, _ := json.Marshal(targets)
	before := w.hits()
	out, step := runOn(t, ops, ca, "cp-probe", "n1", "python3", "-c", cpProbeScript, string(tj))
	after := w.hits()

	tcpDenied := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var a cpAttempt
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("probe output line %q: %v", line, err)
		}
		t.Logf("%-16s %s/%-5d ok=%-5v %4d ms  %s", a.Target, a.Kind, a.Port, a.OK, a.MS, a.Detail)
		if a.Target == "public" {
			if !a.OK {
				t.Errorf("%s to the public stand-in %v failed: %s", a.Kind, w.publicAddr, a.Detail)
			}
			continue
		}
		if a.OK {
			t.Errorf("%s to %s port %d succeeded: the control plane is reachable from a sandbox", a.Kind, a.Target, a.Port)
		}
		if a.Kind == "tcp" {
			tcpDenied++
			if a.MS >= 1000 || !strings.Contains(a.Detail, "refused") {
				t.Errorf("tcp to %s port %d: %s after %d ms, want refused in under 1000 ms", a.Target, a.Port, a.Detail, a.MS)
			}
		}
	}
	if tcpDenied != len(targets)-1 {
		t.Errorf("%d denied tcp attempts reported, want %d", tcpDenied, len(targets)-1)
	}
	for _, a := range standIns {
		if n := after[names[a]] - before[names[a]]; n != 0 {
			t.Errorf("stand-in %s (%v) received %d connections or datagrams", names[a], a, n)
		}
	}
	if after["public"] == before["public"] {
		t.Errorf("the public stand-in received nothing")
	}
	reasons := map[string]uint64{}
	for _, e := range step.Events {
		if e.Kind != "egress_denied" {
			continue
		}
		eg := e.Egress
		if eg == nil {
			t.Errorf("egress event %+v has no egress payload", e)
			continue
		}
		reasons[eg.Reason] = eg.Packets
		t.Logf("egress_denied: %s %d packets, last to %s", eg.Reason, eg.Packets, eg.Destination)
	}
	// Every denied connect sent at least its SYN, every address a datagram.
	if reasons["platform"] < uint64(tcpDenied+len(standIns)) {
		t.Errorf("platform denials = %d, want at least %d (events by reason: %v)", reasons["platform"], tcpDenied+len(standIns), reasons)
	}

	// The agent's side of the trust boundary: another node's certificate
	// cannot read n1's streams; an operator's can.
	if code, body := agentGet(t, ca, "agent/n2", "agent/n1", netip.Addr{}, n1URL+"/v1/steps/cp-probe/stream?follow=0"); code != http.StatusForbidden ||
		!strings.Contains(body, "agent/n2") {
		t.Errorf("GET n1's stream as agent/n2 = %d %s, want 403 naming agent/n2", code, body)
	}
	n1.stop(30 * time.Second)
	checkNodeNetClean(t, w)
}

// newTLSDir makes a cluster CA and env key with `scheduler tls init`, as
// an operator would, and returns it for issuing certificates into.
func newTLSDir(t *testing.T) *pkitest.CA {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command(bin+"/scheduler", "tls", "init", "--dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("scheduler tls init: %v\n%s", err, out)
	}
	ca, err := pki.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &pkitest.CA{CA: ca, Dir: dir}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// addLoopback puts addrs on the loopback of namespace h (netns.None() for
// the test's own) and removes them when the test ends.
func addLoopback(t *testing.T, h netns.NsHandle, addrs ...netip.Addr) {
	t.Helper()
	var nh *netlink.Handle
	var err error
	if h == netns.None() {
		nh, err = netlink.NewHandle()
	} else {
		nh, err = netlink.NewHandleAt(h)
	}
	if err != nil {
		t.Fatal(err)
	}
	lo, err := nh.LinkByName("lo")
	if err != nil {
		nh.Close()
		t.Fatal(err)
	}
	var added []*netlink.Addr
	t.Cleanup(func() {
		defer nh.Close()
		for _, ad := range added {
			if err := nh.AddrDel(lo, ad); err != nil {
				t.Errorf("remove %v from lo: %v", ad.IPNet, err)
			}
		}
	})
	for _, a := range addrs {
		ad := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}, Flags: unix.IFA_F_NODAD}
		if err := nh.AddrAdd(lo, ad); err != nil {
			t.Fatalf("add %v to lo: %v", a, err)
		}
		added = append(added, ad)
	}
}

// freePortOn returns a TCP port free on address a.
func freePortOn(t *testing.T, a netip.Addr) int {
	t.Helper()
	l, err := net.Listen("tcp", netip.AddrPortFrom(a, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// serveTCP makes stand-in s also accept TCP connections on port, counting
// each.
func (w *world) serveTCP(t *testing.T, s *standIn, port int) {
	t.Helper()
	var ln net.Listener
	if err := inNS(w.inetH, func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(s.addr, uint16(port)).String())
		return err
	}); err != nil {
		t.Fatalf("stand-in %s on port %d: %v", s.name, port, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.hits.Add(1)
			c.Close()
		}
	}()
}

// tlsClient is a scheduler client with the certificate of id from ca's
// directory, verifying that the servers are members.
func tlsClient(t *testing.T, ca *pkitest.CA, id, urls string) *client.Client {
	t.Helper()
	src := loadSource(t, ca, id)
	tr := src.Transport(pki.AllowRoles(pki.RoleMember))
	t.Cleanup(tr.CloseIdleConnections)
	c, err := client.New(urls, client.Options{HTTPClient: &http.Client{Transport: tr}, RetryFor: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func loadSource(t *testing.T, ca *pkitest.CA, id string) *pki.Source {
	t.Helper()
	ident := must(pki.ParseIdentity(id))
	src, err := pki.Load(pki.DirFiles(ca.Dir, ident), ident, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func waitNode(t *testing.T, c *client.Client, id string) {
	t.Helper()
	waitFor(t, 60*time.Second, "node "+id+" ready", func() bool {
		n, err := c.Node(t.Context(), id)
		return err == nil && n.State == "ready"
	})
}

// agentGet sends a GET to an agent as id, from source address from (any
// when zero), verifying the agent is server, and returns the status and
// body.
func agentGet(t *testing.T, ca *pkitest.CA, id, server string, from netip.Addr, url string) (int, string) {
	t.Helper()
	tr := loadSource(t, ca, id).Transport(pki.AllowIdentity(must(pki.ParseIdentity(server))))
	if from.IsValid() {
		tr.DialContext = (&net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: from.AsSlice()}}).DialContext
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("GET %s as %s: %v", url, id, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// runOn runs argv as a python step bound to node, waits for its end and
// returns its stdout (read from the node's stream as an operator) and its
// record.
func runOn(t *testing.T, c *client.Client, ca *pkitest.CA, id, node string, argv ...string) (string, api.Step) {
	t.Helper()
	ctx := t.Context()
	_, err := c.SubmitStep(ctx, api.StepRequest{ID: id, Image: "python", Args: argv, CPU: 0.5, MemoryBytes: 256 << 20,
		Timeout: api.Duration(60 * time.Second), Node: node})
	if err != nil {
		t.Fatalf("submit %s: %v", id, err)
	}
	var st api.Step
	waitFor(t, 90*time.Second, "step "+id+" to end", func() bool {
		st, err = c.Step(ctx, id)
		return err == nil && st.Terminal()
	})
	u, err := c.StreamURL(ctx, id)
	if err != nil {
		t.Fatalf("stream url of %s: %v", id, err)
	}
	tr := loadSource(t, ca, "operator/ops").Transport(pki.AllowIdentity(must(pki.ParseIdentity("agent/" + node))))
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Get(u + "?follow=0")
	if err != nil {
		t.Fatalf("read the stream of %s: %v", id, err)
	}
	defer resp.Body.Close()
	var stdout, stderr bytes.Buffer
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var f api.Frame
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("stream frame %q: %v", sc.Text(), err)
		}
		if f.Kind == api.KindStdout || f.Kind == api.KindStderr {
			b, err := f.Output()
			if err != nil {
				t.Fatal(err)
			}
			map[api.FrameKind]*bytes.Buffer{api.KindStdout: &stdout, api.KindStderr: &stderr}[f.Kind].Write(b)
		}
	}
	if st.State != "exited" || st.ExitCode == nil || *st.ExitCode != 0 {
		t.Fatalf("step %s: state %s, exit %v, want exited 0\nstdout:\n%s\nstderr:\n%s", id, st.State, st.ExitCode, stdout.String(), stderr.String())
	}
	return stdout.String(), st
}
