package netpolicy

import (
	"fmt"
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

// BenchmarkForwardPath measures the whole path of a sandbox's UDP datagram
// through a node to a host beyond it, per packet, with the egress filter
// attached (which asks the node's routing tables about every destination)
// and with, in addition, the alternative the filter's route lookup
// replaced: an nftables rule "fib daddr type { local, broadcast, anycast,
// multicast } drop" on sandbox interfaces. The difference is what that
// rule costs per packet. The sender writes b.N datagrams on one connected
// socket per round, ten rounds of each set-up alternating; the kernel
// forwards each datagram synchronously in the sender's system call, so
// time per datagram is the path's cost. Three namespaces of the
// benchmark's own; the sink drops everything at prerouting.
//
//	flock /tmp/rodon-host.lock go test -run '^$' -bench ForwardPath -benchtime 100000x -count 3 ./netpolicy
func BenchmarkForwardPath(b *testing.B) {
	testenv.RequireNetAdmin(b)
	if _, err := exec.LookPath("nft"); err != nil {
		testenv.Missing(b, "nft binary")
	}
	f := newTestFilter(b)
	dir := b.TempDir()
	ns := map[string]netns.NsHandle{}
	paths := map[string]string{}
	for _, name := range []string{"sandbox", "node", "sink"} {
		p := filepath.Join(dir, name)
		if err := createNS(p); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { removeNS(p) })
		h, err := netns.GetFromPath(p)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { h.Close() })
		ns[name], paths[name] = h, p
	}
	handle := func(name string) *netlink.Handle {
		h, err := netlink.NewHandleAt(ns[name], unix.NETLINK_ROUTE)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(h.Close)
		return h
	}
	nh, sh, kh := handle("node"), handle("sandbox"), handle("sink")
	const veth = VethPrefix + "000000000001"
	for _, v := range []struct{ name, peer, to string }{{veth, "eth0", "sandbox"}, {"up0", "up1", "sink"}} {
		if err := nh.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: v.name}, PeerName: v.peer,
			PeerNamespace: netlink.NsFd(int(ns[v.to]))}); err != nil {
			b.Fatal(err)
		}
	}
	up := func(h *netlink.Handle, name string, gw string, prefixes ...string) int {
		l, err := h.LinkByName(name)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range prefixes {
			ad, _ := netlink.ParseAddr(p)
			ad.Flags = unix.IFA_F_NODAD
			if err := h.AddrAdd(l, ad); err != nil {
				b.Fatal(err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			b.Fatal(err)
		}
		if gw != "" {
			if err := h.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.ParseIP(gw)}); err != nil {
				b.Fatal(err)
			}
		}
		return l.Attrs().Index
	}
	if err := doInNS(ns["node"], func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1\n"), 0o644)
	}); err != nil {
		b.Fatal(err)
	}
	// As Manager plumbs it: no link-local address of the kernel's making
	// (its router solicitations would be counted as denied).
	if l, err := sh.LinkByName("eth0"); err != nil || sh.LinkSetIP6AddrGenMode(l, addrGenModeNone) != nil {
		b.Fatalf("configure eth0: %v", err)
	}
	hostIf := up(nh, veth, "", "10.200.0.1/30")
	up(nh, "up0", "", "11.1.0.1/24")
	up(sh, "eth0", "10.200.0.1", "10.200.0.2/30")
	up(kh, "up1", "11.1.0.1", "11.1.0.2/24")
	nft := func(name, script string) {
		b.Helper()
		err := doInNS(ns[name], func() error {
			cmd := exec.Command("nft", "-f", "-")
			cmd.Stdin = strings.NewReader(script)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	// The node's own rules, as Manager installs them (without NAT: the
	// sink routes the pool back), and a sink that drops what it gets.
	nft("node", natScript(DefaultConfig()))
	nft("sink", "table inet sink {\n\tchain pre {\n\t\ttype filter hook prerouting priority -300; policy drop;\n\t}\n}\n")
	var att *Attachment
	if err := doInNS(ns["node"], func() (err error) {
		att, err = f.Attach(hostIf, SandboxConfig{LinkLocal: SandboxLinkLocal})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { att.Close() })

	const fibRule = "table inet fibbench {\n\tchain pre {\n\t\ttype filter hook prerouting priority -300; policy accept;\n" +
		"\t\tiifname \"rv*\" fib daddr type { local, broadcast, anycast, multicast } counter drop\n\t}\n}\n"
	dst := netip.MustParseAddrPort("11.1.0.2:9")
	// Rounds alternate between the two set-ups, so that the machine's
	// noise hits both alike; each round sends b.N datagrams.
	const rounds = 10
	var plain, withNft []time.Duration
	err := doInNS(ns["sandbox"], func() error {
		c, err := net.Dial("udp", dst.String())
		if err != nil {
			return err
		}
		defer c.Close()
		payload := make([]byte, 18) // a 64-byte frame
		send := func(n int) (time.Duration, error) {
			start := time.Now()
			for range n {
				if _, err := c.Write(payload); err != nil {
					return 0, err
				}
			}
			return time.Since(start) / time.Duration(n), nil
		}
		if _, err := send(1000); err != nil { // warm up: neighbours, caches
			return err
		}
		b.ResetTimer()
		for range rounds {
			d, err := send(b.N)
			if err != nil {
				return err
			}
			plain = append(plain, d)
			nft("node", fibRule)
			d, err = send(b.N)
			nft("node", "delete table inet fibbench\n")
			if err != nil {
				return err
			}
			withNft = append(withNft, d)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	median := func(ds []time.Duration) time.Duration {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	b.ReportMetric(float64(median(plain).Nanoseconds()), "ns/pkt")
	b.ReportMetric(float64(median(withNft).Nanoseconds()), "ns/pkt+nft-fib")
	b.Logf("%d rounds of %d datagrams: filter %v per datagram (rounds %v), filter and nft fib rule %v (rounds %v)",
		rounds, b.N, median(plain), plain, median(withNft), withNft)
	if c, err := att.Counters(); err != nil || len(c) != 0 {
		b.Errorf("the filter denied %+v (%v); want nothing denied", c, err)
	}
}
