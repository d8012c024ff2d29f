package netpolicy

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rodon-compute/rodon/internal/testenv"
)

// Addresses of the node a fibNode stands in for: its uplink rn0 holds
// fibNode4/24 and fibNode6/64, with default routes via fibGateway4 and
// fibGateway6. The peer rn1 is in the same namespace and has no address,
// so nothing sent there leaves it.
var (
	fibNode4    = ip("11.1.0.1")
	fibNode6    = ip("2600:1::1")
	fibGateway4 = ip("11.1.0.254")
	fibGateway6 = ip("2600:1::fe")
)

// newBenchNode makes a namespace standing in for a node for Program.Run:
// BPF_PROG_TEST_RUN runs the program on the calling thread's loopback, so
// its route lookups see this namespace's tables when run through doInNS.
// Forwarding is on, as agentd turns it on.
func newBenchNode(t testing.TB) netns.NsHandle {
	t.Helper()
	testenv.RequireNetAdmin(t)
	path := filepath.Join(t.TempDir(), "fibnode")
	if err := createNS(path); err != nil {
		t.Fatalf("create node namespace: %v", err)
	}
	t.Cleanup(func() { removeNS(path) })
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := doInNS(ns, func() error {
		for _, p := range []string{"/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"} {
			if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("enable forwarding: %v", err)
	}
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "rn0"}, PeerName: "rn1"}); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	for _, name := range []string{"lo", "rn1", "rn0"} {
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if name == "rn0" {
			for _, p := range []string{"11.1.0.1/24", "2600:1::1/64"} {
				ad, err := netlink.ParseAddr(p)
				if err != nil {
					t.Fatal(err)
				}
				ad.Flags = unix.IFA_F_NODAD
				if err := h.AddrAdd(l, ad); err != nil {
					t.Fatalf("add %s: %v", p, err)
				}
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatalf("set %s up: %v", name, err)
		}
		if name == "rn0" {
			for _, gw := range []netip.Addr{fibGateway4, fibGateway6} {
				if err := h.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.IP(gw.AsSlice())}); err != nil {
					t.Fatalf("default route via %v: %v", gw, err)
				}
			}
		}
	}
	waitLocalRoutes(t, h, fibNode4, fibNode6, ip("2600:1::"))
	return ns
}

// waitLocalRoutes waits until the local routing table has a route for each
// address: the kernel adds those of IPv6 addresses from a work queue, even
// with IFA_F_NODAD, so a packet sent at once might find none.
func waitLocalRoutes(t testing.TB, h *netlink.Handle, addrs ...netip.Addr) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		routes, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_LOCAL}, netlink.RT_FILTER_TABLE)
		if err != nil {
			t.Fatal(err)
		}
		have := map[netip.Addr]bool{}
		for _, r := range routes {
			if r.Dst == nil {
				continue
			}
			if a, ok := netip.AddrFromSlice(r.Dst.IP); ok {
				have[a.Unmap()] = true
			}
		}
		missing := 0
		for _, a := range addrs {
			if !have[a] {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("local routes of %v not there after 5s (have %v)", addrs, have)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
