package netpolicy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
)

// ErrPoolExhausted is returned by Pool.Allocate when every link is in use.
var ErrPoolExhausted = errors.New("address pool exhausted")

// Lease is one sandbox's link: an IPv4 and an IPv6 subnet, each with a
// gateway (the host end) and the sandbox's address.
type Lease struct {
	Addr4, Addr6       netip.Prefix
	Gateway4, Gateway6 netip.Addr
}

// Pool carves an IPv4 and an IPv6 prefix into per-sandbox links (slot i is
// the i-th subnet of each family) and hands them out by sandbox ID. State is
// in memory only: after a restart, Sweep re-reserves the links of the
// sandboxes it keeps. A Pool is safe for concurrent use.
type Pool struct {
	pool4, pool6 netip.Prefix
	bits4, bits6 int
	size         int

	mu   sync.Mutex
	byID map[string]int
	used map[int]string
	next int
}

// NewPool returns a pool of links of prefix length bits4 carved from pool4
// and of bits6 carved from pool6. pool6 must be a /64 or longer.
func NewPool(pool4, pool6 netip.Prefix, bits4, bits6 int) (*Pool, error) {
	pool4, pool6 = pool4.Masked(), pool6.Masked()
	switch {
	case !pool4.Addr().Is4():
		return nil, fmt.Errorf("ipv4 pool %v is not an IPv4 prefix", pool4)
	case !pool6.Addr().Is6() || pool6.Addr().Is4In6():
		return nil, fmt.Errorf("ipv6 pool %v is not an IPv6 prefix", pool6)
	case pool6.Bits() < 64:
		return nil, fmt.Errorf("ipv6 pool %v: want a /64 or longer", pool6)
	case bits4 <= pool4.Bits() || bits4 > 31:
		return nil, fmt.Errorf("ipv4 link length /%d: want longer than the pool %v and at most /31", bits4, pool4)
	case bits6 <= pool6.Bits() || bits6 > 127:
		return nil, fmt.Errorf("ipv6 link length /%d: want longer than the pool %v and at most /127", bits6, pool6)
	}
	size := 1 << min(bits4-pool4.Bits(), 24)
	size = min(size, 1<<min(bits6-pool6.Bits(), 24))
	return &Pool{
		pool4: pool4, pool6: pool6, bits4: bits4, bits6: bits6, size: size,
		byID: make(map[string]int), used: make(map[int]string),
	}, nil
}

// Len returns the number of links in the pool.
func (p *Pool) Len() int { return p.size }

// Allocate returns the link of id, choosing a free one if id has none.
func (p *Pool) Allocate(id string) (Lease, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if slot, ok := p.byID[id]; ok {
		return p.lease(slot), nil
	}
	for n := 0; n < p.size; n++ {
		slot := (p.next + n) % p.size
		if _, busy := p.used[slot]; busy {
			continue
		}
		p.used[slot] = id
		p.byID[id] = slot
		p.next = (slot + 1) % p.size
		return p.lease(slot), nil
	}
	return Lease{}, fmt.Errorf("allocate link for sandbox %s: %w (%d links)", id, ErrPoolExhausted, p.size)
}

// Reserve marks the link containing addr (an address of either family) as
// used by id, as found on a sandbox that outlived a restart.
func (p *Pool) Reserve(id string, addr netip.Addr) error {
	slot, ok := p.slotOf(addr)
	if !ok {
		return fmt.Errorf("reserve %v for sandbox %s: not in pool %v or %v", addr, id, p.pool4, p.pool6)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if other, busy := p.used[slot]; busy && other != id {
		return fmt.Errorf("reserve %v for sandbox %s: link in use by sandbox %s", addr, id, other)
	}
	if old, ok := p.byID[id]; ok && old != slot {
		delete(p.used, old)
	}
	p.used[slot] = id
	p.byID[id] = slot
	return nil
}

// Release frees the link of id, if it has one.
func (p *Pool) Release(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if slot, ok := p.byID[id]; ok {
		delete(p.byID, id)
		delete(p.used, slot)
	}
}

func (p *Pool) lease(slot int) Lease {
	var l Lease
	base4 := binary.BigEndian.Uint32(p.pool4.Addr().AsSlice()) + uint32(slot)<<(32-p.bits4)
	gw, sb := hostOffsets(32 - p.bits4)
	l.Gateway4 = addr4(base4 + gw)
	l.Addr4 = netip.PrefixFrom(addr4(base4+sb), p.bits4)

	b := p.pool6.Addr().As16()
	lo := binary.BigEndian.Uint64(b[8:]) + uint64(slot)<<(128-p.bits6)
	gw, sb = hostOffsets(128 - p.bits6)
	l.Gateway6 = addr6(b, lo+uint64(gw))
	l.Addr6 = netip.PrefixFrom(addr6(b, lo+uint64(sb)), p.bits6)
	return l
}

func (p *Pool) slotOf(a netip.Addr) (int, bool) {
	a = a.Unmap()
	switch {
	case p.pool4.Contains(a):
		off := binary.BigEndian.Uint32(a.AsSlice()) - binary.BigEndian.Uint32(p.pool4.Addr().AsSlice())
		slot := int(off >> (32 - p.bits4))
		return slot, slot < p.size
	case p.pool6.Contains(a):
		b, base := a.As16(), p.pool6.Addr().As16()
		off := binary.BigEndian.Uint64(b[8:]) - binary.BigEndian.Uint64(base[8:])
		slot := off >> (128 - p.bits6)
		return int(slot), slot < uint64(p.size)
	}
	return 0, false
}

// hostOffsets returns the offsets of the gateway and the sandbox inside a
// link with hostBits host bits: .1 and .2, or .0 and .1 on a /31 or /127.
func hostOffsets(hostBits int) (gw, sandbox uint32) {
	if hostBits == 1 {
		return 0, 1
	}
	return 1, 2
}

func addr4(u uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], u)
	return netip.AddrFrom4(b)
}

func addr6(hi [16]byte, lo uint64) netip.Addr {
	binary.BigEndian.PutUint64(hi[8:], lo)
	return netip.AddrFrom16(hi)
}
