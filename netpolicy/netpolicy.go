// Package netpolicy gives each sandbox its own network: a named network
// namespace joined to the node by a veth pair, addresses from a per-node
// pool, routes and masquerading NAT, and an eBPF egress filter on the
// host-side veth that lets the sandbox reach the public internet only.
//
// # Egress filter
//
// The filter (bpf/egress.c, loaded once per node by [NewFilter]) runs at TCX
// ingress of each sandbox's host-side veth: it sees every frame the sandbox
// sends, including gVisor's raw AF_PACKET frames. "The public internet"
// means globally reachable addresses and nothing else. For each frame it:
//
//  1. passes ARP;
//  2. drops frames that are neither IPv4 nor IPv6, IPv4 packets with
//     options, IPv6 packets whose extension header chain (hop-by-hop,
//     routing, fragment, destination options; at most 8) it cannot follow
//     to the L4 header, routing headers with segments left, and first
//     fragments without their whole L4 header ([ReasonProtocol]);
//  3. passes ICMPv6 neighbour discovery (types 133 to 137, code 0, hop
//     limit 255, no extension header) only on the link: to ff02::/16 or
//     fe80::/10, from the sandbox's own link-local address
//     ([SandboxLinkLocal]) or ::, and not for a NoInternet sandbox. Other
//     neighbour discovery goes through the policy like any packet.
//     Multicast listener queries and reports to ff02::/16 (ICMPv6 types
//     130 to 132, and type 143) are dropped without a count: they are the
//     sandbox netstack's housekeeping, not attempts to reach anything;
//  4. denies everything for a sandbox configured with NoInternet, and
//     everything on an interface that has no configuration or while no
//     denylist is loaded ([ReasonUnconfigured]): the filter fails closed;
//  5. lets only TCP, UDP and the family's ICMP through; tunnels (IP in IP,
//     IPv6 in IP, GRE, EtherIP, L2TP, MPLS in IP, and UDP to the ports of
//     VXLAN, Geneve, GRE/MPLS in UDP, Teredo, L2TP, GTP-U, LISP, ESP in
//     UDP) are [ReasonEncapsulation], anything else [ReasonProtocol];
//  6. passes UDP/TCP port 53 to one of the sandbox's resolvers, even inside
//     a denied range;
//  7. looks the destination up in one longest-prefix-match trie of 16-byte
//     keys (IPv4 as ::ffff:a.b.c.d, prefix length + 96) holding [Rules] (the
//     IANA special-purpose registries' not globally reachable blocks, every
//     IPv6 block outside 2000::/3, SPEC's ranges), the node's addresses and
//     the platform CIDRs; the value is the [Reason], [ReasonNone] for a
//     globally reachable exception, and where an IPv4 address is embedded
//     ([Embedding]): NAT64, 6to4, Teredo (server and client) and
//     IPv4-compatible addresses are denied when their IPv4 address is, with
//     its reason. An IPv6 packet to an IPv4-mapped address is always denied;
//  8. asks the node's routing tables (bpf_fib_lookup): a destination the
//     node does not forward, because it is one of the node's own local,
//     broadcast or anycast routes, is [ReasonNode], the moment the address
//     exists ([ReasonNoRoute] for IPv6 without any route);
//  9. denies any other port 53 traffic ([ReasonDNSNotResolver]); everything
//     else passes (TCX_NEXT).
//
// [Decide] states step 7 in Go; tests check it against the registry rows
// in testdata/ and the program against it.
//
// Every IP packet it passes gets PassMark as its mark; the node's nftables
// rules (table inet rodon) drop sandbox packets without it, so a veth whose
// filter is gone (agentd killed) carries nothing until the filter is
// attached again. Their forward chain forwards a sandbox's packets to the
// uplink and only replies into a sandbox, and nothing between the node's
// other interfaces.
//
// A denied TCP SYN is answered with a RST|ACK from the destination, written
// over the SYN and redirected back out of the same veth into the sandbox, so
// connect fails at once with "connection refused"; a denied UDP datagram
// (without IP options or extension headers) likewise with the ICMP port
// unreachable its destination would send, so a connected socket fails at
// once too. Other denied packets are dropped silently.
//
// Node addresses: route lookups in the program decide them, so an address
// added after agentd started (DHCP, a VIP, SLAAC temporaries), the subnet
// broadcast and the IPv6 subnet-router anycast are denied at once; a
// netlink address watch ([Egress]) also keeps them in the trie, where they
// get their reason (node, broadcast) and decide embedded IPv4 addresses.
// The alternative, nftables "fib daddr type { local, broadcast, anycast,
// multicast }" on sandbox interfaces, was not kept: a rule in the node's
// nftables can neither count per sandbox and reason nor answer a SYN with
// a reset, and it costs a route lookup per packet as well (see
// docs/BENCHMARKS.md).
//
// # Maps
//
// deny_outer is an array-of-maps with one slot holding the current trie;
// [Filter.SetDenylist] builds a new trie and swaps the slot, so a packet sees
// either the old or the new list, never a mix. sandbox_cfgs is a hash keyed by
// the host-side ifindex (resolvers, no-internet flag). drops is a per-CPU hash
// keyed by {ifindex, reason} holding a packet count and the last denied
// destination; [Attachment.Counters] sums the CPUs. One Filter serves one
// network namespace (ifindexes are per namespace): the host namespace. Nothing
// is pinned; closing an [Attachment] detaches it and deletes its map entries.
package netpolicy

//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -target bpfel -type sandbox_cfg -type drop_key -type drop_val -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" egress bpf/egress.c

import (
	"errors"
	"net/netip"
	"strconv"
)

// Reason says why the egress filter denied a packet. Values are shared with
// bpf/egress.c and never renumbered.
type Reason uint32

// Reasons, as stored in the denylist and the drop counters.
const (
	// ReasonNone in a denylist Entry marks an exception: a globally
	// reachable block inside a denied one. It is never counted.
	ReasonNone           Reason = 0
	ReasonPrivate        Reason = 1  // RFC 1918, shared 100.64/10, fc00::/7
	ReasonLoopback       Reason = 2  // 127/8, ::1
	ReasonLinkLocal      Reason = 3  // 169.254/16, fe80::/10
	ReasonMulticast      Reason = 4  // 224/4, ff00::/8
	ReasonReserved       Reason = 5  // 0/8, 240/4, ::, IPv6 outside 2000::/3 and not otherwise named
	ReasonNode           Reason = 6  // the node's own addresses (local and anycast routes, and the address watch)
	ReasonPlatform       Reason = 7  // operator-configured platform CIDRs
	ReasonNoInternet     Reason = 8  // the sandbox has no network at all
	ReasonDNSNotResolver Reason = 9  // port 53 to anything but the resolvers
	ReasonMetadata       Reason = 10 // 169.254.169.254, cloud metadata
	ReasonProtocol       Reason = 11 // not TCP, UDP, ICMP or ICMPv6; malformed; options or a header chain not parsed
	ReasonUnconfigured   Reason = 12 // no config or denylist loaded: fail closed
	ReasonDocumentation  Reason = 13 // 192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32, 3fff::/20
	ReasonBenchmarking   Reason = 14 // 198.18/15, 2001:2::/48
	ReasonNotGlobal      Reason = 15 // another special-purpose block that is not globally reachable
	ReasonBroadcast      Reason = 16 // 255.255.255.255 and the node's subnet broadcasts
	ReasonEncapsulation  Reason = 17 // a tunnel: GRE, IP-in-IP, IPv6-in-IP, VXLAN, Geneve, ...
	ReasonNoRoute        Reason = 18 // the node has no route there
)

// PassMark is what the egress filter puts in the upper 16 bits of the
// mark of every packet it passes (PASS_MARK in bpf/egress.c). The node's
// nftables rules drop sandbox packets without it: with no filter attached, a
// sandbox's veth carries nothing.
const PassMark = 0x0d0d0000

const passMask = 0xffff0000

// maxReason is the largest Reason the program may count.
const maxReason = ReasonNoRoute

var reasonNames = [...]string{
	ReasonPrivate:        "private",
	ReasonLoopback:       "loopback",
	ReasonLinkLocal:      "link_local",
	ReasonMulticast:      "multicast",
	ReasonReserved:       "reserved",
	ReasonNode:           "node",
	ReasonPlatform:       "platform",
	ReasonNoInternet:     "no_internet",
	ReasonDNSNotResolver: "dns_not_resolver",
	ReasonMetadata:       "metadata",
	ReasonProtocol:       "protocol",
	ReasonUnconfigured:   "unconfigured",
	ReasonDocumentation:  "documentation",
	ReasonBenchmarking:   "benchmarking",
	ReasonNotGlobal:      "not_global",
	ReasonBroadcast:      "broadcast",
	ReasonEncapsulation:  "encapsulation",
	ReasonNoRoute:        "no_route",
}

// String returns the reason's stable snake_case name, as shown in events.
func (r Reason) String() string {
	if r == ReasonNone {
		return "none"
	}
	if r > 0 && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "reason_" + strconv.FormatUint(uint64(r), 10)
}

// Entry is one denylist range, the reason reported when it is hit, and
// where an IPv4 address embedded in its addresses is found.
type Entry struct {
	Prefix netip.Prefix
	// Reason is what a packet to Prefix is denied as; ReasonNone makes
	// Prefix an exception inside a denied block.
	Reason Reason
	// Embed says where an IPv4 address sits in an IPv6 address of Prefix:
	// such an address is denied also when the IPv4 address is, with the
	// IPv4 address's reason.
	Embed Embedding
}

// Embedding is where an IPv6 address carries an IPv4 address. Values are
// shared with bpf/egress.c.
type Embedding uint8

// Embeddings.
const (
	EmbedNone Embedding = 0
	// EmbedLow32: the last 32 bits, as NAT64 /96 prefixes (RFC 6052) and
	// the deprecated IPv4-compatible addresses (RFC 4291) have it.
	EmbedLow32 Embedding = 1
	// Embed6to4: bits 16 to 47 (RFC 3056).
	Embed6to4 Embedding = 2
	// EmbedTeredo: the server at bits 32 to 63 and the client, inverted,
	// at bits 96 to 127 (RFC 4380); both decide.
	EmbedTeredo Embedding = 3
)

const maxEmbedding = EmbedTeredo

// SandboxConfig is the per-sandbox egress policy.
type SandboxConfig struct {
	// NoInternet denies every packet, DNS and neighbour discovery
	// included (ARP still passes).
	NoInternet bool
	// Resolvers are the DNS servers the sandbox may reach on UDP/TCP port
	// 53, even inside a denied range. At most MaxResolvers.
	Resolvers []netip.Addr
	// LinkLocal is the sandbox's own IPv6 link-local address: neighbour
	// discovery passes only from it or from ::, and only to ff02::/16 and
	// fe80::/10. The zero Addr allows :: alone.
	LinkLocal netip.Addr
}

// MaxResolvers is the number of resolvers a SandboxConfig may name.
const MaxResolvers = 4

// Count is what the filter recorded for one sandbox and reason.
type Count struct {
	// Packets is the number of packets denied.
	Packets uint64
	// Last is the destination of the most recent denied packet; the port is
	// 0 for protocols without ports and for non-first fragments.
	Last netip.AddrPort
	// Protocol is the IP protocol of the most recent denied packet (0 when
	// it was not IP or not parsed that far).
	Protocol Protocol
}

// Protocol is an IP protocol number (IPv6: the last next-header value).
type Protocol uint8

var protocolNames = map[Protocol]string{
	1: "icmp", 4: "ipip", 6: "tcp", 17: "udp", 41: "ipv6", 47: "gre", 50: "esp", 51: "ah",
	58: "icmpv6", 97: "etherip", 98: "encap", 115: "l2tp", 132: "sctp", 137: "mpls", 143: "ethernet",
}

// String returns the protocol's lower-case name, or its number.
func (p Protocol) String() string {
	if s, ok := protocolNames[p]; ok {
		return s
	}
	return strconv.Itoa(int(p))
}

// Errors returned by the filter.
var (
	// ErrNoDenylist is returned by Attach before the first SetDenylist.
	ErrNoDenylist = errors.New("egress denylist not loaded")
	// ErrAttached is returned by Attach for an interface that already has
	// an attachment from this Filter.
	ErrAttached = errors.New("egress filter already attached")
)
