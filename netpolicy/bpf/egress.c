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
#define REASON_NO_INTERNET 8
#define REASON_DNS_NOT_RESOLVER 9
#define REASON_PROTOCOL 11
#define REASON_UNCONFIGURED 12

#define MAX_RESOLVERS 4
#define CFG_NO_INTERNET 1

#define IPPROTO_ICMPV6_ 58
#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_DEST 60
#define MAX_EXT_HDRS 6

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
	__u8 _pad[5];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct drop_key);
	__type(value, struct drop_val);
} drops SEC(".maps");

struct pkt {
	__u8 dst[16];
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
static __always_inline int reply_rst(struct __sk_buff *skb, struct pkt *p)
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
	return bpf_redirect(skb->ifindex, 0);
}

static __always_inline int deny(struct __sk_buff *skb, __u32 reason, struct pkt *p)
{
	count_drop(skb->ifindex, reason, p);
	if (p->proto == IPPROTO_TCP && p->syn_only && p->l4off)
		return reply_rst(skb, p);
	return VERDICT_DROP;
}

// parse_l4 records the L4 protocol and, for TCP and UDP, the destination port
// and TCP flags of the header at off.
static __always_inline void parse_l4(void *data, void *end, __u32 off, __u8 proto, struct pkt *p)
{
	if (off > 512)
		return;
	if (proto == IPPROTO_TCP) {
		struct tcphdr *th = data + off;
		if ((void *)(th + 1) > end)
			return;
		p->proto = proto;
		p->l4off = off;
		p->dport = bpf_ntohs(th->dest);
		p->syn_only = th->syn && !th->ack && !th->rst;
	} else if (proto == IPPROTO_UDP) {
		__be16 *ports = data + off;
		if ((void *)(ports + 2) > end)
			return;
		p->proto = proto;
		p->l4off = off;
		p->dport = bpf_ntohs(ports[1]);
	} else {
		p->proto = proto;
	}
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

	__u32 off = sizeof(struct ethhdr);
	if (proto == ETH_P_IP) {
		struct iphdr *ih = data + off;
		if ((void *)(ih + 1) > end || ih->ihl < 5) {
			count_drop(skb->ifindex, REASON_PROTOCOL, &p);
			return VERDICT_DROP;
		}
		p.dst[10] = 0xff;
		p.dst[11] = 0xff;
		__builtin_memcpy(&p.dst[12], &ih->daddr, 4);
		p.l3end = off + bpf_ntohs(ih->tot_len);
		// Only the first fragment carries the L4 header.
		if ((bpf_ntohs(ih->frag_off) & 0x1fff) == 0)
			parse_l4(data, end, off + ih->ihl * 4, ih->protocol, &p);
		else
			p.proto = ih->protocol;
	} else if (proto == ETH_P_IPV6) {
		struct ipv6hdr *ih = data + off;
		if ((void *)(ih + 1) > end) {
			count_drop(skb->ifindex, REASON_PROTOCOL, &p);
			return VERDICT_DROP;
		}
		p.v6 = 1;
		__builtin_memcpy(p.dst, &ih->daddr, 16);
		p.l3end = off + sizeof(*ih) + bpf_ntohs(ih->payload_len);
		__u8 nh = ih->nexthdr;
		__u32 l4 = off + sizeof(*ih);
		int frag_later = 0;
#pragma unroll
		for (int i = 0; i < MAX_EXT_HDRS; i++) {
			if (nh != NEXTHDR_HOP && nh != NEXTHDR_ROUTING && nh != NEXTHDR_DEST &&
			    nh != NEXTHDR_FRAGMENT)
				break;
			if (l4 > 512)
				break;
			__u8 *h = data + l4;
			if ((void *)(h + 8) > end)
				break;
			if (nh == NEXTHDR_FRAGMENT) {
				if ((bpf_ntohs(*(__be16 *)(h + 2)) & 0xfff8) != 0)
					frag_later = 1;
				nh = h[0];
				l4 += 8;
			} else {
				nh = h[0];
				l4 += (h[1] + 1) * 8;
			}
		}
		// Neighbour discovery (RS, RA, NS, NA, redirect) goes through before the
		// denylist; RFC 4861 receivers drop it unless the hop limit is 255.
		if (nh == IPPROTO_ICMPV6_ && ih->hop_limit == 255 && l4 == off + sizeof(*ih)) {
			__u8 *icmp = data + l4;
			if ((void *)(icmp + 1) <= end && icmp[0] >= 133 && icmp[0] <= 137)
				return pass(skb);
		}
		// Multicast listener reports and queries to link-scope groups
		// (ff02::/16) are the sandbox netstack's own housekeeping, not an
		// attempt to reach anything: dropped without being counted, so they
		// do not show up as a denial in every step's events.
		if (nh == IPPROTO_ICMPV6_ && ih->daddr.in6_u.u6_addr8[0] == 0xff &&
		    ih->daddr.in6_u.u6_addr8[1] == 0x02) {
			__u8 *icmp = data + l4;
			if ((void *)(icmp + 1) <= end &&
			    ((icmp[0] >= 130 && icmp[0] <= 132) || icmp[0] == 143))
				return VERDICT_DROP;
		}
		if (!frag_later)
			parse_l4(data, end, l4, nh, &p);
		else
			p.proto = nh;
	} else {
		count_drop(skb->ifindex, REASON_PROTOCOL, &p);
		return VERDICT_DROP;
	}

	__u32 ifindex = skb->ifindex;
	struct sandbox_cfg *cfg = bpf_map_lookup_elem(&sandbox_cfgs, &ifindex);
	if (!cfg)
		return deny(skb, REASON_UNCONFIGURED, &p);
	if (cfg->flags & CFG_NO_INTERNET)
		return deny(skb, REASON_NO_INTERNET, &p);

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
	struct deny_key k = {.prefixlen = 128};
	__builtin_memcpy(k.addr, p.dst, 16);
	__u32 *reason = bpf_map_lookup_elem(trie, &k);
	if (reason && *reason != REASON_NONE)
		return deny(skb, *reason, &p);
	if (dns)
		return deny(skb, REASON_DNS_NOT_RESOLVER, &p);
	return pass(skb);
}
