package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"sync/atomic"
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
//	      NAT, and an uplink 192.0.2.1 / 2001:db8::1 whose only neighbour
//	      is inet. It also serves the node's own stand-in service.
//	inet: the rest of the world: stand-in hosts on its loopback, reached
//	      through the uplink.
//
// The node namespace's only route out leads to inet, and inet has no link
// but that one, so no packet of a sandbox can leave the two namespaces, even
// if the egress filter were wrong.
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
}

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
		nodeAddr:         a("192.0.2.1"),
		resolver:         a("10.53.0.53"),
		rogue:            a("198.51.100.53"),
		publicAddr:       a("198.51.100.10"),
		publicV6:         a("2001:db8:100::10"),
		metadataAddr:     a("169.254.169.254"),
		privateAddr:      a("10.99.0.10"),
		platformAddr:     a("203.0.113.10"),
		platformLateAddr: a("198.51.100.77"),
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
	upIdx := up(nh, worldUplinkNode, "192.0.2.1/24", "2001:db8::1/64")
	for _, gw := range []string{"192.0.2.254", "2001:db8::fe"} {
		if err := nh.RouteAdd(&netlink.Route{LinkIndex: upIdx, Gw: net.ParseIP(gw)}); err != nil {
			t.Fatalf("default route via %s in node namespace: %v", gw, err)
		}
	}
	var loAddrs []string
	for _, ad := range []netip.Addr{w.resolver, w.rogue, w.publicAddr, w.publicV6, w.metadataAddr, w.privateAddr, w.platformAddr, w.platformLateAddr} {
		loAddrs = append(loAddrs, netip.PrefixFrom(ad, ad.BitLen()).String())
	}
	up(ih, "lo", loAddrs...)
	up(ih, worldUplinkInet, "192.0.2.254/24", "2001:db8::fe/64")

	// Servers: the stand-in hosts in inet, the node's own service in node.
	for name, ad := range map[string]netip.Addr{
		"public": w.publicAddr, "public6": w.publicV6, "metadata": w.metadataAddr, "private": w.privateAddr,
		"platform": w.platformAddr, "platform-late": w.platformLateAddr, "resolver": w.resolver, "rogue": w.rogue,
	} {
		w.hosts[name] = w.serve(t, w.inetH, name, ad)
	}
	w.hosts["node"] = w.serve(t, w.nodeH, "node", w.nodeAddr)
	w.serveDNS(t, w.hosts["resolver"], w.publicAddr)
	w.serveDNS(t, w.hosts["rogue"], netip.MustParseAddr("198.51.100.66"))
	return w
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
	err := inNS(h, func() (err error) {
		if ln, err = net.Listen("tcp", netip.AddrPortFrom(ad, 80).String()); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp", netip.AddrPortFrom(ad, 7).String())
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
