package netpolicy

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// Registries a Rule comes from.
const (
	// RegistryIPv4Special is the IANA IPv4 Special-Purpose Address Registry.
	RegistryIPv4Special = "iana-ipv4-special-registry"
	// RegistryIPv6Special is the IANA IPv6 Special-Purpose Address Registry.
	RegistryIPv6Special = "iana-ipv6-special-registry"
	// RegistryIPv6Space is the IANA IPv6 Address Space registry: everything
	// outside 2000::/3 (Global Unicast) that the special-purpose registry
	// does not already describe.
	RegistryIPv6Space = "ipv6-address-space"
	// RegistrySPEC is SPEC's list of denied ranges, where no registry row
	// says the same.
	RegistrySPEC = "SPEC"
	// RegistryRFC is a range an RFC defines that has no registry row of
	// its own.
	RegistryRFC = "RFC"
)

// Rule is one row of the denylist table: a range, what the filter does with
// it, and the registry row it comes from.
type Rule struct {
	Entry
	// Registry, Name and RFC cite the row: Name and RFC exactly as in the
	// registry (see testdata/).
	Registry, Name, RFC string
}

// Rules is the denylist table: the "not globally reachable" rows of the
// IANA IPv4 and IPv6 special-purpose registries, the globally reachable
// rows inside them as exceptions (ReasonNone), the rows whose reachability
// depends on an embedded IPv4 address (Teredo, 6to4: "N/A" in the
// registry), every IPv6 block outside Global Unicast 2000::/3, and SPEC's
// ranges. Terminated (deprecated) allocations are denied. The longest
// prefix decides. TestDenyTableMatchesRegistries checks it against the
// rows in testdata/.
//
// A block of the IPv4 registry not listed here (AS112, AMT, ...) is
// globally reachable and needs no row, as does all of 2000::/3 outside
// the rows below.
var Rules = []Rule{
	// IANA IPv4 Special-Purpose Address Registry.
	v4special("0.0.0.0/8", ReasonReserved, `"This network"`, "[RFC791]"),
	v4special("0.0.0.0/32", ReasonReserved, `"This host on this network"`, "[RFC1122]"),
	v4special("10.0.0.0/8", ReasonPrivate, "Private-Use", "[RFC1918]"),
	v4special("100.64.0.0/10", ReasonPrivate, "Shared Address Space", "[RFC6598]"),
	v4special("127.0.0.0/8", ReasonLoopback, "Loopback", "[RFC1122]"),
	v4special("169.254.0.0/16", ReasonLinkLocal, "Link Local", "[RFC3927]"),
	v4special("172.16.0.0/12", ReasonPrivate, "Private-Use", "[RFC1918]"),
	v4special("192.0.0.0/24", ReasonNotGlobal, "IETF Protocol Assignments", "[RFC6890]"),
	v4special("192.0.0.0/29", ReasonNotGlobal, "IPv4 Service Continuity Prefix", "[RFC7335]"),
	v4special("192.0.0.8/32", ReasonNotGlobal, "IPv4 dummy address", "[RFC7600]"),
	v4special("192.0.0.9/32", ReasonNone, "Port Control Protocol Anycast", "[RFC7723]"),
	v4special("192.0.0.10/32", ReasonNone, "Traversal Using Relays around NAT Anycast", "[RFC8155]"),
	v4special("192.0.0.170/32", ReasonNotGlobal, "NAT64/DNS64 Discovery", "[RFC8880][RFC7050]"),
	v4special("192.0.0.171/32", ReasonNotGlobal, "NAT64/DNS64 Discovery", "[RFC8880][RFC7050]"),
	v4special("192.0.2.0/24", ReasonDocumentation, "Documentation (TEST-NET-1)", "[RFC5737]"),
	v4special("192.88.99.0/24", ReasonNotGlobal, "Deprecated (6to4 Relay Anycast)", "[RFC7526]"),
	v4special("192.88.99.2/32", ReasonNotGlobal, "6a44-relay anycast address", "[RFC6751]"),
	v4special("192.168.0.0/16", ReasonPrivate, "Private-Use", "[RFC1918]"),
	v4special("198.18.0.0/15", ReasonBenchmarking, "Benchmarking", "[RFC2544]"),
	v4special("198.51.100.0/24", ReasonDocumentation, "Documentation (TEST-NET-2)", "[RFC5737]"),
	v4special("203.0.113.0/24", ReasonDocumentation, "Documentation (TEST-NET-3)", "[RFC5737]"),
	v4special("240.0.0.0/4", ReasonReserved, "Reserved", "[RFC1112]"),
	v4special("255.255.255.255/32", ReasonBroadcast, "Limited Broadcast", "[RFC8190][RFC919]"),

	// IANA IPv6 Special-Purpose Address Registry.
	v6special("::1/128", ReasonLoopback, EmbedNone, "Loopback Address", "[RFC4291]"),
	v6special("::/128", ReasonReserved, EmbedNone, "Unspecified Address", "[RFC4291]"),
	// The trie holds IPv4 destinations as ::ffff:a.b.c.d, so this row is
	// not put in it: the program denies an IPv6 packet to a mapped address
	// itself (as its IPv4 address's reason, or not_global).
	v6special("::ffff:0:0/96", ReasonNotGlobal, EmbedNone, "IPv4-mapped Address", "[RFC4291]"),
	v6special("64:ff9b::/96", ReasonNone, EmbedLow32, "IPv4-IPv6 Translat.", "[RFC6052]"),
	// The local-use prefix may carry any RFC 6052 format; only a /96 one
	// (the IPv4 address last) is read, to name a better reason.
	v6special("64:ff9b:1::/48", ReasonNotGlobal, EmbedLow32, "IPv4-IPv6 Translat.", "[RFC8215]"),
	v6special("100::/64", ReasonNotGlobal, EmbedNone, "Discard-Only Address Block", "[RFC6666]"),
	v6special("2001::/23", ReasonNotGlobal, EmbedNone, "IETF Protocol Assignments", "[RFC2928]"),
	v6special("2001::/32", ReasonNone, EmbedTeredo, "TEREDO", "[RFC4380][RFC8190]"),
	v6special("2001:1::1/128", ReasonNone, EmbedNone, "Port Control Protocol Anycast", "[RFC7723]"),
	v6special("2001:1::2/128", ReasonNone, EmbedNone, "Traversal Using Relays around NAT Anycast", "[RFC8155]"),
	v6special("2001:1::3/128", ReasonNone, EmbedNone, "DNS-SD Service Registration Protocol Anycast", "[RFC9665]"),
	v6special("2001:2::/48", ReasonBenchmarking, EmbedNone, "Benchmarking", "[RFC5180][RFC Errata 1752]"),
	v6special("2001:3::/32", ReasonNone, EmbedNone, "AMT", "[RFC7450]"),
	v6special("2001:4:112::/48", ReasonNone, EmbedNone, "AS112-v6", "[RFC7535]"),
	v6special("2001:10::/28", ReasonNotGlobal, EmbedNone, "Deprecated (previously ORCHID)", "[RFC4843]"),
	v6special("2001:20::/28", ReasonNone, EmbedNone, "ORCHIDv2", "[RFC7343]"),
	v6special("2001:30::/28", ReasonNone, EmbedNone, "Drone Remote ID Protocol Entity Tags (DETs) Prefix", "[RFC9374]"),
	v6special("2001:db8::/32", ReasonDocumentation, EmbedNone, "Documentation", "[RFC3849]"),
	v6special("2002::/16", ReasonNone, Embed6to4, "6to4", "[RFC3056]"),
	v6special("3fff::/20", ReasonDocumentation, EmbedNone, "Documentation", "[RFC9637]"),
	v6special("5f00::/16", ReasonNotGlobal, EmbedNone, "Segment Routing (SRv6) SIDs", "[RFC9602]"),
	v6special("fc00::/7", ReasonPrivate, EmbedNone, "Unique-Local", "[RFC4193][RFC8190]"),
	v6special("fe80::/10", ReasonLinkLocal, EmbedNone, "Link-Local Unicast", "[RFC4291]"),

	// IANA IPv6 Address Space: all but 2000::/3 is not (yet) global
	// unicast. fc00::/7 and fe80::/10 are rows of the registry above.
	v6space("::/8", ReasonReserved, "Reserved by IETF", "[RFC3513][RFC4291]"),
	v6space("100::/8", ReasonReserved, "Reserved by IETF", "[RFC3513][RFC4291]"),
	v6space("200::/7", ReasonReserved, "Reserved by IETF", "[RFC4048]"),
	v6space("400::/6", ReasonReserved, "Reserved by IETF", "[RFC3513][RFC4291]"),
	v6space("800::/5", ReasonReserved, "Reserved by IETF", "[RFC3513][RFC4291]"),
	v6space("1000::/4", ReasonReserved, "Reserved by IETF", "[RFC3513][RFC4291]"),
	v6space("4000::/3", ReasonReserved, "Reserved by IETF", "[RFC3513][RFC4291]"),
	v6space("6000::/3", ReasonReserved, "Reserved by IETF", "[RFC3513][RFC4291]"),
	v6space("8000::/3", ReasonReserved, "Reserved by IETF", "[RFC3513][RFC4291]"),
	v6space("a000::/3", ReasonReserved, "Reserved by IETF", "[RFC3513][RFC4291]"),
	v6space("c000::/3", ReasonReserved, "Reserved by IETF", "[RFC3513][RFC4291]"),
	v6space("e000::/4", ReasonReserved, "Reserved by IETF", "[RFC3513][RFC4291]"),
	v6space("f000::/5", ReasonReserved, "Reserved by IETF", "[RFC3513][RFC4291]"),
	v6space("f800::/6", ReasonReserved, "Reserved by IETF", "[RFC3513][RFC4291]"),
	v6space("fe00::/9", ReasonReserved, "Reserved by IETF", "[RFC3513][RFC4291]"),
	// Formerly site-local (fec0::/10), deprecated by RFC 3879.
	v6space("fec0::/10", ReasonReserved, "Reserved by IETF", "[RFC3879]"),
	v6space("ff00::/8", ReasonMulticast, "Multicast", "[RFC3513][RFC4291]"),
	// The registry's note on ::/8: ::/96 was the deprecated
	// IPv4-compatible IPv6 address (RFC 4291 section 2.5.5.1); its IPv4
	// address names the reason when it is denied.
	{Entry: Entry{Prefix: netip.MustParsePrefix("::/96"), Reason: ReasonReserved, Embed: EmbedLow32},
		Registry: RegistryRFC, Name: "IPv4-Compatible IPv6 Address (deprecated)", RFC: "[RFC4291]"},

	// SPEC's ranges not in a special-purpose registry.
	spec("224.0.0.0/4", ReasonMulticast, "multicast (IANA IPv4 Multicast Address Space)", "[RFC5771]"),
	spec("169.254.169.254/32", ReasonMetadata, "cloud metadata service", ""),
}

func v4special(p string, r Reason, name, rfc string) Rule {
	return Rule{Entry: Entry{Prefix: netip.MustParsePrefix(p), Reason: r}, Registry: RegistryIPv4Special, Name: name, RFC: rfc}
}

func v6special(p string, r Reason, e Embedding, name, rfc string) Rule {
	return Rule{Entry: Entry{Prefix: netip.MustParsePrefix(p), Reason: r, Embed: e}, Registry: RegistryIPv6Special, Name: name, RFC: rfc}
}

func v6space(p string, r Reason, name, rfc string) Rule {
	return Rule{Entry: Entry{Prefix: netip.MustParsePrefix(p), Reason: r}, Registry: RegistryIPv6Space, Name: name, RFC: rfc}
}

func spec(p string, r Reason, name, rfc string) Rule {
	return Rule{Entry: Entry{Prefix: netip.MustParsePrefix(p), Reason: r}, Registry: RegistrySPEC, Name: name, RFC: rfc}
}

// ipv4Mapped is ::ffff:0:0/96, the prefix under which the trie holds IPv4
// addresses.
var ipv4Mapped = netip.MustParsePrefix("::ffff:0:0/96")

// DefaultDenylist returns the denylist table (Rules) as trie entries, then
// each of the node's own addresses (ReasonNode) and each operator platform
// CIDR (ReasonPlatform). Longest prefix wins, so a node address inside 10/8
// is reported as node. An exception of the table (a globally reachable
// block) inside a platform CIDR is denied as platform.
func DefaultDenylist(nodeAddrs []netip.Addr, platform []netip.Prefix) []Entry {
	node := make([]Entry, 0, len(nodeAddrs))
	for _, a := range nodeAddrs {
		a = a.WithZone("").Unmap()
		node = append(node, Entry{Prefix: netip.PrefixFrom(a, a.BitLen()), Reason: ReasonNode})
	}
	return Denylist(node, platform)
}

// Denylist is DefaultDenylist with the node's entries given whole (their
// addresses as ReasonNode, subnet broadcasts as ReasonBroadcast, ...).
func Denylist(node []Entry, platform []netip.Prefix) []Entry {
	out := make([]Entry, 0, len(Rules)+len(node)+len(platform))
	for _, r := range Rules {
		if r.Prefix == ipv4Mapped {
			// IPv4 lives there: the trie decides an IPv4 address by the
			// IPv4 entries alone, not by ::/8 around them. The program
			// denies IPv6 packets to mapped addresses itself.
			out = append(out, Entry{Prefix: ipv4Mapped, Reason: ReasonNone})
			continue
		}
		out = append(out, r.Entry)
	}
	out = append(out, node...)
	for _, p := range platform {
		p = p.Masked()
		out = append(out, Entry{Prefix: p, Reason: ReasonPlatform})
		// A longer entry inside p would win over it: deny those as
		// platform too (node entries stay node).
		for _, r := range Rules {
			if r.Prefix.Bits() > p.Bits() && p.Contains(r.Prefix.Addr()) && r.Prefix != ipv4Mapped {
				out = append(out, Entry{Prefix: r.Prefix, Reason: ReasonPlatform, Embed: r.Embed})
			}
		}
	}
	return out
}

// Decide returns what the filter's denylist does with a packet to a: the
// reason it is denied, or ReasonNone. It is the Go statement of the
// program's address checks (trie, IPv4-mapped, embedded IPv4) over
// entries, as made by Denylist, without the route lookup; tests compare
// the two.
func Decide(entries []Entry, a netip.Addr) Reason {
	a = a.WithZone("")
	if a.Is4In6() {
		if r := lookup(entries, a.Unmap()); r.Reason != ReasonNone {
			return r.Reason
		}
		return ReasonNotGlobal
	}
	e := lookup(entries, a)
	if a.Is6() && e.Embed != EmbedNone {
		for _, v4 := range e.Embed.IPv4(a) {
			if r := lookup(entries, v4); r.Reason != ReasonNone {
				return r.Reason
			}
		}
	}
	return e.Reason
}

// lookup is the longest-prefix match of a in entries; for two entries of
// the same prefix the later wins, as in SetDenylist.
func lookup(entries []Entry, a netip.Addr) Entry {
	best, bits := Entry{}, -1
	for _, e := range entries {
		if e.Prefix.Addr().BitLen() != a.BitLen() || !e.Prefix.Contains(a) {
			continue
		}
		if e.Prefix.Bits() >= bits {
			best, bits = e, e.Prefix.Bits()
		}
	}
	return best
}

// IPv4 returns the IPv4 addresses embedded in a as e says.
func (e Embedding) IPv4(a netip.Addr) []netip.Addr {
	b := a.As16()
	switch e {
	case EmbedLow32:
		return []netip.Addr{netip.AddrFrom4([4]byte(b[12:16]))}
	case Embed6to4:
		return []netip.Addr{netip.AddrFrom4([4]byte(b[2:6]))}
	case EmbedTeredo:
		client := [4]byte{^b[12], ^b[13], ^b[14], ^b[15]}
		return []netip.Addr{netip.AddrFrom4([4]byte(b[4:8])), netip.AddrFrom4(client)}
	}
	return nil
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

// denyValue is the trie value of e: the reason in the low byte and the
// embedding in the next (DENY_REASON and DENY_EMBED in bpf/egress.c).
func denyValue(e Entry) uint32 { return uint32(e.Reason) | uint32(e.Embed)<<8 }
