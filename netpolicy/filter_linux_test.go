package netpolicy

import (
	"encoding/binary"
	"errors"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

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

// newTestFilter loads the filter with SPEC's denylist plus a node address
// and a platform CIDR, or skips (fails under CI) without root and BPF.
func newTestFilter(t testing.TB) *Filter {
	t.Helper()
	testenv.RequireRoot(t)
	logger := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	f, err := NewFilter(logger)
	if err != nil {
		testenv.Missing(t, "eBPF egress filter cannot load: "+err.Error())
	}
	t.Cleanup(func() { f.Close() })
	deny := DefaultDenylist(
		[]netip.Addr{netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("2001:db8:ffff::1")},
		[]netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")},
	)
	if err := f.SetDenylist(deny); err != nil {
		t.Fatalf("SetDenylist: %v", err)
	}
	return f
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

// setTestConfig installs cfg for the test-run ifindex and clears its counters.
func setTestConfig(t testing.TB, f *Filter, cfg *SandboxConfig) {
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

func runFrame(t *testing.T, f *Filter, frame []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, 1600)
	opts := &ebpf.RunOptions{Data: frame, DataOut: out}
	ret, err := f.objs.EgressFilter.Run(opts)
	if err != nil {
		t.Fatalf("Program.Run: %v", err)
	}
	return ret, opts.DataOut
}

var (
	sandboxMAC = []byte{0x02, 0, 0, 0, 0, 0x02}
	hostMAC    = []byte{0x02, 0, 0, 0, 0, 0x01}
	sandbox4   = netip.MustParseAddr("192.0.2.2")
	sandbox6   = netip.MustParseAddr("2001:db8:1::2")
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
// echo header with 8 bytes of payload; checksums are left zero.
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
	default:
		h := make([]byte, 16)
		h[0] = 8 // echo request (ICMPv6 128 set by caller)
		return h
	}
}

func ipv4Frame(dst netip.Addr, proto uint8, dport uint16) []byte {
	p := l4(proto, dport)
	h := make([]byte, 20)
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(p)))
	h[8] = 64
	h[9] = proto
	s, d := sandbox4.As4(), dst.As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	binary.BigEndian.PutUint16(h[10:], checksum(h, 0))
	return ether(0x0800, append(h, p...))
}

func ipv6Frame(dst netip.Addr, hopLimit uint8, ext []byte, nh uint8, payload []byte) []byte {
	h := make([]byte, 40)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(ext)+len(payload)))
	h[6] = nh
	if len(ext) > 0 {
		h[6] = 0 // hop-by-hop
		ext[0] = nh
	}
	h[7] = hopLimit
	s, d := sandbox6.As16(), dst.As16()
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	return ether(0x86dd, append(append(h, ext...), payload...))
}

func ipv6L4(dst netip.Addr, proto uint8, dport uint16) []byte {
	p := l4(proto, dport)
	if proto == protoICMPv6 {
		p[0] = 128
	}
	return ipv6Frame(dst, 64, nil, proto, p)
}

func icmpv6(dst netip.Addr, hopLimit, typ uint8) []byte {
	p := make([]byte, 24)
	p[0] = typ
	return ipv6Frame(dst, hopLimit, nil, protoICMPv6, p)
}

func arpFrame() []byte {
	p := make([]byte, 28)
	binary.BigEndian.PutUint16(p[0:], 1)
	binary.BigEndian.PutUint16(p[2:], 0x0800)
	p[4], p[5] = 6, 4
	binary.BigEndian.PutUint16(p[6:], 1)
	return ether(0x0806, p)
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

func TestFilterProgramRun(t *testing.T) {
	f := newTestFilter(t)
	normal := &SandboxConfig{Resolvers: []netip.Addr{
		netip.MustParseAddr("10.0.0.53"), netip.MustParseAddr("fd00::53"),
	}}
	offline := &SandboxConfig{NoInternet: true, Resolvers: normal.Resolvers}
	a4 := netip.MustParseAddr
	hopByHop := make([]byte, 8)

	tests := []struct {
		name  string
		cfg   *SandboxConfig
		frame []byte
		want  uint32
		// reason is the counter expected to read 1 (0: no counter at all).
		reason Reason
		last   netip.AddrPort
	}{
		{"0/8", normal, ipv4Frame(a4("0.1.2.3"), protoUDP, 9), verdictDrop, ReasonReserved, netip.MustParseAddrPort("0.1.2.3:9")},
		{"10/8", normal, ipv4Frame(a4("10.200.0.1"), protoUDP, 9), verdictDrop, ReasonPrivate, netip.MustParseAddrPort("10.200.0.1:9")},
		{"100.64/10", normal, ipv4Frame(a4("100.127.255.254"), protoUDP, 9), verdictDrop, ReasonPrivate, netip.AddrPort{}},
		{"127/8", normal, ipv4Frame(a4("127.0.0.1"), protoUDP, 9), verdictDrop, ReasonLoopback, netip.AddrPort{}},
		{"169.254/16", normal, ipv4Frame(a4("169.254.1.1"), protoUDP, 9), verdictDrop, ReasonLinkLocal, netip.AddrPort{}},
		{"metadata", normal, ipv4Frame(a4("169.254.169.254"), protoUDP, 80), verdictDrop, ReasonMetadata, netip.MustParseAddrPort("169.254.169.254:80")},
		{"172.16/12", normal, ipv4Frame(a4("172.31.0.1"), protoUDP, 9), verdictDrop, ReasonPrivate, netip.AddrPort{}},
		{"192.168/16", normal, ipv4Frame(a4("192.168.1.1"), protoUDP, 9), verdictDrop, ReasonPrivate, netip.AddrPort{}},
		{"224/4", normal, ipv4Frame(a4("239.1.1.1"), protoUDP, 9), verdictDrop, ReasonMulticast, netip.AddrPort{}},
		{"240/4", normal, ipv4Frame(a4("255.255.255.255"), protoUDP, 9), verdictDrop, ReasonReserved, netip.AddrPort{}},
		{"icmp 10/8", normal, ipv4Frame(a4("10.0.0.1"), protoICMP, 0), verdictDrop, ReasonPrivate, netip.MustParseAddrPort("10.0.0.1:0")},
		{"node v4", normal, ipv4Frame(a4("10.1.2.3"), protoUDP, 9), verdictDrop, ReasonNode, netip.AddrPort{}},
		{"node v6", normal, ipv6L4(a4("2001:db8:ffff::1"), protoUDP, 9), verdictDrop, ReasonNode, netip.AddrPort{}},
		{"platform", normal, ipv4Frame(a4("203.0.113.9"), protoUDP, 9), verdictDrop, ReasonPlatform, netip.AddrPort{}},
		{"::1", normal, ipv6L4(a4("::1"), protoUDP, 9), verdictDrop, ReasonLoopback, netip.MustParseAddrPort("[::1]:9")},
		{"fc00::/7", normal, ipv6L4(a4("fdff::1"), protoUDP, 9), verdictDrop, ReasonPrivate, netip.AddrPort{}},
		{"fe80::/10", normal, ipv6L4(a4("fe80::1"), protoUDP, 9), verdictDrop, ReasonLinkLocal, netip.AddrPort{}},
		{"ff00::/8", normal, ipv6L4(a4("ff02::1"), protoICMPv6, 0), verdictDrop, ReasonMulticast, netip.AddrPort{}},
		{"v4-mapped v6", normal, ipv6L4(a4("::ffff:10.0.0.1"), protoUDP, 9), verdictDrop, ReasonPrivate, netip.MustParseAddrPort("10.0.0.1:9")},
		{"public v4 udp", normal, ipv4Frame(a4("198.51.100.7"), protoUDP, 443), verdictNext, 0, netip.AddrPort{}},
		{"public v4 tcp syn", normal, ipv4Frame(a4("198.51.100.7"), protoTCP, 443), verdictNext, 0, netip.AddrPort{}},
		{"public v6 tcp syn", normal, ipv6L4(a4("2001:db8::7"), protoTCP, 443), verdictNext, 0, netip.AddrPort{}},
		{"public v6 ping", normal, ipv6L4(a4("2001:db8::7"), protoICMPv6, 0), verdictNext, 0, netip.AddrPort{}},
		{"resolver udp v4", normal, ipv4Frame(a4("10.0.0.53"), protoUDP, 53), verdictNext, 0, netip.AddrPort{}},
		{"resolver tcp v4", normal, ipv4Frame(a4("10.0.0.53"), protoTCP, 53), verdictNext, 0, netip.AddrPort{}},
		{"resolver udp v6", normal, ipv6L4(a4("fd00::53"), protoUDP, 53), verdictNext, 0, netip.AddrPort{}},
		{"resolver other port", normal, ipv4Frame(a4("10.0.0.53"), protoUDP, 54), verdictDrop, ReasonPrivate, netip.AddrPort{}},
		{"dns public", normal, ipv4Frame(a4("198.51.100.7"), protoUDP, 53), verdictDrop, ReasonDNSNotResolver, netip.MustParseAddrPort("198.51.100.7:53")},
		{"dns public v6", normal, ipv6L4(a4("2001:db8::7"), protoUDP, 53), verdictDrop, ReasonDNSNotResolver, netip.AddrPort{}},
		{"dns behind hop-by-hop", normal, ipv6Frame(a4("2001:db8::7"), 64, hopByHop, protoUDP, l4(protoUDP, 53)), verdictDrop, ReasonDNSNotResolver, netip.AddrPort{}},
		{"dns private", normal, ipv4Frame(a4("10.0.0.54"), protoUDP, 53), verdictDrop, ReasonPrivate, netip.AddrPort{}},
		{"no internet public", offline, ipv4Frame(a4("198.51.100.7"), protoUDP, 443), verdictDrop, ReasonNoInternet, netip.AddrPort{}},
		{"no internet v6", offline, ipv6L4(a4("2001:db8::7"), protoUDP, 443), verdictDrop, ReasonNoInternet, netip.AddrPort{}},
		{"no internet resolver", offline, ipv4Frame(a4("10.0.0.53"), protoUDP, 53), verdictDrop, ReasonNoInternet, netip.AddrPort{}},
		{"arp", normal, arpFrame(), verdictNext, 0, netip.AddrPort{}},
		{"arp no internet", offline, arpFrame(), verdictNext, 0, netip.AddrPort{}},
		{"arp unconfigured", nil, arpFrame(), verdictNext, 0, netip.AddrPort{}},
		{"neighbour solicitation", offline, icmpv6(a4("ff02::1:ff00:1"), 255, 135), verdictNext, 0, netip.AddrPort{}},
		{"neighbour advertisement", offline, icmpv6(a4("fe80::1"), 255, 136), verdictNext, 0, netip.AddrPort{}},
		{"router solicitation", normal, icmpv6(a4("ff02::2"), 255, 133), verdictNext, 0, netip.AddrPort{}},
		{"nd with hop limit 64", normal, icmpv6(a4("ff02::1:ff00:1"), 64, 135), verdictDrop, ReasonMulticast, netip.AddrPort{}},
		{"mld report not counted", normal, icmpv6(a4("ff02::16"), 1, 143), verdictDrop, 0, netip.AddrPort{}},
		{"mld query not counted", normal, icmpv6(a4("ff02::1"), 1, 130), verdictDrop, 0, netip.AddrPort{}},
		{"echo to ff02::1 counted", normal, icmpv6(a4("ff02::1"), 64, 128), verdictDrop, ReasonMulticast, netip.AddrPort{}},
		{"unconfigured", nil, ipv4Frame(a4("198.51.100.7"), protoUDP, 443), verdictDrop, ReasonUnconfigured, netip.AddrPort{}},
		{"other ethertype", normal, ether(0x88cc, make([]byte, 46)), verdictDrop, ReasonProtocol, netip.AddrPort{}},
		{"ipv4 ihl < 5", normal, ether(0x0800, append([]byte{0x44}, make([]byte, 45)...)), verdictDrop, ReasonProtocol, netip.AddrPort{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setTestConfig(t, f, tt.cfg)
			got, _ := runFrame(t, f, tt.frame)
			if got != tt.want {
				t.Errorf("Run() = %#x, want %#x", got, tt.want)
			}
			for r := Reason(1); r <= maxReason; r++ {
				c, _, err := f.readCount(testIfindex, r)
				if err != nil {
					t.Fatal(err)
				}
				want := uint64(0)
				if r == tt.reason {
					want = 1
				}
				if c.Packets != want {
					t.Errorf("counter %v = %d, want %d", r, c.Packets, want)
				}
				if r == tt.reason && tt.last.IsValid() && c.Last != tt.last {
					t.Errorf("counter %v last = %v, want %v", r, c.Last, tt.last)
				}
			}
		})
	}
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
	for r := Reason(1); r <= maxReason; r++ {
		if s := r.String(); s == "" || s[0] == 'r' && s != "reserved" {
			t.Errorf("Reason(%d).String() = %q, want a name", r, s)
		}
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
	old, repl := a("203.0.113.9"), a("198.51.100.7")
	if got, _ := runFrame(t, f, ipv4Frame(old, protoUDP, 9)); got != verdictDrop {
		t.Fatalf("before: Run(%v) = %#x, want drop", old, got)
	}
	if err := f.SetDenylist(DefaultDenylist(nil, []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")})); err != nil {
		t.Fatalf("SetDenylist: %v", err)
	}
	if got, _ := runFrame(t, f, ipv4Frame(old, protoUDP, 9)); got != verdictNext {
		t.Errorf("after: Run(%v) = %#x, want pass", old, got)
	}
	if got, _ := runFrame(t, f, ipv4Frame(repl, protoUDP, 9)); got != verdictDrop {
		t.Errorf("after: Run(%v) = %#x, want drop", repl, got)
	}
	if c, _, _ := f.readCount(testIfindex, ReasonPlatform); c.Packets != 2 {
		t.Errorf("platform counter = %d, want 2", c.Packets)
	}
	if err := f.SetDenylist([]Entry{{netip.MustParsePrefix("10.0.0.0/8"), 0}}); err == nil {
		t.Error("SetDenylist with reason 0 = nil, want error")
	}
	// A failed SetDenylist leaves the previous list in place.
	if got, _ := runFrame(t, f, ipv4Frame(repl, protoUDP, 9)); got != verdictDrop {
		t.Errorf("after failed SetDenylist: Run(%v) = %#x, want drop", repl, got)
	}
}

func TestFilterAttachWithoutDenylist(t *testing.T) {
	testenv.RequireRoot(t)
	f, err := NewFilter(slog.New(slog.NewTextHandler(testWriter{t}, nil)))
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
}
