// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// egress.c: Rodon's sandbox egress filter. Attached with TCX to the ingress
// of the host-side veth of a sandbox, it sees every frame the sandbox sends
// (including gVisor's AF_PACKET frames). See ../netpolicy.go for the design
// and README for how to regenerate the Go bindings.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

// Debian's headers predate TCX: TCX_NEXT == TC_ACT_UNSPEC, TCX_DROP ==
// TC_ACT_SHOT, TCX_REDIRECT == TC_ACT_REDIRECT.
#define VERDICT_NEXT TC_ACT_UNSPEC
#define VERDICT_DROP TC_ACT_SHOT

// PASS_MARK becomes skb->mark of every IP packet the filter lets through
// (a frame crossing into the node namespace arrives with its mark scrubbed,
// so nothing is lost; a whole-word store also keeps the verifier happy). The node's nftables rules (nat_linux.go) drop packets
// from a sandbox veth without it, so a veth whose filter is gone (agentd
// killed, attach lost) carries nothing: the filter fails closed. Keep in
// sync with PassMark in ../netpolicy.go.
#define PASS_MARK 0x0d0d0000
#define PASS_MASK 0xffff0000

static __always_inline int pass(struct __sk_buff *skb)
{
	skb->mark = PASS_MARK;
	return VERDICT_NEXT;
}

// Reasons; keep in sync with Reason in netpolicy.go.
#define REASON_NONE 0
#define REASON_MULTICAST 4
#define REASON_NODE 6
#define REASON_NO_INTERNET 8
#define REASON_DNS_NOT_RESOLVER 9
#define REASON_PROTOCOL 11
#define REASON_UNCONFIGURED 12
#define REASON_NOT_GLOBAL 15
#define REASON_ENCAPSULATION 17
#define REASON_NO_ROUTE 18

// A denylist value: the reason in the low byte, where an IPv4 address is
// embedded in the next (Embedding in netpolicy.go).
#define DENY_REASON(v) ((v) & 0xff)
#define DENY_EMBED(v) (((v) >> 8) & 0xff)
#define EMBED_LOW32 1
#define EMBED_6TO4 2
#define EMBED_TEREDO 3

#define MAX_RESOLVERS 4
#define CFG_NO_INTERNET 1

#define IPPROTO_ICMPV6_ 58
#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_DEST 60
// The longest IPv6 extension header chain followed to the L4 header; a
// longer one is not parsed and the packet is dropped (RFC 8200 needs at
// most HBH, Dest, Routing, Fragment, AH, Dest: six).
#define MAX_EXT_HDRS 8
// No header is looked for beyond this offset into the frame.
#define MAX_L4_OFF 512

// Special results of parse6 besides 0 (go on) and a reason (deny).
#define PARSED_PASS (-1) // neighbour discovery on the link: pass
#define PARSED_QUIET (-2) // the netstack's own multicast housekeeping: drop, uncounted

// bpf_fib_lookup flags, defined here as well for older headers.
#define FIB_DIRECT (1U << 0)
#define FIB_SKIP_NEIGH (1U << 2)
#define FIB_TBID (1U << 3)
#define RT_TABLE_MAIN_ 254
#define AF_INET_ 2
#define AF_INET6_ 10
#define LOOPBACK_IFINDEX 1

char __license[] SEC("license") = "Dual BSD/GPL";

// deny_key is an LPM trie key: IPv6 address, IPv4 as ::ffff:a.b.c.d with
// prefixlen + 96.
struct deny_key {
	__u32 prefixlen;
	__u8 addr[16];
};


// deny_outer holds the current denylist trie in slot 0. Go replaces the whole
// trie atomically by building a new inner map and swapping the slot.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_LPM_TRIE);
		__uint(map_flags, BPF_F_NO_PREALLOC);
		__uint(max_entries, 16384);
		__uint(key_size, sizeof(struct deny_key));
		__uint(value_size, sizeof(__u32)); // reason
	});
} deny_outer SEC(".maps");

struct sandbox_cfg {
	__u32 flags;
	__u32 n_resolvers;
	__u8 resolvers[MAX_RESOLVERS][16];
	// The sandbox's own link-local address: with ::, the only source its
	// neighbour discovery may have.
	__u8 link_local[16];
};

// sandbox_cfgs is keyed by the ifindex of the host-side veth (host namespace).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct sandbox_cfg);
} sandbox_cfgs SEC(".maps");

struct drop_key {
	__u32 ifindex;
	__u32 reason;
};

struct drop_val {
	__u64 packets;
	__u64 last_ns; // bpf_ktime_get_ns of the last drop on this CPU
	__u8 last_addr[16];
	__u16 last_port; // host order, 0 when unknown
	__u8 last_proto;
	__u8 last_v6; // last_addr was an IPv6 destination (also ::ffff:a.b.c.d)
	__u8 _pad[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct drop_key);
	__type(value, struct drop_val);
} drops SEC(".maps");

struct pkt {
	__u8 dst[16];
	__u8 src[16];
	__u8 proto; // L4 protocol, 0 when unknown
	__u8 syn_only; // TCP SYN without ACK/RST
	__u16 dport; // host order, 0 when unknown
	__u32 l4off; // offset of the L4 header, 0 when unknown
	__u32 l3end; // end of the L3 payload
	__u8 v6;
};

static __always_inline void count_drop(__u32 ifindex, __u32 reason, struct pkt *p)
{
	struct drop_key k = {.ifindex = ifindex, .reason = reason};
	struct drop_val *v = bpf_map_lookup_elem(&drops, &k);
	if (!v) {
		struct drop_val zero = {};
		bpf_map_update_elem(&drops, &k, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&drops, &k);
		if (!v)
			return;
	}
	v->packets++;
	v->last_ns = bpf_ktime_get_ns();
	__builtin_memcpy(v->last_addr, p->dst, 16);
	v->last_port = p->dport;
	v->last_proto = p->proto;
	v->last_v6 = p->v6;
}

static __always_inline int addr_eq(const __u8 *a, const __u8 *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;
	return x[0] == y[0] && x[1] == y[1];
}

static __always_inline __u32 csum_fold(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (~s) & 0xffff;
}

struct rst4 {
	struct ethhdr eth;
	struct iphdr ip;
	struct tcphdr tcp;
} __attribute__((packed));

struct rst6 {
	struct ethhdr eth;
	struct ipv6hdr ip;
	struct tcphdr tcp;
} __attribute__((packed));

struct pseudo4 {
	__be32 saddr, daddr;
	__u8 zero, proto;
	__be16 len;
};

struct pseudo6 {
	__u8 saddr[16], daddr[16];
	__be32 len;
	__u8 zero[3], proto;
};

// reply_rst turns a TCP SYN into the RST|ACK the destination would send if
// the port were closed and redirects it back out of the same veth, into the
// sandbox, so connect() fails at once (ECONNREFUSED). Returns the verdict, or
// VERDICT_DROP when the packet cannot be rewritten.
static __always_inline int reply_rst(struct __sk_buff *skb, __u32 ifindex, struct pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return VERDICT_DROP;
	__u32 off = p->l4off;
	if (off > 128)
		return VERDICT_DROP;
	struct tcphdr *th = data + off;
	if ((void *)(th + 1) > end)
		return VERDICT_DROP;
	__u32 doff = th->doff * 4;
	__u32 seglen = 0;
	if (p->l3end > off + doff)
		seglen = p->l3end - off - doff;
	__be32 ack = bpf_htonl(bpf_ntohl(th->seq) + 1 + seglen);
	__be16 sport = th->source, dport = th->dest;
	unsigned char smac[ETH_ALEN], dmac[ETH_ALEN];
	__builtin_memcpy(smac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(dmac, eth->h_dest, ETH_ALEN);

	struct tcphdr tcp = {};
	tcp.source = dport;
	tcp.dest = sport;
	tcp.seq = 0;
	tcp.ack_seq = ack;
	tcp.doff = 5;
	tcp.rst = 1;
	tcp.ack = 1;

	if (!p->v6) {
		struct iphdr *ih = data + sizeof(struct ethhdr);
		if ((void *)(ih + 1) > end)
			return VERDICT_DROP;
		struct rst4 r = {};
		__builtin_memcpy(r.eth.h_dest, smac, ETH_ALEN);
		__builtin_memcpy(r.eth.h_source, dmac, ETH_ALEN);
		r.eth.h_proto = bpf_htons(ETH_P_IP);
		struct iphdr ip = {};
		ip.version = 4;
		ip.ihl = 5;
		ip.tot_len = bpf_htons(sizeof(struct iphdr) + sizeof(struct tcphdr));
		ip.frag_off = bpf_htons(0x4000); // DF
		ip.ttl = 64;
		ip.protocol = IPPROTO_TCP;
		ip.saddr = ih->daddr;
		ip.daddr = ih->saddr;
		ip.check = csum_fold(bpf_csum_diff(0, 0, (__be32 *)&ip, sizeof(ip), 0));
		r.ip = ip;
		struct pseudo4 ph = {
			.saddr = ip.saddr,
			.daddr = ip.daddr,
			.proto = IPPROTO_TCP,
			.len = bpf_htons(sizeof(struct tcphdr)),
		};
		__s64 s = bpf_csum_diff(0, 0, (__be32 *)&ph, sizeof(ph), 0);
		s = bpf_csum_diff(0, 0, (__be32 *)&tcp, sizeof(tcp), s);
		tcp.check = csum_fold(s);
		r.tcp = tcp;
		if (bpf_skb_change_tail(skb, sizeof(r), 0))
			return VERDICT_DROP;
		if (bpf_skb_store_bytes(skb, 0, &r, sizeof(r), 0))
			return VERDICT_DROP;
	} else {
		struct ipv6hdr *ih = data + sizeof(struct ethhdr);
		if ((void *)(ih + 1) > end)
			return VERDICT_DROP;
		struct rst6 r = {};
		__builtin_memcpy(r.eth.h_dest, smac, ETH_ALEN);
		__builtin_memcpy(r.eth.h_source, dmac, ETH_ALEN);
		r.eth.h_proto = bpf_htons(ETH_P_IPV6);
		r.ip.version = 6;
		r.ip.payload_len = bpf_htons(sizeof(struct tcphdr));
		r.ip.nexthdr = IPPROTO_TCP;
		r.ip.hop_limit = 64;
		__builtin_memcpy(&r.ip.saddr, &ih->daddr, 16);
		__builtin_memcpy(&r.ip.daddr, &ih->saddr, 16);
		struct pseudo6 ph = {
			.len = bpf_htonl(sizeof(struct tcphdr)),
			.proto = IPPROTO_TCP,
		};
		__builtin_memcpy(ph.saddr, &ih->daddr, 16);
		__builtin_memcpy(ph.daddr, &ih->saddr, 16);
		__s64 s = bpf_csum_diff(0, 0, (__be32 *)&ph, sizeof(ph), 0);
		s = bpf_csum_diff(0, 0, (__be32 *)&tcp, sizeof(tcp), s);
		tcp.check = csum_fold(s);
		r.tcp = tcp;
		if (bpf_skb_change_tail(skb, sizeof(r), 0))
			return VERDICT_DROP;
		if (bpf_skb_store_bytes(skb, 0, &r, sizeof(r), 0))
			return VERDICT_DROP;
	}
	return bpf_redirect(ifindex, 0);
}

struct unreach4 {
	struct ethhdr eth;
	struct iphdr ip;
	__u8 msg[8 + sizeof(struct iphdr) + 8]; // ICMP header, quoted IP and UDP headers
} __attribute__((packed));

struct unreach6 {
	struct ethhdr eth;
	struct ipv6hdr ip;
	__u8 msg[8 + sizeof(struct ipv6hdr) + 8];
} __attribute__((packed));

// reply_unreach turns a UDP datagram into the ICMP "port unreachable" the
// destination would send if nothing listened there (the datagram's IP
// header and UDP header quoted) and redirects it back out of the same veth,
// into the sandbox, so a connected socket fails at once (ECONNREFUSED).
// Only for a datagram without IP options or extension headers; otherwise,
// or when the packet cannot be rewritten, VERDICT_DROP.
static __always_inline int reply_unreach(struct __sk_buff *skb, __u32 ifindex, struct pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return VERDICT_DROP;
	unsigned char smac[ETH_ALEN], dmac[ETH_ALEN];
	__builtin_memcpy(smac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(dmac, eth->h_dest, ETH_ALEN);
	if (!p->v6) {
		__u8 msg[sizeof(((struct unreach4 *)0)->msg)] __attribute__((aligned(4))) = {};
		const __u32 qlen = sizeof(msg) - 8;
		if (p->l4off != sizeof(struct ethhdr) + sizeof(struct iphdr))
			return VERDICT_DROP;
		if (data + sizeof(struct ethhdr) + qlen > end)
			return VERDICT_DROP;
		__builtin_memcpy(&msg[8], data + sizeof(struct ethhdr), qlen);
		struct iphdr *orig = (struct iphdr *)&msg[8];
		msg[0] = 3; // destination unreachable
		msg[1] = 3; // port unreachable
		__u16 c = csum_fold(bpf_csum_diff(0, 0, (__be32 *)msg, sizeof(msg), 0));
		__builtin_memcpy(&msg[2], &c, 2);
		struct iphdr ip = {};
		ip.version = 4;
		ip.ihl = 5;
		ip.tot_len = bpf_htons(sizeof(ip) + sizeof(msg));
		ip.ttl = 64;
		ip.protocol = IPPROTO_ICMP;
		ip.saddr = orig->daddr;
		ip.daddr = orig->saddr;
		ip.check = csum_fold(bpf_csum_diff(0, 0, (__be32 *)&ip, sizeof(ip), 0));
		struct unreach4 r = {};
		__builtin_memcpy(r.eth.h_dest, smac, ETH_ALEN);
		__builtin_memcpy(r.eth.h_source, dmac, ETH_ALEN);
		r.eth.h_proto = bpf_htons(ETH_P_IP);
		r.ip = ip;
		__builtin_memcpy(r.msg, msg, sizeof(msg));
		if (bpf_skb_change_tail(skb, sizeof(r), 0))
			return VERDICT_DROP;
		if (bpf_skb_store_bytes(skb, 0, &r, sizeof(r), 0))
			return VERDICT_DROP;
	} else {
		__u8 msg[sizeof(((struct unreach6 *)0)->msg)] __attribute__((aligned(4))) = {};
		const __u32 qlen = sizeof(msg) - 8;
		if (p->l4off != sizeof(struct ethhdr) + sizeof(struct ipv6hdr))
			return VERDICT_DROP;
		if (data + sizeof(struct ethhdr) + qlen > end)
			return VERDICT_DROP;
		__builtin_memcpy(&msg[8], data + sizeof(struct ethhdr), qlen);
		struct ipv6hdr *orig = (struct ipv6hdr *)&msg[8];
		msg[0] = 1; // destination unreachable
		msg[1] = 4; // port unreachable
		struct pseudo6 ph = {
			.len = bpf_htonl(sizeof(msg)),
			.proto = IPPROTO_ICMPV6_,
		};
		__builtin_memcpy(ph.saddr, &orig->daddr, 16);
		__builtin_memcpy(ph.daddr, &orig->saddr, 16);
		__s64 sum = bpf_csum_diff(0, 0, (__be32 *)&ph, sizeof(ph), 0);
		sum = bpf_csum_diff(0, 0, (__be32 *)msg, sizeof(msg), sum);
		__u16 c = csum_fold(sum);
		__builtin_memcpy(&msg[2], &c, 2);
		struct unreach6 r = {};
		__builtin_memcpy(r.eth.h_dest, smac, ETH_ALEN);
		__builtin_memcpy(r.eth.h_source, dmac, ETH_ALEN);
		r.eth.h_proto = bpf_htons(ETH_P_IPV6);
		r.ip.version = 6;
		r.ip.payload_len = bpf_htons(sizeof(msg));
		r.ip.nexthdr = IPPROTO_ICMPV6_;
		r.ip.hop_limit = 64;
		__builtin_memcpy(&r.ip.saddr, ph.saddr, 16);
		__builtin_memcpy(&r.ip.daddr, ph.daddr, 16);
		__builtin_memcpy(r.msg, msg, sizeof(msg));
		if (bpf_skb_change_tail(skb, sizeof(r), 0))
			return VERDICT_DROP;
		if (bpf_skb_store_bytes(skb, 0, &r, sizeof(r), 0))
			return VERDICT_DROP;
	}
	return bpf_redirect(ifindex, 0);
}

// deny counts the packet and refuses it the way its destination would if
// nothing listened there: a TCP SYN gets a reset, a UDP datagram an ICMP
// port unreachable; anything else is dropped, and so is anything to a
// multicast group (no host answers those with an error: RFC 1122 3.2.2,
// RFC 4443 2.4).
static __always_inline int deny(struct __sk_buff *skb, __u32 reason, struct pkt *p)
{
	__u32 ifindex = skb->ifindex;
	count_drop(ifindex, reason, p);
	if (reason == REASON_MULTICAST)
		return VERDICT_DROP;
	if (p->proto == IPPROTO_TCP && p->syn_only && p->l4off)
		return reply_rst(skb, ifindex, p);
	if (p->proto == IPPROTO_UDP && p->l4off)
		return reply_unreach(skb, ifindex, p);
	return VERDICT_DROP;
}

// parse_l4 records the L4 header at off: for TCP and UDP the destination
// port (and TCP's flags), for ICMP and ICMPv6 nothing more. The header of
// a first fragment or unfragmented packet must be there whole: a packet
// that cuts it short could hide its port, so it is REASON_PROTOCOL.
// Other protocols are left to the protocol check.
static __always_inline int parse_l4(void *data, void *end, __u32 off, __u8 proto, struct pkt *p)
{
	p->proto = proto;
	if (off > MAX_L4_OFF)
		return REASON_PROTOCOL;
	if (proto == IPPROTO_TCP) {
		struct tcphdr *th = data + off;
		if ((void *)(th + 1) > end)
			return REASON_PROTOCOL;
		p->l4off = off;
		p->dport = bpf_ntohs(th->dest);
		p->syn_only = th->syn && !th->ack && !th->rst;
	} else if (proto == IPPROTO_UDP) {
		struct udphdr *uh = data + off;
		if ((void *)(uh + 1) > end)
			return REASON_PROTOCOL;
		p->l4off = off;
		p->dport = bpf_ntohs(uh->dest);
	} else if (proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6_) {
		__u8 *h = data + off;
		if ((void *)(h + 4) > end)
			return REASON_PROTOCOL;
		p->l4off = off;
	}
	return 0;
}

// parse4 reads an IPv4 packet. IP options are not parsed (source routes
// hide the real destination), so a header longer than 20 bytes is
// REASON_PROTOCOL.
static __always_inline int parse4(void *data, void *end, struct pkt *p)
{
	__u32 off = sizeof(struct ethhdr);
	struct iphdr *ih = data + off;
	if ((void *)(ih + 1) > end || ih->version != 4 || ih->ihl != 5)
		return REASON_PROTOCOL;
	p->dst[10] = 0xff;
	p->dst[11] = 0xff;
	__builtin_memcpy(&p->dst[12], &ih->daddr, 4);
	p->src[10] = 0xff;
	p->src[11] = 0xff;
	__builtin_memcpy(&p->src[12], &ih->saddr, 4);
	p->l3end = off + bpf_ntohs(ih->tot_len);
	// Only the first fragment carries the L4 header.
	if ((bpf_ntohs(ih->frag_off) & 0x1fff) != 0) {
		p->proto = ih->protocol;
		return 0;
	}
	return parse_l4(data, end, off + sizeof(*ih), ih->protocol, p);
}

static __always_inline int is_ext_hdr(__u8 nh)
{
	return nh == NEXTHDR_HOP || nh == NEXTHDR_ROUTING || nh == NEXTHDR_DEST || nh == NEXTHDR_FRAGMENT;
}

// nd_on_link reports whether a neighbour discovery destination is
// link-scope: multicast ff02::/16 or link-local fe80::/10.
static __always_inline int nd_on_link(const __u8 *a)
{
	return (a[0] == 0xff && a[1] == 0x02) || (a[0] == 0xfe && (a[1] & 0xc0) == 0x80);
}

static __always_inline int is_unspecified(const __u8 *a)
{
	const __u64 *x = (const __u64 *)a;
	return x[0] == 0 && x[1] == 0;
}

// parse6 reads an IPv6 packet and its extension header chain: hop-by-hop,
// routing, fragment and destination options, at most MAX_EXT_HDRS of them.
// A chain it cannot follow to its end (longer, cut short), a routing header
// with segments left (the real destination is in it) or a first fragment
// without its L4 header is REASON_PROTOCOL. It also decides neighbour
// discovery (PARSED_PASS) and the netstack's multicast housekeeping
// (PARSED_QUIET).
static __always_inline int parse6(void *data, void *end, struct sandbox_cfg *cfg, struct pkt *p)
{
	__u32 off = sizeof(struct ethhdr);
	struct ipv6hdr *ih = data + off;
	if ((void *)(ih + 1) > end || ih->version != 6)
		return REASON_PROTOCOL;
	p->v6 = 1;
	__builtin_memcpy(p->dst, &ih->daddr, 16);
	__builtin_memcpy(p->src, &ih->saddr, 16);
	p->l3end = off + sizeof(*ih) + bpf_ntohs(ih->payload_len);
	__u8 nh = ih->nexthdr;
	__u32 l4 = off + sizeof(*ih);
	int later = 0; // a fragment other than the first
	for (int i = 0; i < MAX_EXT_HDRS && is_ext_hdr(nh); i++) {
		if (l4 > MAX_L4_OFF)
			return REASON_PROTOCOL;
		__u8 *h = data + l4;
		if ((void *)(h + 8) > end)
			return REASON_PROTOCOL;
		if (nh == NEXTHDR_FRAGMENT) {
			nh = h[0];
			l4 += 8;
			if ((bpf_ntohs(*(__be16 *)(h + 2)) & 0xfff8) != 0) {
				later = 1; // what follows is data, not headers
				break;
			}
			continue;
		}
		if (nh == NEXTHDR_ROUTING && h[3] != 0)
			return REASON_PROTOCOL;
		nh = h[0];
		l4 += (h[1] + 1) * 8;
	}
	if (later) {
		p->proto = nh;
		return 0;
	}
	if (is_ext_hdr(nh))
		return REASON_PROTOCOL; // the chain goes on: not fully parsed
	int r = parse_l4(data, end, l4, nh, p);
	if (r)
		return r;
	if (nh != IPPROTO_ICMPV6_)
		return 0;
	__u8 *icmp = data + p->l4off;
	if ((void *)(icmp + 2) > end)
		return REASON_PROTOCOL;
	// Neighbour discovery (RS, RA, NS, NA, redirect; RFC 4861 receivers
	// drop it unless the hop limit is 255 and the code 0) passes before
	// the denylist when it stays on the link and comes from the sandbox's
	// own link-local address or :: (duplicate address detection). Any
	// other goes through the policy like every packet.
	if (icmp[0] >= 133 && icmp[0] <= 137 && icmp[1] == 0 && ih->hop_limit == 255 &&
	    l4 == off + sizeof(*ih) && cfg && !(cfg->flags & CFG_NO_INTERNET) && nd_on_link(p->dst) &&
	    (addr_eq(p->src, cfg->link_local) || is_unspecified(p->src)))
		return PARSED_PASS;
	// Multicast listener reports and queries to link-scope groups
	// (ff02::/16) are the sandbox netstack's own housekeeping, not an
	// attempt to reach anything: dropped without being counted, so they
	// do not show up as a denial in every step's events.
	if (p->dst[0] == 0xff && p->dst[1] == 0x02 &&
	    ((icmp[0] >= 130 && icmp[0] <= 132) || icmp[0] == 143))
		return PARSED_QUIET;
	return 0;
}

// check_protocol allows only TCP, UDP and the family's ICMP, and denies
// tunnels (IP protocols and well-known UDP ports of encapsulations) as
// REASON_ENCAPSULATION. A tunnel on another UDP port looks like any UDP
// flow: its outer destination must be globally reachable like any other.
static __always_inline int check_protocol(struct pkt *p)
{
	switch (p->proto) {
	case IPPROTO_TCP:
		return 0;
	case IPPROTO_UDP:
		switch (p->dport) {
		case 1701: // L2TP (RFC 2661)
		case 2152: // GTP-U
		case 3544: // Teredo (RFC 4380)
		case 4341: // LISP data (RFC 9300)
		case 4500: // IPsec ESP in UDP (RFC 3948)
		case 4754: // GRE in UDP (RFC 8086)
		case 4789: // VXLAN (RFC 7348)
		case 4790: // VXLAN-GPE
		case 6081: // Geneve (RFC 8926)
		case 6635: // MPLS in UDP (RFC 7510)
		case 8472: // VXLAN, Linux's default port
			return REASON_ENCAPSULATION;
		}
		return 0;
	case IPPROTO_ICMP:
		return p->v6 ? REASON_PROTOCOL : 0;
	case IPPROTO_ICMPV6_:
		return p->v6 ? 0 : REASON_PROTOCOL;
	case 4:   // IP in IP
	case 41:  // IPv6 in IP
	case 47:  // GRE
	case 97:  // EtherIP
	case 98:  // ENCAP
	case 115: // L2TPv3
	case 137: // MPLS in IP
	case 143: // Ethernet (RFC 8986)
		return REASON_ENCAPSULATION;
	}
	return REASON_PROTOCOL;
}

// lookup_reason returns the trie's reason for a 16-byte address, with the
// embedding of its block.
static __always_inline __u32 lookup_deny(void *trie, const __u8 *addr)
{
	struct deny_key k = {.prefixlen = 128};
	__builtin_memcpy(k.addr, addr, 16);
	__u32 *v = bpf_map_lookup_elem(trie, &k);
	return v ? *v : 0;
}

// lookup_v4 returns the trie's reason for the IPv4 address at a (4 bytes,
// inverted when invert is set, as Teredo's client address is).
static __always_inline __u32 lookup_v4(void *trie, const __u8 *a, int invert)
{
	struct deny_key k = {.prefixlen = 128};
	k.addr[10] = 0xff;
	k.addr[11] = 0xff;
	__u8 x = invert ? 0xff : 0;
	k.addr[12] = a[0] ^ x;
	k.addr[13] = a[1] ^ x;
	k.addr[14] = a[2] ^ x;
	k.addr[15] = a[3] ^ x;
	__u32 *v = bpf_map_lookup_elem(trie, &k);
	return v ? DENY_REASON(*v) : REASON_NONE;
}

// denied_reason decides the destination by the denylist: its own block,
// and for an IPv6 address embedding an IPv4 one the IPv4 address as well
// (a denied IPv4 address's reason wins). An IPv6 packet to an IPv4-mapped
// address is never sent (IANA: not globally reachable).
static __always_inline __u32 denied_reason(void *trie, struct pkt *p)
{
	__u32 v = lookup_deny(trie, p->dst);
	__u32 reason = DENY_REASON(v);
	if (!p->v6)
		return reason;
	const __u64 *d = (const __u64 *)p->dst;
	const __u32 *w = (const __u32 *)p->dst;
	if (d[0] == 0 && w[2] == bpf_htonl(0xffff))
		return reason ? reason : REASON_NOT_GLOBAL;
	__u32 r4 = REASON_NONE;
	switch (DENY_EMBED(v)) {
	case EMBED_LOW32:
		r4 = lookup_v4(trie, &p->dst[12], 0);
		break;
	case EMBED_6TO4:
		r4 = lookup_v4(trie, &p->dst[2], 0);
		break;
	case EMBED_TEREDO:
		r4 = lookup_v4(trie, &p->dst[4], 0);
		if (r4 == REASON_NONE)
			r4 = lookup_v4(trie, &p->dst[12], 1);
		break;
	}
	return r4 != REASON_NONE ? r4 : reason;
}

// route_reason asks the node's routing tables about the destination, so
// that every address of the node is denied the moment it exists, whatever
// list agentd read: a destination the node does not forward (its local,
// broadcast and anycast routes) is REASON_NODE. The helper answers "not
// forwarded" for a destination without any route too: for IPv6 a second
// lookup in the main table tells the two apart (REASON_NO_ROUTE); IPv4
// cannot (while no policy rule exists the kernel keeps the local and main
// tables as one), so there it is REASON_NODE, unless the address watch put
// the address in the denylist first. IPv6 is looked up as if received on
// lo, from ::: the sandbox veths are not IPv6 routers
// (conf/<veth>/forwarding=0), which the helper refuses, and a link-local
// source makes it answer "not forwarded" for everything.
static __always_inline __u32 route_reason(struct __sk_buff *skb, struct pkt *p)
{
	struct bpf_fib_lookup fib = {};
	fib.l4_protocol = p->proto;
	if (!p->v6) {
		fib.family = AF_INET_;
		fib.ifindex = skb->ifindex;
		__builtin_memcpy(&fib.ipv4_src, &p->src[12], 4);
		__builtin_memcpy(&fib.ipv4_dst, &p->dst[12], 4);
	} else {
		fib.family = AF_INET6_;
		fib.ifindex = LOOPBACK_IFINDEX;
		__builtin_memcpy(fib.ipv6_dst, p->dst, 16);
	}
	struct bpf_fib_lookup main = fib;
	long rc = bpf_fib_lookup(skb, &fib, sizeof(fib), FIB_SKIP_NEIGH);
	if (rc < 0 || rc == BPF_FIB_LKUP_RET_FWD_DISABLED)
		return REASON_UNCONFIGURED; // cannot tell: fail closed
	if (rc != BPF_FIB_LKUP_RET_NOT_FWDED)
		return REASON_NONE;
	if (!p->v6)
		return REASON_NODE;
	main.tbid = RT_TABLE_MAIN_;
	rc = bpf_fib_lookup(skb, &main, sizeof(main), FIB_DIRECT | FIB_TBID | FIB_SKIP_NEIGH);
	if (rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return REASON_NODE;
	return REASON_NO_ROUTE;
}

SEC("tc")
int egress_filter(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct pkt p = {};

	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return VERDICT_DROP;
	__u16 proto = bpf_ntohs(eth->h_proto);
	if (proto == ETH_P_ARP)
		return VERDICT_NEXT;

	__u32 ifindex = skb->ifindex;
	struct sandbox_cfg *cfg = bpf_map_lookup_elem(&sandbox_cfgs, &ifindex);
	int r;
	if (proto == ETH_P_IP)
		r = parse4(data, end, &p);
	else if (proto == ETH_P_IPV6)
		r = parse6(data, end, cfg, &p);
	else
		r = REASON_PROTOCOL;
	if (r == PARSED_PASS)
		return pass(skb);
	if (r == PARSED_QUIET)
		return VERDICT_DROP;
	if (r)
		return deny(skb, r, &p);

	if (!cfg)
		return deny(skb, REASON_UNCONFIGURED, &p);
	if (cfg->flags & CFG_NO_INTERNET)
		return deny(skb, REASON_NO_INTERNET, &p);
	r = check_protocol(&p);
	if (r)
		return deny(skb, r, &p);

	int dns = p.dport == 53 && (p.proto == IPPROTO_UDP || p.proto == IPPROTO_TCP);
	if (dns) {
		__u32 n = cfg->n_resolvers;
#pragma unroll
		for (int i = 0; i < MAX_RESOLVERS; i++) {
			if (i < n && addr_eq(cfg->resolvers[i], p.dst))
				return pass(skb);
		}
	}

	__u32 zero = 0;
	void *trie = bpf_map_lookup_elem(&deny_outer, &zero);
	if (!trie)
		return deny(skb, REASON_UNCONFIGURED, &p);
	__u32 reason = denied_reason(trie, &p);
	if (reason == REASON_NONE)
		reason = route_reason(skb, &p);
	if (reason != REASON_NONE)
		return deny(skb, reason, &p);
	if (dns)
		return deny(skb, REASON_DNS_NOT_RESOLVER, &p);
	return pass(skb);
}
