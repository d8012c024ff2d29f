package netpolicy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rodon-compute/rodon/internal/testenv"
)

// testNode is a network namespace standing in for the node. It has only
// lo: no uplink, so nothing a test does can reach the real network.
type testNode struct {
	path string
	ns   netns.NsHandle
}

func newTestNode(t *testing.T) *testNode {
	t.Helper()
	testenv.RequireNetAdmin(t)
	if _, err := exec.LookPath("nft"); err != nil {
		testenv.Missing(t, "nft binary (apt-get install nftables)")
	}
	path := filepath.Join(t.TempDir(), "node")
	if err := createNS(path); err != nil {
		t.Fatalf("create node namespace: %v", err)
	}
	t.Cleanup(func() {
		if err := removeNS(path); err != nil {
			t.Errorf("remove node namespace: %v", err)
		}
	})
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	n := &testNode{path: path, ns: ns}
	h := n.handle(t)
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("set lo up in node namespace: %v", err)
	}
	return n
}

func (n *testNode) handle(t *testing.T) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(n.ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// vethNames returns the rv* links in the node namespace.
func (n *testNode) vethNames(t *testing.T) []string {
	t.Helper()
	h, err := netlink.NewHandleAt(n.ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, VethPrefix) {
			names = append(names, l.Attrs().Name)
		}
	}
	slices.Sort(names)
	return names
}

func newTestManager(t *testing.T, node *testNode, nsDir string) *Manager {
	t.Helper()
	cfg := DefaultConfig()
	cfg.HostNS = node.path
	cfg.NSDir = nsDir
	m, err := NewManager(cfg, slog.New(slog.NewTextHandler(tLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

type tLogWriter struct{ t *testing.T }

func (w tLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// assertClean fails unless no sandbox namespace is in nsDir and no rv*
// link is in the node namespace.
func assertClean(t *testing.T, node *testNode, nsDir string) {
	t.Helper()
	names, err := listNS(nsDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) > 0 {
		t.Errorf("namespaces left in %s: %v", nsDir, names)
	}
	if links := node.vethNames(t); len(links) > 0 {
		t.Errorf("veths left in node namespace: %v", links)
	}
}

func TestSetupTeardown(t *testing.T) {
	node := newTestNode(t)
	nsDir := filepath.Join(t.TempDir(), "netns")
	m := newTestManager(t, node, nsDir)
	ctx := t.Context()

	a, err := m.Setup(ctx, "a")
	if err != nil {
		t.Fatalf("Setup(a): %v", err)
	}
	b, err := m.Setup(ctx, "b")
	if err != nil {
		t.Fatalf("Setup(b): %v", err)
	}
	if a.Addr4 == b.Addr4 || a.Addr6 == b.Addr6 || a.HostIfname == b.HostIfname || a.NSPath == b.NSPath {
		t.Errorf("sandboxes a and b share names or addresses: %+v, %+v", a, b)
	}
	if _, err := m.Setup(ctx, "a"); err == nil {
		t.Errorf("Setup(a) again = nil error, want one")
	}

	h := node.handle(t)
	for _, sn := range []*SandboxNet{a, b} {
		if want := filepath.Join(nsDir, "rodon-"+sn.ID); sn.NSPath != want {
			t.Errorf("NSPath = %q, want %q", sn.NSPath, want)
		}
		l, err := h.LinkByName(sn.HostIfname)
		if err != nil {
			t.Fatalf("host veth %s of %s: %v", sn.HostIfname, sn.ID, err)
		}
		if l.Attrs().Index != sn.HostIfindex {
			t.Errorf("HostIfindex = %d, want %d (ifindex in the node namespace)", sn.HostIfindex, l.Attrs().Index)
		}
		checkSandboxSide(t, sn)
		checkReachesGateway(t, node, sn)
	}

	out, err := m.nft(ctx, "", "list", "table", "inet", NATTable)
	if err != nil {
		t.Fatalf("list NAT table: %v", err)
	}
	for _, want := range []string{"masquerade", "10.200.0.0/16", "fd00:200::/64", "hook postrouting"} {
		if !strings.Contains(out, want) {
			t.Errorf("nft table inet %s lacks %q:\n%s", NATTable, want, out)
		}
	}
	checkSysctl(t, node, "/proc/sys/net/ipv4/ip_forward", "1")
	checkSysctl(t, node, "/proc/sys/net/ipv6/conf/all/forwarding", "1")

	for _, sn := range []*SandboxNet{a, b} {
		if err := m.Teardown(ctx, sn); err != nil {
			t.Errorf("Teardown(%s): %v", sn.ID, err)
		}
		if err := m.Teardown(ctx, sn); err != nil {
			t.Errorf("Teardown(%s) again: %v", sn.ID, err)
		}
	}
	assertClean(t, node, nsDir)

	// The same ID can be set up again at once after its teardown.
	c, err := m.Setup(ctx, "a")
	if err != nil {
		t.Fatalf("Setup(a) after Teardown(a): %v", err)
	}
	if err := m.Teardown(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveNAT(ctx); err != nil {
		t.Fatalf("RemoveNAT: %v", err)
	}
	if out, err := m.nft(ctx, "", "list", "tables"); err != nil || strings.Contains(out, NATTable) {
		t.Errorf("nft list tables after RemoveNAT = %q, %v; want no table %s", out, err, NATTable)
	}
	assertClean(t, node, nsDir)
}

// checkSandboxSide checks eth0's addresses and the default routes inside
// the sandbox namespace.
func checkSandboxSide(t *testing.T, sn *SandboxNet) {
	t.Helper()
	ns, err := netns.GetFromPath(sn.NSPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	eth0, err := h.LinkByName(SandboxIfname)
	if err != nil {
		t.Fatalf("%s in namespace of %s: %v", SandboxIfname, sn.ID, err)
	}
	addrs, err := h.AddrList(eth0, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	var got []netip.Prefix
	for _, a := range addrs {
		ip, _ := netip.AddrFromSlice(a.IP)
		ones, _ := a.Mask.Size()
		got = append(got, netip.PrefixFrom(ip.Unmap(), ones))
	}
	for _, want := range []netip.Prefix{sn.Addr4, sn.Addr6} {
		if !slices.Contains(got, want) {
			t.Errorf("addresses of %s in %s = %v, want %v among them", SandboxIfname, sn.ID, got, want)
		}
	}
	for _, fam := range []struct {
		family int
		gw     netip.Addr
	}{{netlink.FAMILY_V4, sn.Gateway4}, {netlink.FAMILY_V6, sn.Gateway6}} {
		routes, err := h.RouteList(nil, fam.family)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, r := range routes {
			gw, _ := netip.AddrFromSlice(r.Gw)
			isDefault := r.Dst == nil || r.Dst.IP.IsUnspecified() && func() bool { o, _ := r.Dst.Mask.Size(); return o == 0 }()
			if isDefault && gw.Unmap() == fam.gw && r.LinkIndex == eth0.Attrs().Index {
				found = true
			}
		}
		if !found {
			t.Errorf("routes in %s = %v, want a default route via %v dev %s", sn.ID, routes, fam.gw, SandboxIfname)
		}
	}
}

// checkReachesGateway opens TCP listeners on the gateway addresses in the
// node namespace and connects to them from inside the sandbox namespace:
// first with no egress filter on the veth, which must fail (the node's
// nftables rules drop what the filter did not pass), then with a filter
// whose denylist is empty, which must get through. Every packet stays
// inside the two test namespaces.
func checkReachesGateway(t *testing.T, node *testNode, sn *SandboxNet) {
	t.Helper()
	sbNS, err := netns.GetFromPath(sn.NSPath)
	if err != nil {
		t.Fatal(err)
	}
	defer sbNS.Close()
	dial := func(gw netip.Addr, timeout time.Duration) (string, error) {
		var ln net.Listener
		if err := doInNS(node.ns, func() (err error) {
			ln, err = net.Listen("tcp", netip.AddrPortFrom(gw, 0).String())
			return err
		}); err != nil {
			t.Fatalf("listen on %v in node namespace: %v", gw, err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			c.Write([]byte("ok"))
		}()
		var got []byte
		err := doInNS(sbNS, func() error {
			d := net.Dialer{Timeout: timeout}
			c, err := d.Dial("tcp", ln.Addr().String())
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(timeout))
			got, err = io.ReadAll(c)
			return err
		})
		return string(got), err
	}
	for _, gw := range []netip.Addr{sn.Gateway4, sn.Gateway6} {
		if got, err := dial(gw, 300*time.Millisecond); err == nil {
			t.Errorf("from %s without an egress filter, connect to gateway %v = %q; want it dropped", sn.ID, gw, got)
		}
	}
	f, err := NewFilter(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.SetDenylist(nil); err != nil {
		t.Fatal(err)
	}
	var att *Attachment
	if err := doInNS(node.ns, func() (err error) { att, err = f.Attach(sn.HostIfindex, SandboxConfig{}); return err }); err != nil {
		t.Fatalf("attach a pass-all filter: %v", err)
	}
	defer att.Close()
	for _, gw := range []netip.Addr{sn.Gateway4, sn.Gateway6} {
		if got, err := dial(gw, 2*time.Second); err != nil || got != "ok" {
			t.Errorf("from %s connect to gateway %v = %q, %v; want \"ok\"", sn.ID, gw, got, err)
		}
	}
}

func checkSysctl(t *testing.T, node *testNode, path, want string) {
	t.Helper()
	var got []byte
	if err := doInNS(node.ns, func() (err error) { got, err = os.ReadFile(path); return err }); err != nil {
		t.Fatal(err)
	}
	if s := strings.TrimSpace(string(got)); s != want {
		t.Errorf("%s in node namespace = %q, want %q", path, s, want)
	}
}

func TestSweep(t *testing.T) {
	node := newTestNode(t)
	nsDir := filepath.Join(t.TempDir(), "netns")
	ctx := t.Context()
	before := newTestManager(t, node, nsDir)
	sbs := map[string]*SandboxNet{}
	for _, id := range []string{"keep", "leak1", "leak2"} {
		sn, err := before.Setup(ctx, id)
		if err != nil {
			t.Fatalf("Setup(%s): %v", id, err)
		}
		sbs[id] = sn
	}
	// A namespace without a veth, as left by a crash during Setup.
	if err := createNS(filepath.Join(nsDir, NSName("half"))); err != nil {
		t.Fatal(err)
	}

	// agentd restarts: a fresh Manager with an empty pool.
	after := newTestManager(t, node, nsDir)
	removed, err := after.Sweep(ctx, []string{"keep"})
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	want := []string{NSName("half"), NSName("leak1"), NSName("leak2"), HostIfname("leak1"), HostIfname("leak2")}
	slices.Sort(removed)
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Errorf("Sweep removed %v, want %v", removed, want)
	}
	if got := node.vethNames(t); !slices.Equal(got, []string{HostIfname("keep")}) {
		t.Errorf("veths after Sweep = %v, want [%s]", got, HostIfname("keep"))
	}
	if got, _ := listNS(nsDir); !slices.Equal(got, []string{NSName("keep")}) {
		t.Errorf("namespaces after Sweep = %v, want [%s]", got, NSName("keep"))
	}
	checkReachesGateway(t, node, sbs["keep"])

	// The kept sandbox's link is reserved in the new pool.
	for _, id := range []string{"new1", "new2", "new3"} {
		sn, err := after.Setup(ctx, id)
		if err != nil {
			t.Fatalf("Setup(%s) after Sweep: %v", id, err)
		}
		if sn.Addr4 == sbs["keep"].Addr4 || sn.Addr6 == sbs["keep"].Addr6 {
			t.Errorf("Setup(%s) after Sweep got the kept sandbox's link %v", id, sn.Addr4)
		}
		if err := after.Teardown(ctx, sn); err != nil {
			t.Fatal(err)
		}
	}
	// Teardown by ID alone, as after a restart.
	if err := after.Teardown(ctx, &SandboxNet{ID: "keep"}); err != nil {
		t.Fatalf("Teardown(keep): %v", err)
	}
	if removed, err := after.Sweep(ctx, nil); err != nil || len(removed) > 0 {
		t.Errorf("second Sweep = %v, %v; want nothing to remove", removed, err)
	}
	assertClean(t, node, nsDir)
}

func TestSetupTeardownLoop(t *testing.T) {
	node := newTestNode(t)
	nsDir := filepath.Join(t.TempDir(), "netns")
	m := newTestManager(t, node, nsDir)
	m.logger = slog.New(slog.DiscardHandler)
	ctx := context.Background()
	const n = 100
	var setup, total []time.Duration
	for i := range n {
		id := "loop-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		start := time.Now()
		sn, err := m.Setup(ctx, id)
		if err != nil {
			t.Fatalf("Setup #%d: %v", i, err)
		}
		setup = append(setup, time.Since(start))
		if err := m.Teardown(ctx, sn); err != nil {
			t.Fatalf("Teardown #%d: %v", i, err)
		}
		total = append(total, time.Since(start))
	}
	slices.Sort(setup)
	slices.Sort(total)
	t.Logf("%d sandbox networks: median setup %v, median setup+teardown %v (p90 %v, max %v; target under 50ms)",
		n, setup[n/2], total[n/2], total[n*9/10], total[n-1])
	assertClean(t, node, nsDir)
	if len(m.pool.byID) != 0 {
		t.Errorf("pool holds %d links after teardown, want 0", len(m.pool.byID))
	}
}

func TestSetupConcurrent(t *testing.T) {
	node := newTestNode(t)
	nsDir := filepath.Join(t.TempDir(), "netns")
	m := newTestManager(t, node, nsDir)
	ctx := t.Context()
	const n = 16
	errs := make(chan error, n)
	for i := range n {
		go func() {
			sn, err := m.Setup(ctx, "conc-"+string(rune('a'+i)))
			if err == nil {
				err = m.Teardown(ctx, sn)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("concurrent Setup+Teardown: %v", err)
		}
	}
	assertClean(t, node, nsDir)
}
