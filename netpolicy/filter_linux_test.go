package netpolicy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rodon-compute/rodon/internal/testenv"
)

// Verdicts as seen by BPF_PROG_TEST_RUN.
const (
	verdictNext     = 0xffffffff // TCX_NEXT / TC_ACT_UNSPEC
	verdictDrop     = 2          // TCX_DROP / TC_ACT_SHOT
	verdictRedirect = 7          // TCX_REDIRECT / TC_ACT_REDIRECT
)

// testIfindex is skb->ifindex under BPF_PROG_TEST_RUN: the loopback device.
const testIfindex = 1

// The node's own entries and platform CIDR in the test filter's denylist:
// addresses no interface has, so only the trie can deny them.
var (
	testNodeEntries = []Entry{
		{Prefix: netip.MustParsePrefix("12.0.0.1/32"), Reason: ReasonNode},
		{Prefix: netip.MustParsePrefix("2600:ffff::1/128"), Reason: ReasonNode},
		{Prefix: netip.MustParsePrefix("12.0.0.255/32"), Reason: ReasonBroadcast},
	}
	testPlatform = []netip.Prefix{netip.MustParsePrefix("13.0.0.0/24")}
)

// testFilter is a loaded filter and the namespace its Program.Run calls run
// in (see newBenchNode): the route lookups see that namespace's tables.
type testFilter struct {
	*Filter
	node netns.NsHandle
	deny []Entry
}

// newTestFilter loads the filter with the denylist table, node entries and
// a platform CIDR, or skips (fails under CI) without root and BPF.
func newTestFilter(t testing.TB) *testFilter {
	t.Helper()
	testenv.RequireRoot(t)
	logger := testenv.Logger(t)
	f, err := NewFilter(logger)
	if err != nil {
		testenv.Missing(t, "eBPF egress filter cannot load: "+err.Error())
	}
	t.Cleanup(func() { f.Close() })
	deny := Denylist(testNodeEntries, testPlatform)
	if err := f.SetDenylist(deny); err != nil {
		t.Fatalf("SetDenylist: %v", err)
	}
	return &testFilter{Filter: f, node: newBenchNode(t), deny: deny}
}

// setTestConfig installs cfg for the test-run ifindex and clears its counters.
func setTestConfig(t testing.TB, f *testFilter, cfg *SandboxConfig) {
	t.Helper()
	for r := Reason(1); r <= maxReason; r++ {
		_ = f.objs.Drops.Delete(egressDropKey{Ifindex: testIfindex, Reason: uint32(r)})
	}
	if cfg == nil {
		if err := f.objs.SandboxCfgs.Delete(uint32(testIfindex)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Fatal(err)
		}
		return
	}
	v, err := sandboxCfgValue(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.objs.SandboxCfgs.Put(uint32(testIfindex), v); err != nil {
		t.Fatal(err)
	}
}

func runFrame(t testing.TB, f *testFilter, frame []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, 1600)
	opts := &ebpf.RunOptions{Data: frame, DataOut: out}
	var ret uint32
	err := doInNS(f.node, func() (err error) {
		ret, err = f.objs.EgressFilter.Run(opts)
		return err
	})
	if err != nil {
		t.Fatalf("Program.Run: %v", err)
	}
	return ret, opts.DataOut
}

var (
	sandboxMAC = []byte{0x02, 0, 0, 0, 0, 0x02}
	hostMAC    = []byte{0x02, 0, 0, 0, 0, 0x01}
	sandbox4   = netip.MustParseAddr("10.200.0.2")
	sandbox6   = netip.MustParseAddr("fd00:200::2")
	sandboxLL  = SandboxLinkLocal
)

const (
	protoTCP    = 6
	protoUDP    = 17
	protoICMP   = 1
	protoICMPv6 = 58
)

func ether(etherType uint16, payload []byte) []byte {
	b := append(append([]byte{}, hostMAC...), sandboxMAC...)
	b = binary.BigEndian.AppendUint16(b, etherType)
	return append(b, payload...)
}

// l4 builds a TCP SYN (with 4 bytes of options), a UDP datagram or an ICMP
// echo header with 8 bytes of payload; checksums are left zero. Other
// protocols get 16 zero bytes.
func l4(proto uint8, dport uint16) []byte {
	switch proto {
	case protoTCP:
		h := make([]byte, 24)
		binary.BigEndian.PutUint16(h[0:], 40000)
		binary.BigEndian.PutUint16(h[2:], dport)
		binary.BigEndian.PutUint32(h[4:], 1000) // seq
		h[12] = 6 << 4                          // doff
		h[13] = 0x02                            // SYN
		binary.BigEndian.PutUint16(h[14:], 64240)
		copy(h[20:], []byte{2, 4, 5, 0xb4}) // MSS
		return h
	case protoUDP:
		h := make([]byte, 16)
		binary.BigEndian.PutUint16(h[0:], 40000)
		binary.BigEndian.PutUint16(h[2:], dport)
		binary.BigEndian.PutUint16(h[4:], 16)
		return h
	case protoICMP:
		h := make([]byte, 16)
		h[0] = 8 // echo request
		return h
	case protoICMPv6:
		h := make([]byte, 16)
		h[0] = 128 // echo request
		return h
	default:
		return make([]byte, 16)
	}
}

func ipv4Packet(dst netip.Addr, proto uint8, fragOff uint16, payload []byte) []byte {
	h := make([]byte, 20)
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(payload)))
	binary.BigEndian.PutUint16(h[6:], fragOff)
	h[8] = 64
	h[9] = proto
	s, d := sandbox4.As4(), dst.As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	binary.BigEndian.PutUint16(h[10:], checksum(h, 0))
	return ether(0x0800, append(h, payload...))
}

func ipv4Frame(dst netip.Addr, proto uint8, dport uint16) []byte {
	return ipv4Packet(dst, proto, 0, l4(proto, dport))
}

// ext is an IPv6 extension header: its type and its whole bytes (a
// multiple of 8); the next-header and, but for a fragment header, the
// length fields are filled in by ipv6Packet.
type ext struct {
	typ uint8
	b   []byte
}

func hopByHop() ext { return ext{0, make([]byte, 8)} }
func destOpts() ext { return ext{60, make([]byte, 8)} }

func routingHdr(segmentsLeft uint8) ext {
	b := make([]byte, 24) // type 2 (mobility), one address
	b[2], b[3] = 2, segmentsLeft
	return ext{43, b}
}

func fragmentHdr(offset uint16, more bool) ext {
	b := make([]byte, 8)
	v := offset << 3
	if more {
		v |= 1
	}
	binary.BigEndian.PutUint16(b[2:], v)
	return ext{44, b}
}

func ipv6Packet(src, dst netip.Addr, hopLimit uint8, exts []ext, nh uint8, payload []byte) []byte {
	var chain []byte
	first := nh
	if len(exts) > 0 {
		first = exts[0].typ
	}
	for i, e := range exts {
		b := append([]byte{}, e.b...)
		b[0] = nh
		if i+1 < len(exts) {
			b[0] = exts[i+1].typ
		}
		if e.typ != 44 {
			b[1] = uint8(len(b)/8 - 1)
		}
		chain = append(chain, b...)
	}
	h := make([]byte, 40)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(chain)+len(payload)))
	h[6] = first
	h[7] = hopLimit
	s, d := src.As16(), dst.As16()
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	return ether(0x86dd, append(append(h, chain...), payload...))
}

// ipv6Frame is a packet from the sandbox's address with one raw extension
// header (a hop-by-hop header, its first byte set to nh) or none.
func ipv6Frame(dst netip.Addr, hopLimit uint8, rawExt []byte, nh uint8, payload []byte) []byte {
	var exts []ext
	if len(rawExt) > 0 {
		exts = []ext{{0, rawExt}}
	}
	return ipv6Packet(sandbox6, dst, hopLimit, exts, nh, payload)
}

func ipv6L4(dst netip.Addr, proto uint8, dport uint16) []byte {
	return ipv6Packet(sandbox6, dst, 64, nil, proto, l4(proto, dport))
}

// icmpv6From is an ICMPv6 message of type typ (code 0) from src.
func icmpv6From(src, dst netip.Addr, hopLimit, typ uint8) []byte {
	p := make([]byte, 24)
	p[0] = typ
	return ipv6Packet(src, dst, hopLimit, nil, protoICMPv6, p)
}

func icmpv6(dst netip.Addr, hopLimit, typ uint8) []byte {
	return icmpv6From(sandbox6, dst, hopLimit, typ)
}

func arpFrame() []byte {
	p := make([]byte, 28)
	binary.BigEndian.PutUint16(p[0:], 1)
	binary.BigEndian.PutUint16(p[2:], 0x0800)
	p[4], p[5] = 6, 4
	binary.BigEndian.PutUint16(p[6:], 1)
	return ether(0x0806, p)
}

// udpTo is a UDP datagram to port from the sandbox to a, of a's family.
func udpTo(a netip.Addr, port uint16) []byte {
	if a.Is4() {
		return ipv4Frame(a, protoUDP, port)
	}
	return ipv6L4(a, protoUDP, port)
}

// checksum is the Internet checksum of b with a starting sum.
func checksum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// runCase is one Program.Run: a frame from a sandbox configured with cfg,
// the verdict wanted and the only counter wanted at 1 (0: none at all),
// with its last destination when last is valid.
type runCase struct {
	name   string
	cfg    *SandboxConfig
	frame  []byte
	want   uint32
	reason Reason
	last   netip.AddrPort
}

func (c runCase) check(t *testing.T, f *testFilter) {
	t.Helper()
	setTestConfig(t, f, c.cfg)
	got, _ := runFrame(t, f, c.frame)
	if got != c.want {
		t.Errorf("Run() = %#x, want %#x", got, c.want)
	}
	for r := Reason(1); r <= maxReason; r++ {
		n, _, err := f.readCount(testIfindex, r)
		if err != nil {
			t.Fatal(err)
		}
		want := uint64(0)
		if r == c.reason {
			want = 1
		}
		if n.Packets != want {
			t.Errorf("counter %v = %d, want %d", r, n.Packets, want)
		}
		if r == c.reason && c.last.IsValid() && n.Last != c.last {
			t.Errorf("counter %v last = %v, want %v", r, n.Last, c.last)
		}
	}
}

func runCases(t *testing.T, f *testFilter, cases []runCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.check(t, f) })
	}
}

// deniedUDP is a UDP datagram to dst:port, passed (ReasonNone) or denied
// as r: answered with an ICMP port unreachable, redirected; to a multicast
// group only dropped.
func deniedUDP(name string, cfg *SandboxConfig, dst netip.Addr, port uint16, r Reason) runCase {
	want := uint32(verdictRedirect)
	switch r {
	case ReasonNone:
		want = verdictNext
	case ReasonMulticast:
		want = verdictDrop
	}
	return runCase{name, cfg, udpTo(dst, port), want, r, netip.AddrPortFrom(dst, port)}
}

var (
	normalCfg = &SandboxConfig{Resolvers: []netip.Addr{
		netip.MustParseAddr("10.0.0.53"), netip.MustParseAddr("fd00::53"),
	}, LinkLocal: SandboxLinkLocal}
	offlineCfg = &SandboxConfig{NoInternet: true, Resolvers: normalCfg.Resolvers, LinkLocal: SandboxLinkLocal}
)

// TestFilterRegistryRows sends a UDP datagram to the first, middle and last
// address of every registry row in testdata/ and to the addresses just
// outside it: the program must deny exactly what Decide denies, with its
// reason (Decide is checked against the registries by
// TestDenyTableMatchesRegistries). None of these addresses is the test
// node's own, so no route lookup denies any of them.
func TestFilterRegistryRows(t *testing.T) {
	f := newTestFilter(t)
	var cases []runCase
	seen := map[netip.Addr]bool{}
	for _, row := range registries(t) {
		for _, a := range edges(row.prefix) {
			if seen[a] {
				continue
			}
			seen[a] = true
			name := fmt.Sprintf("%s %v %v", row.registry, row.prefix, a)
			cases = append(cases, deniedUDP(name, normalCfg, a, 9, Decide(f.deny, a)))
		}
	}
	t.Logf("%d destinations", len(cases))
	runCases(t, f, cases)
}

// TestFilterEmbeddedIPv4 sends to every form of IPv6 address that embeds an
// IPv4 address, once with a private and once with a public one inside.
func TestFilterEmbeddedIPv4(t *testing.T) {
	f := newTestFilter(t)
	a := netip.MustParseAddr
	tests := []struct {
		form             string
		private, public  string
		wantPub, wantPri Reason
	}{
		{"nat64 well-known", "64:ff9b::10.1.2.3", "64:ff9b::11.2.3.4", ReasonNone, ReasonPrivate},
		{"nat64 well-known metadata", "64:ff9b::169.254.169.254", "64:ff9b::11.2.3.4", ReasonNone, ReasonMetadata},
		{"nat64 local-use", "64:ff9b:1::10.1.2.3", "64:ff9b:1::11.2.3.4", ReasonNotGlobal, ReasonPrivate},
		{"6to4", "2002:a01:203::1", "2002:b02:304::1", ReasonNone, ReasonPrivate},
		{"teredo server", "2001:0:a01:203::f4fd:fcfb", "2001:0:b02:304::f4fd:fcfb", ReasonNone, ReasonPrivate},
		{"teredo client", "2001:0:b02:304::f5fe:fdfc", "2001:0:b02:304::f4fd:fcfb", ReasonNone, ReasonPrivate},
		{"ipv4-compatible", "::10.1.2.3", "::11.2.3.4", ReasonReserved, ReasonPrivate},
		{"ipv4-mapped", "::ffff:10.1.2.3", "::ffff:11.2.3.4", ReasonNotGlobal, ReasonPrivate},
		{"nat64 of the node (trie)", "64:ff9b::12.0.0.1", "64:ff9b::11.2.3.4", ReasonNone, ReasonNode},
		{"6to4 of a platform address", "2002:d00:9::1", "2002:b02:304::1", ReasonNone, ReasonPlatform},
	}
	var cases []runCase
	for _, tt := range tests {
		for _, c := range []struct {
			addr string
			want Reason
		}{{tt.private, tt.wantPri}, {tt.public, tt.wantPub}} {
			if got := Decide(f.deny, a(c.addr)); got != c.want {
				t.Errorf("Decide(%s) = %v, want %v", c.addr, got, c.want)
			}
			cases = append(cases, deniedUDP(tt.form+" "+c.addr, normalCfg, a(c.addr), 9, c.want))
		}
	}
	runCases(t, f, cases)
}

// TestFilterNeighbourDiscovery sends each neighbour discovery message to
// each class of destination and from each class of source. Only messages
// on the link (ff02::/16, fe80::/10) from the sandbox's link-local address
// or :: skip the policy; every other goes through it like any packet.
func TestFilterNeighbourDiscovery(t *testing.T) {
	f := newTestFilter(t)
	a := netip.MustParseAddr
	unspec := netip.IPv6Unspecified()
	dests := []struct {
		class string
		addr  netip.Addr
		// policy is what the denylist does with a non-ND packet there.
		policy Reason
	}{
		{"solicited-node multicast", a("ff02::1:ff00:1"), ReasonMulticast},
		{"all-routers", a("ff02::2"), ReasonMulticast},
		{"all-nodes", a("ff02::1"), ReasonMulticast},
		{"link-local unicast", a("fe80::1"), ReasonLinkLocal},
		{"site-local multicast", a("ff05::2"), ReasonMulticast},
		{"global multicast", a("ff0e::1"), ReasonMulticast},
		{"private gateway", a("fd00:200::1"), ReasonPrivate},
		{"public", a("2600:5::7"), ReasonNone},
		{"node's trie address", a("2600:ffff::1"), ReasonNode},
		{"node's own address", fibNode6, ReasonNode},
	}
	sources := []struct {
		class string
		addr  netip.Addr
		own   bool
	}{
		{"own link-local", sandboxLL, true},
		{"unspecified", unspec, true},
		{"other link-local", a("fe80::99"), false},
		{"own global", sandbox6, false},
	}
	var cases []runCase
	for _, typ := range []uint8{133, 134, 135, 136, 137} {
		for _, d := range dests {
			for _, s := range sources {
				onLink := d.addr.IsLinkLocalMulticast() || d.addr.IsLinkLocalUnicast()
				c := runCase{name: fmt.Sprintf("type %d to %s from %s", typ, d.class, s.class), cfg: normalCfg,
					frame: icmpv6From(s.addr, d.addr, 255, typ), want: verdictNext}
				if !(onLink && s.own) {
					c.reason = d.policy
					if d.policy != ReasonNone {
						c.want = verdictDrop
					}
				}
				cases = append(cases, c)
			}
		}
	}
	withHBH := ipv6Packet(sandboxLL, a("ff02::1:ff00:1"), 255, []ext{hopByHop()}, protoICMPv6, append([]byte{135}, make([]byte, 23)...))
	code1 := icmpv6From(sandboxLL, a("ff02::1:ff00:1"), 255, 135)
	code1[14+40+1] = 1
	cases = append(cases,
		runCase{"hop limit 64", normalCfg, icmpv6From(sandboxLL, a("ff02::1:ff00:1"), 64, 135), verdictDrop, ReasonMulticast, netip.AddrPort{}},
		runCase{"behind a hop-by-hop header", normalCfg, withHBH, verdictDrop, ReasonMulticast, netip.AddrPort{}},
		runCase{"code 1", normalCfg, code1, verdictDrop, ReasonMulticast, netip.AddrPort{}},
		runCase{"no internet", offlineCfg, icmpv6From(sandboxLL, a("ff02::1:ff00:1"), 255, 135), verdictDrop, ReasonNoInternet, netip.AddrPort{}},
		runCase{"no internet dad", offlineCfg, icmpv6From(unspec, a("ff02::1:ff00:1"), 255, 135), verdictDrop, ReasonNoInternet, netip.AddrPort{}},
		runCase{"unconfigured", nil, icmpv6From(sandboxLL, a("fe80::1"), 255, 136), verdictDrop, ReasonUnconfigured, netip.AddrPort{}},
		runCase{"no link-local configured", &SandboxConfig{}, icmpv6From(sandboxLL, a("ff02::2"), 255, 133), verdictDrop, ReasonMulticast, netip.AddrPort{}},
		runCase{"no link-local configured, dad", &SandboxConfig{}, icmpv6From(unspec, a("ff02::1:ff00:2"), 255, 135), verdictNext, 0, netip.AddrPort{}},
		runCase{"mld report not counted", normalCfg, icmpv6From(sandboxLL, a("ff02::16"), 1, 143), verdictDrop, 0, netip.AddrPort{}},
		runCase{"mld query not counted", normalCfg, icmpv6From(sandboxLL, a("ff02::1"), 1, 130), verdictDrop, 0, netip.AddrPort{}},
		runCase{"echo to ff02::1 counted", normalCfg, icmpv6(a("ff02::1"), 64, 128), verdictDrop, ReasonMulticast, netip.AddrPort{}},
	)
	runCases(t, f, cases)
}

// TestFilterExtensionHeaders sends DNS and HTTPS datagrams to a public host
// behind 0 to 10 extension headers: up to MAX_EXT_HDRS (8) the filter sees
// the port (DNS is denied as not the resolver, 443 passes); a longer chain
// is not parsed and dropped.
func TestFilterExtensionHeaders(t *testing.T) {
	f := newTestFilter(t)
	dst := netip.MustParseAddr("2600:5::7")
	const maxExt = 8
	var cases []runCase
	for n := 0; n <= 10; n++ {
		var exts []ext
		for i := range n {
			if i == 0 {
				exts = append(exts, hopByHop())
			} else {
				exts = append(exts, destOpts())
			}
		}
		dns := runCase{fmt.Sprintf("%d headers dns", n), normalCfg, ipv6Packet(sandbox6, dst, 64, exts, protoUDP, l4(protoUDP, 53)),
			verdictDrop, ReasonDNSNotResolver, netip.AddrPortFrom(dst, 53)}
		https := runCase{fmt.Sprintf("%d headers https", n), normalCfg, ipv6Packet(sandbox6, dst, 64, exts, protoUDP, l4(protoUDP, 443)),
			verdictNext, 0, netip.AddrPort{}}
		if n == 0 {
			dns.want = verdictRedirect // no extension header: answered with a port unreachable
		}
		if n > maxExt {
			dns.reason, dns.last = ReasonProtocol, netip.AddrPort{}
			https.want, https.reason = verdictDrop, ReasonProtocol
		}
		cases = append(cases, dns, https)
	}
	truncated := ipv6Packet(sandbox6, dst, 64, []ext{hopByHop()}, protoUDP, l4(protoUDP, 443))
	truncated = truncated[:14+40+4] // the hop-by-hop header cut short
	noL4 := ipv6Packet(sandbox6, dst, 64, []ext{fragmentHdr(0, true)}, protoUDP, []byte{0x9c, 0x40})
	cases = append(cases,
		runCase{"chain cut short", normalCfg, truncated, verdictDrop, ReasonProtocol, netip.AddrPort{}},
		runCase{"routing header, segments left", normalCfg, ipv6Packet(sandbox6, dst, 64, []ext{routingHdr(1)}, protoUDP, l4(protoUDP, 443)), verdictDrop, ReasonProtocol, netip.AddrPort{}},
		runCase{"routing header, no segments left", normalCfg, ipv6Packet(sandbox6, dst, 64, []ext{routingHdr(0)}, protoUDP, l4(protoUDP, 443)), verdictNext, 0, netip.AddrPort{}},
		runCase{"first fragment", normalCfg, ipv6Packet(sandbox6, dst, 64, []ext{fragmentHdr(0, true)}, protoUDP, l4(protoUDP, 443)), verdictNext, 0, netip.AddrPort{}},
		runCase{"first fragment dns", normalCfg, ipv6Packet(sandbox6, dst, 64, []ext{fragmentHdr(0, true)}, protoUDP, l4(protoUDP, 53)), verdictDrop, ReasonDNSNotResolver, netip.AddrPort{}},
		runCase{"first fragment without its udp header", normalCfg, noL4, verdictDrop, ReasonProtocol, netip.AddrPort{}},
		runCase{"later fragment", normalCfg, ipv6Packet(sandbox6, dst, 64, []ext{fragmentHdr(185, false)}, protoUDP, make([]byte, 16)), verdictNext, 0, netip.AddrPort{}},
		runCase{"later fragment to a private host", normalCfg, ipv6Packet(sandbox6, netip.MustParseAddr("fd00::1"), 64, []ext{fragmentHdr(185, false)}, protoUDP, make([]byte, 16)), verdictDrop, ReasonPrivate, netip.AddrPort{}},
		runCase{"no next header", normalCfg, ipv6Packet(sandbox6, dst, 64, []ext{hopByHop()}, 59, nil), verdictDrop, ReasonProtocol, netip.AddrPort{}},
	)
	runCases(t, f, cases)
}

// TestFilterProtocols checks that only TCP, UDP and the family's ICMP leave
// a sandbox, and that each encapsulation, by IP protocol or by its UDP
// port, is denied as one, to a public host of either family.
func TestFilterProtocols(t *testing.T) {
	f := newTestFilter(t)
	v4, v6 := netip.MustParseAddr("11.2.3.4"), netip.MustParseAddr("2600:5::7")
	var cases []runCase
	for _, p := range []struct {
		name   string
		proto  uint8
		reason Reason
	}{
		{"ip-in-ip", 4, ReasonEncapsulation},
		{"ipv6-in-ip", 41, ReasonEncapsulation},
		{"gre", 47, ReasonEncapsulation},
		{"etherip", 97, ReasonEncapsulation},
		{"encap", 98, ReasonEncapsulation},
		{"l2tpv3", 115, ReasonEncapsulation},
		{"mpls-in-ip", 137, ReasonEncapsulation},
		{"ethernet", 143, ReasonEncapsulation},
		{"igmp", 2, ReasonProtocol},
		{"esp", 50, ReasonProtocol},
		{"ah", 51, ReasonProtocol},
		{"ospf", 89, ReasonProtocol},
		{"sctp", 132, ReasonProtocol},
		{"udplite", 136, ReasonProtocol},
	} {
		cases = append(cases,
			runCase{"v4 " + p.name, normalCfg, ipv4Packet(v4, p.proto, 0, l4(p.proto, 0)), verdictDrop, p.reason, netip.AddrPortFrom(v4, 0)},
			runCase{"v6 " + p.name, normalCfg, ipv6Packet(sandbox6, v6, 64, nil, p.proto, l4(p.proto, 0)), verdictDrop, p.reason, netip.AddrPortFrom(v6, 0)})
	}
	for _, port := range []uint16{1701, 2152, 3544, 4341, 4500, 4754, 4789, 4790, 6081, 6635, 8472} {
		cases = append(cases,
			deniedUDP(fmt.Sprintf("v4 udp %d", port), normalCfg, v4, port, ReasonEncapsulation),
			deniedUDP(fmt.Sprintf("v6 udp %d", port), normalCfg, v6, port, ReasonEncapsulation))
	}
	cases = append(cases,
		runCase{"icmp in ipv6", normalCfg, ipv6Packet(sandbox6, v6, 64, nil, protoICMP, l4(protoICMP, 0)), verdictDrop, ReasonProtocol, netip.AddrPort{}},
		runCase{"icmpv6 in ipv4", normalCfg, ipv4Packet(v4, protoICMPv6, 0, l4(protoICMPv6, 0)), verdictDrop, ReasonProtocol, netip.AddrPort{}},
		runCase{"v4 tcp", normalCfg, ipv4Frame(v4, protoTCP, 443), verdictNext, 0, netip.AddrPort{}},
		runCase{"v4 udp", normalCfg, ipv4Frame(v4, protoUDP, 443), verdictNext, 0, netip.AddrPort{}},
		runCase{"v4 ping", normalCfg, ipv4Frame(v4, protoICMP, 0), verdictNext, 0, netip.AddrPort{}},
		runCase{"v6 tcp", normalCfg, ipv6L4(v6, protoTCP, 443), verdictNext, 0, netip.AddrPort{}},
		runCase{"v6 udp", normalCfg, ipv6L4(v6, protoUDP, 443), verdictNext, 0, netip.AddrPort{}},
		runCase{"v6 ping", normalCfg, ipv6L4(v6, protoICMPv6, 0), verdictNext, 0, netip.AddrPort{}},
		runCase{"v4 udp later fragment", normalCfg, ipv4Packet(v4, protoUDP, 185, make([]byte, 16)), verdictNext, 0, netip.AddrPort{}},
		runCase{"v4 udp first fragment without its header", normalCfg, ipv4Packet(v4, protoUDP, 0x2000, []byte{0x9c, 0x40}), verdictDrop, ReasonProtocol, netip.AddrPort{}},
		runCase{"v4 gre later fragment", normalCfg, ipv4Packet(v4, 47, 185, make([]byte, 16)), verdictDrop, ReasonEncapsulation, netip.AddrPort{}},
		runCase{"v4 options", normalCfg, ipv4Options(v4), verdictDrop, ReasonProtocol, netip.AddrPort{}},
	)
	runCases(t, f, cases)
}

// ipv4Options is a UDP datagram to dst whose header carries a loose source
// route option.
func ipv4Options(dst netip.Addr) []byte {
	opt := []byte{131, 7, 4, 11, 9, 9, 9, 0} // LSRR via 11.9.9.9, then end of options
	p := l4(protoUDP, 443)
	h := make([]byte, 20)
	h[0] = 0x47
	binary.BigEndian.PutUint16(h[2:], uint16(28+len(p)))
	h[8], h[9] = 64, protoUDP
	s, d := sandbox4.As4(), dst.As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	h = append(h, opt...)
	binary.BigEndian.PutUint16(h[10:], checksum(h, 0))
	return ether(0x0800, append(h, p...))
}

// TestFilterNodeRoutes checks that the node's own destinations are denied
// by the node's routing tables, not by a list: its addresses, its subnet
// broadcast and its IPv6 subnet-router anycast address, an address added
// after the denylist was loaded, and nothing it has no route for.
func TestFilterNodeRoutes(t *testing.T) {
	f := newTestFilter(t)
	a := netip.MustParseAddr
	h, err := netlink.NewHandleAt(f.node, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"14.0.0.9/32", "2600:7::9/128"} {
		ad, _ := netlink.ParseAddr(p)
		ad.Flags = unix.IFA_F_NODAD
		if err := h.AddrAdd(lo, ad); err != nil {
			t.Fatalf("add %s to lo: %v", p, err)
		}
	}
	waitLocalRoutes(t, h, a("14.0.0.9"), a("2600:7::9"))
	runCases(t, f, []runCase{
		deniedUDP("node v4", normalCfg, fibNode4, 9, ReasonNode),
		deniedUDP("node v6", normalCfg, fibNode6, 9, ReasonNode),
		deniedUDP("subnet broadcast", normalCfg, a("11.1.0.255"), 9, ReasonNode),
		deniedUDP("subnet-router anycast", normalCfg, a("2600:1::"), 9, ReasonNode),
		deniedUDP("added v4", normalCfg, a("14.0.0.9"), 9, ReasonNode),
		deniedUDP("added v6", normalCfg, a("2600:7::9"), 9, ReasonNode),
		deniedUDP("trie node v4", normalCfg, a("12.0.0.1"), 9, ReasonNode),
		deniedUDP("trie broadcast", normalCfg, a("12.0.0.255"), 9, ReasonBroadcast),
		deniedUDP("neighbour on the uplink", normalCfg, a("11.1.0.7"), 9, ReasonNone),
		deniedUDP("beyond the gateway", normalCfg, a("11.2.0.7"), 9, ReasonNone),
		{"tcp to the node is reset", normalCfg, ipv4Frame(fibNode4, protoTCP, 22), verdictRedirect, ReasonNode, netip.AddrPortFrom(fibNode4, 22)},
		deniedUDP("dns to a resolver on the node", &SandboxConfig{Resolvers: []netip.Addr{fibNode4}}, fibNode4, 53, ReasonNone),
	})
	// Without a default route, public IPv6 has no route.
	if err := h.RouteDel(&netlink.Route{Dst: &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}, Gw: net.IP(fibGateway6.AsSlice())}); err != nil {
		t.Fatalf("delete the IPv6 default route: %v", err)
	}
	runCases(t, f, []runCase{
		deniedUDP("no route v6", normalCfg, a("2600:5::7"), 9, ReasonNoRoute),
		deniedUDP("on-link v6", normalCfg, a("2600:1::7"), 9, ReasonNone),
	})
}

func TestFilterProgramRun(t *testing.T) {
	f := newTestFilter(t)
	a4 := netip.MustParseAddr
	hopByHop := make([]byte, 8)
	public4, public6 := a4("11.2.3.4"), a4("2600:5::7")
	runCases(t, f, []runCase{
		{"0/8", normalCfg, ipv4Frame(a4("0.1.2.3"), protoUDP, 9), verdictRedirect, ReasonReserved, netip.MustParseAddrPort("0.1.2.3:9")},
		{"10/8", normalCfg, ipv4Frame(a4("10.200.0.1"), protoUDP, 9), verdictRedirect, ReasonPrivate, netip.MustParseAddrPort("10.200.0.1:9")},
		{"metadata", normalCfg, ipv4Frame(a4("169.254.169.254"), protoUDP, 80), verdictRedirect, ReasonMetadata, netip.MustParseAddrPort("169.254.169.254:80")},
		{"icmp 10/8", normalCfg, ipv4Frame(a4("10.0.0.1"), protoICMP, 0), verdictDrop, ReasonPrivate, netip.MustParseAddrPort("10.0.0.1:0")},
		{"platform", normalCfg, ipv4Frame(a4("13.0.0.9"), protoUDP, 9), verdictRedirect, ReasonPlatform, netip.AddrPort{}},
		{"v4-mapped v6", normalCfg, ipv6L4(a4("::ffff:10.0.0.1"), protoUDP, 9), verdictRedirect, ReasonPrivate, netip.MustParseAddrPort("[::ffff:10.0.0.1]:9")},
		{"public v4 udp", normalCfg, ipv4Frame(public4, protoUDP, 443), verdictNext, 0, netip.AddrPort{}},
		{"public v4 tcp syn", normalCfg, ipv4Frame(public4, protoTCP, 443), verdictNext, 0, netip.AddrPort{}},
		{"public v6 tcp syn", normalCfg, ipv6L4(public6, protoTCP, 443), verdictNext, 0, netip.AddrPort{}},
		{"public v6 ping", normalCfg, ipv6L4(public6, protoICMPv6, 0), verdictNext, 0, netip.AddrPort{}},
		{"documentation v4", normalCfg, ipv4Frame(a4("198.51.100.7"), protoTCP, 443), verdictRedirect, ReasonDocumentation, netip.MustParseAddrPort("198.51.100.7:443")},
		{"benchmarking", normalCfg, ipv4Frame(a4("198.18.0.9"), protoUDP, 7), verdictRedirect, ReasonBenchmarking, netip.MustParseAddrPort("198.18.0.9:7")},
		{"site-local", normalCfg, ipv6L4(a4("fec0::1"), protoUDP, 7), verdictRedirect, ReasonReserved, netip.MustParseAddrPort("[fec0::1]:7")},
		{"resolver udp v4", normalCfg, ipv4Frame(a4("10.0.0.53"), protoUDP, 53), verdictNext, 0, netip.AddrPort{}},
		{"resolver tcp v4", normalCfg, ipv4Frame(a4("10.0.0.53"), protoTCP, 53), verdictNext, 0, netip.AddrPort{}},
		{"resolver udp v6", normalCfg, ipv6L4(a4("fd00::53"), protoUDP, 53), verdictNext, 0, netip.AddrPort{}},
		{"resolver other port", normalCfg, ipv4Frame(a4("10.0.0.53"), protoUDP, 54), verdictRedirect, ReasonPrivate, netip.AddrPort{}},
		{"dns public", normalCfg, ipv4Frame(public4, protoUDP, 53), verdictRedirect, ReasonDNSNotResolver, netip.AddrPortFrom(public4, 53)},
		{"dns public v6", normalCfg, ipv6L4(public6, protoUDP, 53), verdictRedirect, ReasonDNSNotResolver, netip.AddrPort{}},
		{"dns behind hop-by-hop", normalCfg, ipv6Frame(public6, 64, hopByHop, protoUDP, l4(protoUDP, 53)), verdictDrop, ReasonDNSNotResolver, netip.AddrPort{}},
		{"dns private", normalCfg, ipv4Frame(a4("10.0.0.54"), protoUDP, 53), verdictRedirect, ReasonPrivate, netip.AddrPort{}},
		{"no internet public", offlineCfg, ipv4Frame(public4, protoUDP, 443), verdictRedirect, ReasonNoInternet, netip.AddrPort{}},
		{"no internet v6", offlineCfg, ipv6L4(public6, protoUDP, 443), verdictRedirect, ReasonNoInternet, netip.AddrPort{}},
		{"no internet resolver", offlineCfg, ipv4Frame(a4("10.0.0.53"), protoUDP, 53), verdictRedirect, ReasonNoInternet, netip.AddrPort{}},
		{"arp", normalCfg, arpFrame(), verdictNext, 0, netip.AddrPort{}},
		{"arp no internet", offlineCfg, arpFrame(), verdictNext, 0, netip.AddrPort{}},
		{"arp unconfigured", nil, arpFrame(), verdictNext, 0, netip.AddrPort{}},
		{"unconfigured", nil, ipv4Frame(public4, protoUDP, 443), verdictRedirect, ReasonUnconfigured, netip.AddrPort{}},
		{"other ethertype", normalCfg, ether(0x88cc, make([]byte, 46)), verdictDrop, ReasonProtocol, netip.AddrPort{}},
		{"ipv4 ihl < 5", normalCfg, ether(0x0800, append([]byte{0x44}, make([]byte, 45)...)), verdictDrop, ReasonProtocol, netip.AddrPort{}},
		{"ipv6 version 4", normalCfg, ether(0x86dd, append([]byte{0x40}, make([]byte, 59)...)), verdictDrop, ReasonProtocol, netip.AddrPort{}},
	})
}

// TestFilterTCPReset checks that a denied SYN comes back as a RST|ACK from the
// destination, redirected out of the interface it came in on.
func TestFilterTCPReset(t *testing.T) {
	f := newTestFilter(t)
	setTestConfig(t, f, &SandboxConfig{})
	a := netip.MustParseAddr

	t.Run("ipv4", func(t *testing.T) {
		dst := a("169.254.169.254")
		got, out := runFrame(t, f, ipv4Frame(dst, protoTCP, 80))
		if got != verdictRedirect {
			t.Fatalf("Run() = %#x, want %#x (redirect)", got, verdictRedirect)
		}
		if len(out) != 54 {
			t.Fatalf("reply length = %d, want 54", len(out))
		}
		checkEther(t, out, 0x0800)
		ip := out[14:34]
		if ip[0] != 0x45 || ip[9] != protoTCP || checksum(ip, 0) != 0 {
			t.Errorf("bad IPv4 header % x", ip)
		}
		if src, dstAddr := netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20])); src != dst || dstAddr != sandbox4 {
			t.Errorf("reply %v -> %v, want %v -> %v", src, dstAddr, dst, sandbox4)
		}
		var pseudo []byte
		pseudo = append(pseudo, ip[12:20]...)
		pseudo = append(pseudo, 0, protoTCP, 0, 20)
		checkRST(t, out[34:], pseudo)
		c, _, _ := f.readCount(testIfindex, ReasonMetadata)
		if c.Packets != 1 || c.Last != netip.AddrPortFrom(dst, 80) {
			t.Errorf("metadata counter = %+v, want 1 packet to %v:80", c, dst)
		}
	})
	t.Run("ipv6", func(t *testing.T) {
		dst := a("fd00::1")
		got, out := runFrame(t, f, ipv6L4(dst, protoTCP, 22))
		if got != verdictRedirect {
			t.Fatalf("Run() = %#x, want %#x (redirect)", got, verdictRedirect)
		}
		if len(out) != 74 {
			t.Fatalf("reply length = %d, want 74", len(out))
		}
		checkEther(t, out, 0x86dd)
		ip := out[14:54]
		if src, dstAddr := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40])); src != dst || dstAddr != sandbox6 {
			t.Errorf("reply %v -> %v, want %v -> %v", src, dstAddr, dst, sandbox6)
		}
		if ip[6] != protoTCP || binary.BigEndian.Uint16(ip[4:]) != 20 {
			t.Errorf("bad IPv6 header % x", ip)
		}
		var pseudo []byte
		pseudo = append(pseudo, ip[8:40]...)
		pseudo = append(pseudo, 0, 0, 0, 20, 0, 0, 0, protoTCP)
		checkRST(t, out[54:], pseudo)
	})
	t.Run("syn-ack is only dropped", func(t *testing.T) {
		frame := ipv4Frame(a("10.0.0.1"), protoTCP, 80)
		frame[14+20+13] = 0x12 // SYN|ACK
		if got, _ := runFrame(t, f, frame); got != verdictDrop {
			t.Errorf("Run() = %#x, want %#x", got, verdictDrop)
		}
	})
}

// TestFilterUDPUnreachable checks that a denied UDP datagram comes back as
// the ICMP port unreachable its destination would send, quoting it,
// redirected out of the interface it came in on; and that a datagram with
// IPv6 extension headers is only dropped.
func TestFilterUDPUnreachable(t *testing.T) {
	f := newTestFilter(t)
	setTestConfig(t, f, &SandboxConfig{})
	a := netip.MustParseAddr

	t.Run("ipv4", func(t *testing.T) {
		dst := a("10.9.9.9")
		in := ipv4Frame(dst, protoUDP, 53)
		got, out := runFrame(t, f, in)
		if got != verdictRedirect {
			t.Fatalf("Run() = %#x, want %#x (redirect)", got, verdictRedirect)
		}
		if len(out) != 14+20+8+28 {
			t.Fatalf("reply length = %d, want 70", len(out))
		}
		checkEther(t, out, 0x0800)
		ip := out[14:34]
		if ip[0] != 0x45 || ip[9] != protoICMP || checksum(ip, 0) != 0 || binary.BigEndian.Uint16(ip[2:]) != 56 {
			t.Errorf("bad IPv4 header % x", ip)
		}
		if src, d := netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20])); src != dst || d != sandbox4 {
			t.Errorf("reply %v -> %v, want %v -> %v", src, d, dst, sandbox4)
		}
		icmp := out[34:]
		if icmp[0] != 3 || icmp[1] != 3 || checksum(icmp, 0) != 0 {
			t.Errorf("ICMP header type %d code %d, checksum residue %#x; want 3, 3 and 0", icmp[0], icmp[1], checksum(icmp, 0))
		}
		if q := icmp[8:]; string(q) != string(in[14:14+28]) {
			t.Errorf("quoted % x, want the datagram's headers % x", q, in[14:14+28])
		}
	})
	t.Run("ipv6", func(t *testing.T) {
		dst := a("fd00::9")
		in := ipv6L4(dst, protoUDP, 53)
		got, out := runFrame(t, f, in)
		if got != verdictRedirect {
			t.Fatalf("Run() = %#x, want %#x (redirect)", got, verdictRedirect)
		}
		if len(out) != 14+40+8+48 {
			t.Fatalf("reply length = %d, want 110", len(out))
		}
		checkEther(t, out, 0x86dd)
		ip := out[14:54]
		if src, d := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40])); src != dst || d != sandbox6 {
			t.Errorf("reply %v -> %v, want %v -> %v", src, d, dst, sandbox6)
		}
		if ip[6] != protoICMPv6 || binary.BigEndian.Uint16(ip[4:]) != 56 {
			t.Errorf("bad IPv6 header % x", ip)
		}
		icmp := out[54:]
		var pseudo []byte
		pseudo = append(pseudo, ip[8:40]...)
		pseudo = append(pseudo, 0, 0, 0, 56, 0, 0, 0, protoICMPv6)
		var sum uint32
		for i := 0; i < len(pseudo); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(pseudo[i:]))
		}
		if icmp[0] != 1 || icmp[1] != 4 || checksum(icmp, sum) != 0 {
			t.Errorf("ICMPv6 header type %d code %d, checksum residue %#x; want 1, 4 and 0", icmp[0], icmp[1], checksum(icmp, sum))
		}
		if q := icmp[8:]; string(q) != string(in[14:14+48]) {
			t.Errorf("quoted % x, want the datagram's headers % x", q, in[14:14+48])
		}
	})
	t.Run("behind an extension header", func(t *testing.T) {
		in := ipv6Packet(sandbox6, a("fd00::9"), 64, []ext{hopByHop()}, protoUDP, l4(protoUDP, 53))
		if got, _ := runFrame(t, f, in); got != verdictDrop {
			t.Errorf("Run() = %#x, want %#x", got, verdictDrop)
		}
	})
}

func checkEther(t *testing.T, out []byte, etherType uint16) {
	t.Helper()
	if string(out[0:6]) != string(sandboxMAC) || string(out[6:12]) != string(hostMAC) {
		t.Errorf("reply MACs %x -> %x, want %x -> %x", out[6:12], out[0:6], hostMAC, sandboxMAC)
	}
	if got := binary.BigEndian.Uint16(out[12:]); got != etherType {
		t.Errorf("reply ethertype = %#x, want %#x", got, etherType)
	}
}

func checkRST(t *testing.T, tcp, pseudo []byte) {
	t.Helper()
	sport, dport := binary.BigEndian.Uint16(tcp[0:]), binary.BigEndian.Uint16(tcp[2:])
	if dport != 40000 {
		t.Errorf("reply ports %d -> %d, want -> 40000", sport, dport)
	}
	if ack := binary.BigEndian.Uint32(tcp[8:]); ack != 1001 {
		t.Errorf("reply ack = %d, want 1001", ack)
	}
	if tcp[12]>>4 != 5 || tcp[13] != 0x14 {
		t.Errorf("reply doff/flags = %#x/%#x, want 5/RST|ACK", tcp[12]>>4, tcp[13])
	}
	var sum uint32
	for i := 0; i < len(pseudo); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(pseudo[i:]))
	}
	if c := checksum(tcp, sum); c != 0 {
		t.Errorf("reply TCP checksum does not verify (residue %#x)", c)
	}
}

func TestReasonString(t *testing.T) {
	seen := map[string]Reason{}
	for r := Reason(1); r <= maxReason; r++ {
		s := r.String()
		if s == "" || len(s) > 7 && s[:7] == "reason_" {
			t.Errorf("Reason(%d).String() = %q, want a name", r, s)
		}
		if other, dup := seen[s]; dup {
			t.Errorf("Reason(%d) and Reason(%d) are both %q", r, other, s)
		}
		seen[s] = r
	}
	if got := Reason(99).String(); got != "reason_99" {
		t.Errorf("Reason(99).String() = %q, want reason_99", got)
	}
}

// TestFilterSetDenylist replaces the platform CIDRs at run time.
func TestFilterSetDenylist(t *testing.T) {
	f := newTestFilter(t)
	setTestConfig(t, f, &SandboxConfig{})
	a := netip.MustParseAddr
	old, repl := a("13.0.0.9"), a("15.0.0.7")
	if got, _ := runFrame(t, f, ipv4Frame(old, protoUDP, 9)); got != verdictRedirect {
		t.Fatalf("before: Run(%v) = %#x, want a port unreachable", old, got)
	}
	if err := f.SetDenylist(DefaultDenylist(nil, []netip.Prefix{netip.MustParsePrefix("15.0.0.0/24")})); err != nil {
		t.Fatalf("SetDenylist: %v", err)
	}
	if got, _ := runFrame(t, f, ipv4Frame(old, protoUDP, 9)); got != verdictNext {
		t.Errorf("after: Run(%v) = %#x, want pass", old, got)
	}
	if got, _ := runFrame(t, f, ipv4Frame(repl, protoUDP, 9)); got != verdictRedirect {
		t.Errorf("after: Run(%v) = %#x, want a port unreachable", repl, got)
	}
	if c, _, _ := f.readCount(testIfindex, ReasonPlatform); c.Packets != 2 {
		t.Errorf("platform counter = %d, want 2", c.Packets)
	}
	if err := f.SetDenylist([]Entry{{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Reason: 99}}); err == nil {
		t.Error("SetDenylist with reason 99 = nil, want error")
	}
	// A failed SetDenylist leaves the previous list in place.
	if got, _ := runFrame(t, f, ipv4Frame(repl, protoUDP, 9)); got != verdictRedirect {
		t.Errorf("after failed SetDenylist: Run(%v) = %#x, want a port unreachable", repl, got)
	}
}

func TestFilterAttachWithoutDenylist(t *testing.T) {
	testenv.RequireRoot(t)
	f, err := NewFilter(testenv.Logger(t))
	if err != nil {
		testenv.Missing(t, "eBPF egress filter cannot load: "+err.Error())
	}
	defer f.Close()
	if _, err := f.Attach(testIfindex, SandboxConfig{}); !errors.Is(err, ErrNoDenylist) {
		t.Errorf("Attach before SetDenylist = %v, want ErrNoDenylist", err)
	}
	if _, err := f.Attach(testIfindex, SandboxConfig{Resolvers: make([]netip.Addr, MaxResolvers+1)}); err == nil {
		t.Error("Attach with too many resolvers = nil, want error")
	}
	if _, err := sandboxCfgValue(SandboxConfig{LinkLocal: netip.MustParseAddr("fd00::2")}); err == nil {
		t.Error("sandboxCfgValue with a non-link-local LinkLocal = nil error, want one")
	}
}
