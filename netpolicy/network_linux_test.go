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
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rodon-compute/rodon/internal/testenv"
)

// testNode is a network namespace standing in for the node, with two
// neighbours of its own: peer, beyond its uplink (11.1.0.1/24 and
// 2600:1::1/64 on the node, default routes via the peer), and lan, beyond
// another interface (11.3.0.1/24, 2600:3::1/64 on the node). The peer
// routes the sandbox pools and the lan via the node, as a router upstream
// might. The three namespaces have no other link, so nothing a test does
// can reach the real network.
type testNode struct {
	path      string
	ns        netns.NsHandle
	peer, lan netns.NsHandle
}

// Addresses of the test node's neighbours.
var (
	peer4, peer6 = netip.MustParseAddr("11.1.0.2"), netip.MustParseAddr("2600:1::2")
	lan4, lan6   = netip.MustParseAddr("11.3.0.2"), netip.MustParseAddr("2600:3::2")
)

func newTestNode(t *testing.T) *testNode {
	t.Helper()
	testenv.RequireNetAdmin(t)
	if _, err := exec.LookPath("nft"); err != nil {
		testenv.Missing(t, "nft binary (apt-get install nftables)")
	}
	n := &testNode{}
	var paths [3]string
	for i, name := range []string{"node", "peer", "lan"} {
		path := filepath.Join(t.TempDir(), name)
		if err := createNS(path); err != nil {
			t.Fatalf("create %s namespace: %v", name, err)
		}
		t.Cleanup(func() {
			if err := removeNS(path); err != nil {
				t.Errorf("remove %s namespace: %v", name, err)
			}
		})
		ns, err := netns.GetFromPath(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Close() })
		paths[i] = path
		switch name {
		case "node":
			n.ns = ns
		case "peer":
			n.peer = ns
		case "lan":
			n.lan = ns
		}
	}
	n.path = paths[0]
	h := n.handle(t)
	for _, v := range []struct {
		name, peer string
		ns         netns.NsHandle
	}{{"rnup0", "rnup1", n.peer}, {"rnlan0", "rnlan1", n.lan}} {
		if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: v.name}, PeerName: v.peer,
			PeerNamespace: netlink.NsFd(int(v.ns))}); err != nil {
			t.Fatalf("add veth %s: %v", v.name, err)
		}
	}
	up := func(h *netlink.Handle, name string, gws []string, prefixes ...string) {
		t.Helper()
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range prefixes {
			ad, err := netlink.ParseAddr(p)
			if err != nil {
				t.Fatal(err)
			}
			ad.Flags = unix.IFA_F_NODAD
			if err := h.AddrAdd(l, ad); err != nil {
				t.Fatalf("add %s to %s: %v", p, name, err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatalf("set %s up: %v", name, err)
		}
		for i := 0; i+1 < len(gws); i += 2 {
			_, dst, err := net.ParseCIDR(gws[i])
			if err != nil {
				t.Fatal(err)
			}
			if err := h.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: dst, Gw: net.ParseIP(gws[i+1])}); err != nil {
				t.Fatalf("route %s via %s on %s: %v", gws[i], gws[i+1], name, err)
			}
		}
	}
	ph, err := netlink.NewHandleAt(n.peer, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer ph.Close()
	lh, err := netlink.NewHandleAt(n.lan, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer lh.Close()
	up(h, "lo", nil)
	up(h, "rnup0", []string{"0.0.0.0/0", "11.1.0.2", "::/0", "2600:1::2"}, "11.1.0.1/24", "2600:1::1/64")
	up(h, "rnlan0", nil, "11.3.0.1/24", "2600:3::1/64")
	up(ph, "lo", nil)
	up(ph, "rnup1", []string{"10.200.0.0/16", "11.1.0.1", "11.3.0.0/24", "11.1.0.1",
		"fd00:200::/64", "2600:1::1", "2600:3::/64", "2600:1::1"}, "11.1.0.2/24", "2600:1::2/64")
	up(lh, "lo", nil)
	up(lh, "rnlan1", []string{"0.0.0.0/0", "11.3.0.1", "::/0", "2600:3::1"}, "11.3.0.2/24", "2600:3::2/64")
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
	m, err := NewManager(cfg, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
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
		checkReachesPeer(t, node, sn)
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

// listenTCP listens on addr:0 in namespace ns and answers "ok" to every
// connection, counting them.
func listenTCP(t *testing.T, ns netns.NsHandle, addr netip.Addr) (net.Listener, *atomic.Int64) {
	t.Helper()
	var ln net.Listener
	if err := doInNS(ns, func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
		return err
	}); err != nil {
		t.Fatalf("listen on %v: %v", addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Write([]byte("ok"))
			c.Close()
		}
	}()
	return ln, &n
}

// dialFrom connects to addr from namespace ns and returns what it read.
func dialFrom(ns netns.NsHandle, addr string, timeout time.Duration) (string, error) {
	var got []byte
	err := doInNS(ns, func() error {
		d := net.Dialer{Timeout: timeout}
		c, err := d.Dial("tcp", addr)
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

// checkReachesPeer connects from inside the sandbox namespace to listeners
// on the peer beyond the node's uplink: first with no egress filter on the
// veth, which must fail (the node's nftables rules drop what the filter did
// not pass), then with a filter whose denylist is empty, which must get
// through, masqueraded. Every packet stays inside the test namespaces.
func checkReachesPeer(t *testing.T, node *testNode, sn *SandboxNet) {
	t.Helper()
	sbNS, err := netns.GetFromPath(sn.NSPath)
	if err != nil {
		t.Fatal(err)
	}
	defer sbNS.Close()
	var lns []net.Listener
	for _, a := range []netip.Addr{peer4, peer6} {
		ln, _ := listenTCP(t, node.peer, a)
		lns = append(lns, ln)
	}
	for _, ln := range lns {
		if got, err := dialFrom(sbNS, ln.Addr().String(), 300*time.Millisecond); err == nil {
			t.Errorf("from %s without an egress filter, connect to %v = %q; want it dropped", sn.ID, ln.Addr(), got)
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
	if err := doInNS(node.ns, func() (err error) {
		att, err = f.Attach(sn.HostIfindex, SandboxConfig{LinkLocal: SandboxLinkLocal})
		return err
	}); err != nil {
		t.Fatalf("attach a pass-all filter: %v", err)
	}
	defer att.Close()
	for _, ln := range lns {
		if got, err := dialFrom(sbNS, ln.Addr().String(), 2*time.Second); err != nil || got != "ok" {
			t.Errorf("from %s connect to %v = %q, %v; want \"ok\"", sn.ID, ln.Addr(), got, err)
		}
	}
	// The node's own addresses are denied by route lookups even so.
	for _, a := range []netip.Addr{sn.Gateway4, sn.Gateway6} {
		ln, n := listenTCP(t, node.ns, a)
		if got, err := dialFrom(sbNS, ln.Addr().String(), time.Second); err == nil || n.Load() != 0 {
			t.Errorf("from %s connect to its gateway %v = %q, %v (%d accepted); want refused", sn.ID, ln.Addr(), got, err, n.Load())
		}
	}
	if c, err := att.Counters(); err != nil || c[ReasonNode].Packets < 2 {
		t.Errorf("node denials = %+v, %v; want 2 or more", c, err)
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
	checkReachesPeer(t, node, sbs["keep"])

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

func newTestEgress(t *testing.T, node *testNode, nsDir string) *Egress {
	t.Helper()
	cfg := DefaultConfig()
	cfg.HostNS = node.path
	cfg.NSDir = nsDir
	e, err := NewEgress(EgressConfig{Net: cfg}, testenv.Logger(t))
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

// TestEgressBeginTeardownID: a network Begin made and Finish never did (the
// sandbox failed in between) holds an empty namespace and no veth, and
// TeardownID removes it; the id then sets up again.
func TestEgressBeginTeardownID(t *testing.T) {
	node := newTestNode(t)
	nsDir := filepath.Join(t.TempDir(), "netns")
	e := newTestEgress(t, node, nsDir)
	ctx := t.Context()
	p, err := e.Begin(ctx, "pend")
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	if _, err := os.Stat(p.Net.NSPath); err != nil {
		t.Fatalf("namespace of the begun network: %v", err)
	}
	if links := node.vethNames(t); len(links) > 0 {
		t.Errorf("veths before Finish: %v; want none (no packet may leave yet)", links)
	}
	if err := e.TeardownID(ctx, "pend"); err != nil {
		t.Fatalf("TeardownID: %v", err)
	}
	assertClean(t, node, nsDir)
	// Nothing of it is left in the way: the same id sets up whole.
	sb, err := e.Setup(ctx, "pend")
	if err != nil {
		t.Fatalf("Setup after TeardownID: %v", err)
	}
	if err := e.Teardown(ctx, sb); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	assertClean(t, node, nsDir)
}

// TestNodeForwardsOnlySandboxTraffic sends from the peer beyond the node's
// uplink to a sandbox and to the host beyond the node's other interface,
// and from that host to the peer: the node forwards none of it (no new
// connection into a sandbox, nothing between its other interfaces), while
// the sandbox's own connection to the peer, and its replies, pass.
func TestNodeForwardsOnlySandboxTraffic(t *testing.T) {
	node := newTestNode(t)
	nsDir := filepath.Join(t.TempDir(), "netns")
	e := newTestEgress(t, node, nsDir)
	ctx := t.Context()
	sb, err := e.Setup(ctx, "fwd")
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	defer e.Teardown(context.WithoutCancel(ctx), sb)
	sbNS, err := netns.GetFromPath(sb.Net.NSPath)
	if err != nil {
		t.Fatal(err)
	}
	defer sbNS.Close()

	type target struct {
		name string
		ns   netns.NsHandle
		addr netip.Addr
	}
	listen := func(tg target) (string, string, func() int64) {
		ln, n := listenTCP(t, tg.ns, tg.addr)
		var pc net.PacketConn
		if err := doInNS(tg.ns, func() (err error) {
			pc, err = net.ListenPacket("udp", netip.AddrPortFrom(tg.addr, 0).String())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		var udp atomic.Int64
		go func() {
			buf := make([]byte, 1500)
			for {
				if _, _, err := pc.ReadFrom(buf); err != nil {
					return
				}
				udp.Add(1)
			}
		}()
		return ln.Addr().String(), pc.LocalAddr().String(), func() int64 { return n.Load() + udp.Load() }
	}
	sendUDP := func(from netns.NsHandle, addr string) {
		doInNS(from, func() error {
			c, err := net.Dial("udp", addr)
			if err != nil {
				return err
			}
			defer c.Close()
			for range 3 {
				c.Write([]byte("hello"))
			}
			return nil
		})
	}
	closed := []struct {
		from   string
		fromNS netns.NsHandle
		to     target
	}{
		{"peer", node.peer, target{"sandbox v4", sbNS, sb.Net.Addr4.Addr()}},
		{"peer", node.peer, target{"sandbox v6", sbNS, sb.Net.Addr6.Addr()}},
		{"peer", node.peer, target{"lan v4", node.lan, lan4}},
		{"peer", node.peer, target{"lan v6", node.lan, lan6}},
		{"lan", node.lan, target{"peer v4", node.peer, peer4}},
		{"lan", node.lan, target{"peer v6", node.peer, peer6}},
	}
	for _, c := range closed {
		tcp, udp, hits := listen(c.to)
		if got, err := dialFrom(c.fromNS, tcp, 500*time.Millisecond); err == nil {
			t.Errorf("from the %s, connect to %s (%s) = %q; want nothing forwarded", c.from, c.to.name, tcp, got)
		}
		sendUDP(c.fromNS, udp)
		time.Sleep(100 * time.Millisecond)
		if n := hits(); n != 0 {
			t.Errorf("from the %s, %s received %d connections or datagrams; want none", c.from, c.to.name, n)
		}
	}
	// The sandbox's own connections go out and their replies come back.
	for _, a := range []netip.Addr{peer4, peer6} {
		tcp, _, hits := listen(target{"peer", node.peer, a})
		if got, err := dialFrom(sbNS, tcp, 2*time.Second); err != nil || got != "ok" {
			t.Errorf("from the sandbox, connect to the peer %s = %q, %v; want \"ok\"", tcp, got, err)
		}
		if hits() != 1 {
			t.Errorf("the peer %s accepted %d connections, want 1", tcp, hits())
		}
	}
	out, err := e.m.nft(ctx, "", "list", "chain", "inet", NATTable, "forward")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "policy drop") || !strings.Contains(out, `comment "rodon: nothing else is forwarded"`) {
		t.Errorf("forward chain lacks its drop policy or last rule:\n%s", out)
	}
	t.Logf("forward chain:\n%s", out)
}

// TestEgressWatchesNodeAddresses adds addresses to the node after the
// Egress started and checks that its denylist names them (node), their
// subnet broadcast (broadcast) and IPv6 subnet-router anycast (node), and
// IPv4 addresses embedded in IPv6 ones by them, within a second, and
// forgets them when they are deleted.
func TestEgressWatchesNodeAddresses(t *testing.T) {
	node := newTestNode(t)
	e := newTestEgress(t, node, filepath.Join(t.TempDir(), "netns"))
	a := netip.MustParseAddr
	decide := func(s string) Reason { return Decide(e.Denylist(), a(s)) }
	for s, want := range map[string]Reason{
		"11.1.0.1": ReasonNode, "11.1.0.255": ReasonBroadcast, "2600:1::1": ReasonNode, "2600:1::": ReasonNode,
		"11.3.0.1": ReasonNode, "11.3.0.255": ReasonBroadcast, "2600:3::": ReasonNode, "11.1.0.2": ReasonNone,
	} {
		if got := decide(s); got != want {
			t.Errorf("at start, Decide(%s) = %v, want %v", s, got, want)
		}
	}
	h := node.handle(t)
	lan, err := h.LinkByName("rnlan0")
	if err != nil {
		t.Fatal(err)
	}
	added := []string{"11.8.0.1/24", "2600:8::1/64"}
	start := time.Now()
	for _, p := range added {
		ad, _ := netlink.ParseAddr(p)
		ad.Flags = unix.IFA_F_NODAD
		if err := h.AddrAdd(lan, ad); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]Reason{"11.8.0.1": ReasonNode, "11.8.0.255": ReasonBroadcast, "2600:8::1": ReasonNode,
		"2600:8::": ReasonNode, "64:ff9b::11.8.0.1": ReasonNode, "2002:b08:ff::1": ReasonBroadcast}
	waitDecided := func(want map[string]Reason) time.Duration {
		t.Helper()
		for time.Since(start) < 2*time.Second {
			ok := true
			for s, r := range want {
				ok = ok && decide(s) == r
			}
			if ok {
				return time.Since(start)
			}
			time.Sleep(time.Millisecond)
		}
		for s, r := range want {
			if got := decide(s); got != r {
				t.Errorf("Decide(%s) = %v, want %v", s, got, r)
			}
		}
		return time.Since(start)
	}
	el := waitDecided(want)
	t.Logf("added addresses in the denylist after %v", el)
	if el > time.Second {
		t.Errorf("added addresses took %v to reach the denylist, want under 1s", el)
	}
	start = time.Now()
	for _, p := range added {
		ad, _ := netlink.ParseAddr(p)
		if err := h.AddrDel(lan, ad); err != nil {
			t.Fatal(err)
		}
	}
	for s := range want {
		want[s] = ReasonNone
	}
	waitDecided(want)
	if slices.Contains(e.NodeAddrs(), a("11.8.0.1")) {
		t.Errorf("NodeAddrs() = %v after the address was deleted", e.NodeAddrs())
	}
}
