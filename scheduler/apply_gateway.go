package scheduler

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

// applySetGateway creates or replaces a gateway's record (see
// cluster.SetGateway). Records expired at c.At are dropped first, so that
// the table never holds more than cluster.MaxGateways records, live or
// not; a new name past that bound is refused.
func (st *State) applySetGateway(idx uint64, c *cluster.SetGateway) any {
	if err := cluster.ValidateName("gateway name", c.Name); err != nil {
		return fmt.Errorf("%w: %w", err, ErrInvalid)
	}
	if err := cluster.ValidateGatewayAddrs(c.Addresses); err != nil {
		return fmt.Errorf("gateway %s: %w: %w", c.Name, err, ErrInvalid)
	}
	for name, g := range st.gateways {
		if g.Expired(c.At) {
			delete(st.gateways, name)
		}
	}
	old := st.gateways[c.Name]
	if old == nil && len(st.gateways) >= cluster.MaxGateways {
		return fmt.Errorf("gateway %s: %d gateways are registered, at most %d: a record expires %v after its last update: %w",
			c.Name, len(st.gateways), cluster.MaxGateways, cluster.GatewayTTL, ErrExists)
	}
	g := &cluster.Gateway{Name: c.Name, Addresses: slices.Clone(c.Addresses), Updated: c.At, CreateIndex: idx, ModifyIndex: idx}
	if old != nil {
		g.CreateIndex = old.CreateIndex
	}
	st.gateways[c.Name] = g
	return nil
}

// Gateways returns the gateway records not expired at now, ordered by name.
func (st *State) Gateways(now time.Time) []cluster.Gateway {
	st.mu.RLock()
	defer st.mu.RUnlock()
	out := make([]cluster.Gateway, 0, len(st.gateways))
	for _, g := range st.gateways {
		if !g.Expired(now) {
			c := *g
			c.Addresses = slices.Clone(g.Addresses)
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b cluster.Gateway) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// snapshotGateways returns the gateway records for a snapshot. The caller
// holds mu.
func (st *State) snapshotGateways() []*cluster.Gateway {
	out := make([]*cluster.Gateway, 0, len(st.gateways))
	for _, g := range st.gateways {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b *cluster.Gateway) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// platform returns the control plane's addresses as of now: each member's
// HTTP and Raft address hosts, every node's registered address, and the
// live gateways' addresses, sorted by kind, name and address. A member
// host that is a name, not an IP literal, is passed to resolve; a name
// that does not resolve is left out (and reported in unresolved).
func (st *State) platform(now time.Time, resolve func(host string) []netip.Addr) (p cluster.Platform, unresolved []string) {
	st.mu.RLock()
	p.Index = st.index
	type memberHost struct{ id, host string }
	var hosts []memberHost
	for _, m := range st.members {
		for _, hp := range []string{m.HTTPAddress, m.RaftAddress} {
			if h, _, err := net.SplitHostPort(hp); err == nil {
				hosts = append(hosts, memberHost{m.ID, h})
			}
		}
	}
	for _, n := range st.nodes {
		if n.Address.IsValid() {
			p.Addresses = append(p.Addresses, cluster.PlatformAddr{Kind: cluster.PlatformNode, Name: string(n.ID), Addr: n.Address.Addr().Unmap()})
		}
	}
	for _, g := range st.gateways {
		if g.Expired(now) {
			continue
		}
		for _, a := range g.Addresses {
			p.Addresses = append(p.Addresses, cluster.PlatformAddr{Kind: cluster.PlatformGateway, Name: g.Name, Addr: a})
		}
	}
	st.mu.RUnlock()
	// Names resolve outside the lock.
	for _, h := range hosts {
		if a, err := netip.ParseAddr(h.host); err == nil {
			p.Addresses = append(p.Addresses, cluster.PlatformAddr{Kind: cluster.PlatformMember, Name: h.id, Addr: a.WithZone("").Unmap()})
			continue
		}
		addrs := resolve(h.host)
		if len(addrs) == 0 {
			unresolved = append(unresolved, h.host)
		}
		for _, a := range addrs {
			p.Addresses = append(p.Addresses, cluster.PlatformAddr{Kind: cluster.PlatformMember, Name: h.id, Addr: a.WithZone("").Unmap()})
		}
	}
	slices.SortFunc(p.Addresses, func(a, b cluster.PlatformAddr) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name), a.Addr.Compare(b.Addr))
	})
	p.Addresses = slices.Compact(p.Addresses)
	if p.Addresses == nil {
		p.Addresses = []cluster.PlatformAddr{}
	}
	return p, slices.Compact(unresolved)
}
