package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
)

// world is a small stand-in of a node's surroundings, made of two network
// namespaces the test creates and nothing else:
//
//	node: agentd's node namespace (--node-netns): the sandboxes' veths, the
//	      NAT, and an uplink 11.0.0.1/24 / 2600:1::1/64 whose only
//	      neighbour is inet. It also serves the node's own stand-in service.
//	inet: the rest of the world: stand-in hosts on its loopback, reached
//	      through the uplink.
//
// The egress filter lets a sandbox reach globally reachable addresses only,
// so the "public" stand-ins have addresses that look globally reachable
// (11.0.0.0/8, 2600::/12) and the rest have the kind of address each
// stands in for. None of them is ever used outside these namespaces: the
// node namespace's only route out leads to inet, and inet has no link but
// that one, so no packet of a sandbox can leave the two namespaces, even if
// the egress filter were wrong.
type world struct {
	nodeNS, inetNS   string // names under /run/netns
	nodeH, inetH     netns.NsHandle
	hosts            map[string]*standIn // by name
	nodeAddr         netip.Addr
	resolver, rogue  netip.Addr
	publicV6         netip.Addr
	publicAddr       netip.Addr
	metadataAddr     netip.Addr
	privateAddr      netip.Addr
	platformAddr     netip.Addr
	platformLateAddr netip.Addr
	// nodeAddr6 is the node's IPv6 uplink address; nodeBroadcast and
	// nodeAnycast are its uplink subnet's broadcast and subnet-router
	// anycast addresses.
	nodeAddr6, nodeBroadcast, nodeAnycast netip.Addr
}

// worldPlatform is the platform CIDR of the world's platform stand-in.
const worldPlatform = "11.2.0.0/24"

// standIn is one stand-in host: an HTTP server on port 80 answering its
// name, a UDP echo on port 7, and a count of everything it received.
type standIn struct {
	name string
	addr netip.Addr
	hits atomic.Int64
}

const (
	worldUplinkNode = "e2eup-node"
	worldUplinkInet = "e2eup-inet"
)

func newWorld(t *testing.T) *world {
	t.Helper()
	var b [3]byte
	rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	a := netip.MustParseAddr
	w := &world{
		nodeNS:           "e2enode-" + suffix,
		inetNS:           "e2einet-" + suffix,
		hosts:            map[string]*standIn{},
		nodeAddr:         a("11.0.0.1"),
		nodeAddr6:        a("2600:1::1"),
		nodeBroadcast:    a("11.0.0.255"),
		nodeAnycast:      a("2600:1::"),
		resolver:         a("10.53.0.53"),
		rogue:            a("11.1.0.53"),
		publicAddr:       a("11.1.0.10"),
		publicV6:         a("2600:100::10"),
		metadataAddr:     a("169.254.169.254"),
		privateAddr:      a("10.99.0.10"),
		platformAddr:     a("11.2.0.10"),
		platformLateAddr: a("11.1.0.77"),
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	defer netns.Set(orig)
	for _, name := range []string{w.nodeNS, w.inetNS} {
		h, err := netns.NewNamed(name)
		if err != nil {
			t.Fatalf("create namespace %s: %v", name, err)
		}
		t.Cleanup(func() {
			h.Close()
			netns.DeleteNamed(name)
		})
		if name == w.nodeNS {
			w.nodeH = h
		} else {
			w.inetH = h
		}
	}
	if err := netns.Set(orig); err != nil {
		t.Fatal(err)
	}
	nh, err := netlink.NewHandleAt(w.nodeH)
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	ih, err := netlink.NewHandleAt(w.inetH)
	if err != nil {
		t.Fatal(err)
	}
	defer ih.Close()
	if err := nh.LinkAdd(&netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: worldUplinkNode},
		PeerName:      worldUplinkInet,
		PeerNamespace: netlink.NsFd(int(w.inetH)),
	}); err != nil {
		t.Fatalf("add uplink veth: %v", err)
	}
	up := func(h *netlink.Handle, name string, addrs ...string) int {
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range addrs {
			ad, err := netlink.ParseAddr(s)
			if err != nil {
				t.Fatal(err)
			}
			ad.Flags = unix.IFA_F_NODAD
			if err := h.AddrAdd(l, ad); err != nil {
				t.Fatalf("add %s to %s: %v", s, name, err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
		return l.Attrs().Index
	}
	up(nh, "lo")
	upIdx := up(nh, worldUplinkNode, "11.0.0.1/24", "2600:1::1/64")
	for _, gw := range []string{"11.0.0.254", "2600:1::fe"} {
		if err := nh.RouteAdd(&netlink.Route{LinkIndex: upIdx, Gw: net.ParseIP(gw)}); err != nil {
			t.Fatalf("default route via %s in node namespace: %v", gw, err)
		}
	}
	var loAddrs []string
	for _, ad := range []netip.Addr{w.resolver, w.rogue, w.publicAddr, w.publicV6, w.metadataAddr, w.privateAddr, w.platformAddr, w.platformLateAddr} {
		loAddrs = append(loAddrs, netip.PrefixFrom(ad, ad.BitLen()).String())
	}
	up(ih, "lo", loAddrs...)
	up(ih, worldUplinkInet, "11.0.0.254/24", "2600:1::fe/64")

	// Servers: the stand-in hosts in inet, the node's own service in node.
	for name, ad := range map[string]netip.Addr{
		"public": w.publicAddr, "public6": w.publicV6, "metadata": w.metadataAddr, "private": w.privateAddr,
		"platform": w.platformAddr, "platform-late": w.platformLateAddr, "resolver": w.resolver, "rogue": w.rogue,
	} {
		w.hosts[name] = w.serve(t, w.inetH, name, ad)
	}
	w.hosts["node"] = w.serve(t, w.nodeH, "node", w.nodeAddr)
	w.serveDNS(t, w.hosts["resolver"], w.publicAddr)
	w.serveDNS(t, w.hosts["rogue"], netip.MustParseAddr("11.1.0.66"))
	return w
}

// addInetHost adds a stand-in host on inet's loopback, reached through the
// uplink like the others.
func (w *world) addInetHost(t *testing.T, name string, ad netip.Addr) *standIn {
	t.Helper()
	w.addAddr(t, w.inetH, "lo", ad)
	s := w.serve(t, w.inetH, name, ad)
	w.hosts[name] = s
	return s
}

// addAddr puts ad (as a host prefix) on interface link of namespace h.
func (w *world) addAddr(t *testing.T, h netns.NsHandle, link string, ad netip.Addr) {
	t.Helper()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	l, err := nh.LinkByName(link)
	if err != nil {
		t.Fatal(err)
	}
	na, err := netlink.ParseAddr(netip.PrefixFrom(ad, ad.BitLen()).String())
	if err != nil {
		t.Fatal(err)
	}
	na.Flags = unix.IFA_F_NODAD
	if err := nh.AddrAdd(l, na); err != nil {
		t.Fatalf("add %v to %s: %v", ad, link, err)
	}
}

// inNS runs fn on a thread in namespace h; sockets made by fn stay there.
func inNS(h netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// The thread is not unlocked: it dies with the goroutine, so no
		// other goroutine ever runs in h.
		runtime.LockOSThread()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

func (w *world) serve(t *testing.T, h netns.NsHandle, name string, ad netip.Addr) *standIn {
	t.Helper()
	s := &standIn{name: name, addr: ad}
	var ln net.Listener
	var pc net.PacketConn
	// Freebind: a stand-in may be bound to an address the namespace does
	// not hold as a local one (a subnet-router anycast address), or hold
	// only later.
	lc := net.ListenConfig{Control: freebind}
	err := inNS(h, func() (err error) {
		if ln, err = lc.Listen(context.Background(), "tcp", netip.AddrPortFrom(ad, 80).String()); err != nil {
			return err
		}
		pc, err = lc.ListenPacket(context.Background(), "udp", netip.AddrPortFrom(ad, 7).String())
		return err
	})
	if err != nil {
		t.Fatalf("stand-in %s on %v: %v", name, ad, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(rw, "hello from %s", name)
	}), ConnState: func(c net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.hits.Add(1)
		}
	}}
	go srv.Serve(ln)
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			s.hits.Add(1)
			pc.WriteTo(buf[:n], from)
		}
	}()
	t.Cleanup(func() { srv.Close(); pc.Close() })
	return s
}

// freebind lets a socket bind an address that is not (yet) local.
func freebind(network, address string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		if strings.HasSuffix(network, "6") || strings.HasPrefix(address, "[") {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_FREEBIND, 1)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
		}
	})
	if err != nil {
		return err
	}
	return serr
}

// serveDNS answers A queries for any name with answer, on UDP port 53 of s.
func (w *world) serveDNS(t *testing.T, s *standIn, answer netip.Addr) {
	t.Helper()
	var pc net.PacketConn
	if err := inNS(w.inetH, func() (err error) {
		pc, err = net.ListenPacket("udp", netip.AddrPortFrom(s.addr, 53).String())
		return err
	}); err != nil {
		t.Fatalf("DNS on %v: %v", s.addr, err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			s.hits.Add(1)
			var p dnsmessage.Parser
			hdr, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			bld := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: hdr.ID, Response: true, Authoritative: true})
			bld.StartQuestions()
			bld.Question(q)
			bld.StartAnswers()
			if q.Type == dnsmessage.TypeA {
				bld.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60},
					dnsmessage.AResource{A: answer.As4()})
			}
			out, err := bld.Finish()
			if err == nil {
				pc.WriteTo(out, from)
			}
		}
	}()
}

// hits returns each stand-in host's count of connections and datagrams.
func (w *world) hits() map[string]int64 {
	out := map[string]int64{}
	for name, s := range w.hosts {
		out[name] = s.hits.Load()
	}
	return out
}

// nsPath is the path agentd is given as --node-netns.
func (w *world) nodePath() string { return "/run/netns/" + w.nodeNS }

func netInterfaces() ([]string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, i := range ifs {
		out = append(out, i.Name)
	}
	return out, nil
}
