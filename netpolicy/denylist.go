package netpolicy

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// defaultDeny is SPEC's list of ranges a sandbox may never reach.
var defaultDeny = []Entry{
	{netip.MustParsePrefix("0.0.0.0/8"), ReasonReserved},
	{netip.MustParsePrefix("10.0.0.0/8"), ReasonPrivate},
	{netip.MustParsePrefix("100.64.0.0/10"), ReasonPrivate},
	{netip.MustParsePrefix("127.0.0.0/8"), ReasonLoopback},
	{netip.MustParsePrefix("169.254.0.0/16"), ReasonLinkLocal},
	{netip.MustParsePrefix("169.254.169.254/32"), ReasonMetadata},
	{netip.MustParsePrefix("172.16.0.0/12"), ReasonPrivate},
	{netip.MustParsePrefix("192.168.0.0/16"), ReasonPrivate},
	{netip.MustParsePrefix("224.0.0.0/4"), ReasonMulticast},
	{netip.MustParsePrefix("240.0.0.0/4"), ReasonReserved},
	{netip.MustParsePrefix("::/128"), ReasonReserved},
	{netip.MustParsePrefix("::1/128"), ReasonLoopback},
	{netip.MustParsePrefix("fc00::/7"), ReasonPrivate},
	{netip.MustParsePrefix("fe80::/10"), ReasonLinkLocal},
	{netip.MustParsePrefix("ff00::/8"), ReasonMulticast},
}

// DefaultDenylist returns SPEC's denied ranges, then each of the node's own
// addresses (ReasonNode) and each operator platform CIDR (ReasonPlatform).
// Longest prefix wins, so a node address inside 10/8 is reported as node.
func DefaultDenylist(nodeAddrs []netip.Addr, platform []netip.Prefix) []Entry {
	out := make([]Entry, 0, len(defaultDeny)+len(nodeAddrs)+len(platform))
	out = append(out, defaultDeny...)
	for _, a := range nodeAddrs {
		a = a.WithZone("")
		out = append(out, Entry{netip.PrefixFrom(a, a.BitLen()), ReasonNode})
	}
	for _, p := range platform {
		out = append(out, Entry{p, ReasonPlatform})
	}
	return out
}

// denyKey is the trie key for p: 4-byte prefix length (host order, as the
// kernel reads bpf_lpm_trie_key) and the
// 16-byte address, IPv4 mapped into ::ffff:0:0/96.
func denyKey(p netip.Prefix) ([20]byte, error) {
	var k [20]byte
	if !p.IsValid() {
		return k, fmt.Errorf("invalid prefix %v", p)
	}
	p = p.Masked()
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	binary.NativeEndian.PutUint32(k[:4], uint32(bits))
	a := p.Addr().As16()
	copy(k[4:], a[:])
	return k, nil
}
