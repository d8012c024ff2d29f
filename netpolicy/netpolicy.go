// Package netpolicy gives each sandbox its own network: a named network
// namespace joined to the node by a veth pair, addresses from a per-node
// pool, routes and masquerading NAT, and an eBPF egress filter on the
// host-side veth that lets the sandbox reach the public internet only.
//
// # Egress filter
//
// The filter (bpf/egress.c, loaded once per node by [NewFilter]) runs at TCX
// ingress of each sandbox's host-side veth: it sees every frame the sandbox
// sends, including gVisor's raw AF_PACKET frames. For each frame it:
//
//  1. passes ARP and ICMPv6 neighbour discovery (types 133 to 137 with hop
//     limit 255) before anything else, and drops multicast listener
//     queries and reports (ICMPv6 types 130 to 132 and type 143) to
//     link-scope groups ff02::/16 without counting them: they are the
//     sandbox netstack's housekeeping, not attempts to reach anything;
//  2. drops frames that are neither IPv4 nor IPv6, or are malformed
//     ([ReasonProtocol]);
//  3. denies everything for a sandbox configured with NoInternet, and
//     everything on an interface that has no configuration or while no
//     denylist is loaded ([ReasonUnconfigured]): the filter fails closed;
//  4. passes UDP/TCP port 53 to one of the sandbox's resolvers, even inside
//     a denied range;
//  5. looks the destination up in one longest-prefix-match trie of 16-byte
//     keys (IPv4 as ::ffff:a.b.c.d, prefix length + 96) whose value is the
//     [Reason];
//  6. denies any other port 53 traffic ([ReasonDNSNotResolver]); everything
//     else passes (TCX_NEXT).
//
// Every IP packet it passes gets PassMark as its mark; the node's nftables
// rules (table inet rodon) drop sandbox packets without it, so a veth whose
// filter is gone (agentd killed) carries nothing until the filter is
// attached again.
//
// A denied TCP SYN is answered with a RST|ACK from the destination, written
// over the SYN and redirected back out of the same veth into the sandbox, so
// connect fails at once with "connection refused". Other denied packets are
// dropped silently.
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
	ReasonPrivate        Reason = 1  // RFC 1918, CGNAT 100.64/10, fc00::/7
	ReasonLoopback       Reason = 2  // 127/8, ::1
	ReasonLinkLocal      Reason = 3  // 169.254/16, fe80::/10
	ReasonMulticast      Reason = 4  // 224/4, ff00::/8
	ReasonReserved       Reason = 5  // 0/8, 240/4
	ReasonNode           Reason = 6  // the node's own addresses
	ReasonPlatform       Reason = 7  // operator-configured platform CIDRs
	ReasonNoInternet     Reason = 8  // the sandbox has no network at all
	ReasonDNSNotResolver Reason = 9  // port 53 to anything but the resolvers
	ReasonMetadata       Reason = 10 // 169.254.169.254, cloud metadata
	ReasonProtocol       Reason = 11 // neither IPv4 nor IPv6, or malformed
	ReasonUnconfigured   Reason = 12 // no config or denylist loaded: fail closed
)

// PassMark is what the egress filter puts in the upper 16 bits of the
// mark of every packet it passes (PASS_MARK in bpf/egress.c). The node's
// nftables rules drop sandbox packets without it: with no filter attached, a
// sandbox's veth carries nothing.
const PassMark = 0x0d0d0000

const passMask = 0xffff0000

// maxReason is the largest Reason the program may count.
const maxReason = ReasonUnconfigured

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
}

// String returns the reason's stable snake_case name, as shown in events.
func (r Reason) String() string {
	if r > 0 && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "reason_" + strconv.FormatUint(uint64(r), 10)
}

// Entry is one denylist range and the reason reported when it is hit.
type Entry struct {
	Prefix netip.Prefix
	Reason Reason
}

// SandboxConfig is the per-sandbox egress policy.
type SandboxConfig struct {
	// NoInternet denies every packet, DNS included (ARP and neighbour
	// discovery still pass).
	NoInternet bool
	// Resolvers are the DNS servers the sandbox may reach on UDP/TCP port
	// 53, even inside a denied range. At most MaxResolvers.
	Resolvers []netip.Addr
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
}

// Errors returned by the filter.
var (
	// ErrNoDenylist is returned by Attach before the first SetDenylist.
	ErrNoDenylist = errors.New("egress denylist not loaded")
	// ErrAttached is returned by Attach for an interface that already has
	// an attachment from this Filter.
	ErrAttached = errors.New("egress filter already attached")
)
