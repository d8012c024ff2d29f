package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// EgressConfig configures a node's sandbox networking.
type EgressConfig struct {
	// Net configures the namespaces, veths, pool and NAT.
	Net Config
	// Resolvers are the DNS servers sandboxes use (their /etc/resolv.conf)
	// and the only destinations of port 53 they may reach.
	Resolvers []netip.Addr
	// NodeAddrs are denied in addition to the addresses found on the node
	// namespace's interfaces when NewEgress runs.
	NodeAddrs []netip.Addr
	// Platform are the operator's platform CIDRs (scheduler, gateway,
	// databases); SetPlatform replaces them at run time.
	Platform []netip.Prefix
}

// Egress is a node's sandbox networking: a Manager and a Filter working in
// the same node namespace. Setup gives a sandbox its network with the
// filter attached; Teardown removes both. It is safe for concurrent use.
//
// The node's own addresses are denied twice over: the program asks the
// node's routing tables about every destination (local, broadcast and
// anycast routes are the node's), and a netlink address watch keeps the
// node's addresses, subnet broadcasts and IPv6 subnet-router anycast
// addresses in the denylist, which names their reason (node, broadcast)
// and lets the program decide IPv4 addresses embedded in IPv6 ones
// (NAT64, 6to4, Teredo) by them too.
type Egress struct {
	m      *Manager
	f      *Filter
	logger *slog.Logger

	watchDone chan struct{} // closed by Close
	watchWG   sync.WaitGroup
	reloadMu  sync.Mutex // serializes reading the node's addresses and loading the denylist

	mu        sync.Mutex
	closed    bool
	resolvers []netip.Addr
	extraNode []netip.Addr // EgressConfig.NodeAddrs
	node      []Entry      // from the node's interfaces, kept by the watch
	nodeAddrs []netip.Addr // the addresses among node, and extraNode
	platform  []netip.Prefix
	list      []Entry // the denylist loaded last
}

// NewEgress opens the node namespace, reads its addresses, loads the egress
// program and its denylist, and starts watching the node's addresses. It
// changes nothing on the node (no namespace, veth or NAT rule) until the
// first Setup or Sweep.
func NewEgress(cfg EgressConfig, logger *slog.Logger) (*Egress, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Resolvers) > MaxResolvers {
		return nil, fmt.Errorf("egress: %d DNS resolvers, at most %d", len(cfg.Resolvers), MaxResolvers)
	}
	m, err := NewManager(cfg.Net, logger)
	if err != nil {
		return nil, err
	}
	e := &Egress{m: m, logger: logger.With("component", "egress"), resolvers: slices.Clone(cfg.Resolvers),
		extraNode: slices.Clone(cfg.NodeAddrs), platform: slices.Clone(cfg.Platform), watchDone: make(chan struct{})}
	if e.f, err = NewFilter(logger); err != nil {
		m.Close()
		return nil, err
	}
	// Subscribe before reading, so that no change falls between the two.
	updates := make(chan netlink.AddrUpdate, 256)
	if err := e.subscribe(updates); err != nil {
		e.f.Close()
		m.Close()
		return nil, err
	}
	e.watchWG.Add(1)
	go e.watch(updates)
	if _, err := e.refreshNode(); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Egress) subscribe(ch chan netlink.AddrUpdate) error {
	ns := e.m.hostNS
	err := netlink.AddrSubscribeWithOptions(ch, e.watchDone, netlink.AddrSubscribeOptions{
		Namespace:         &ns,
		ReceiveBufferSize: 1 << 20,
		ErrorCallback: func(err error) {
			select {
			case <-e.watchDone:
			default:
				e.logger.Warn("node address watch", "error", err)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watch the node's addresses: %w", err)
	}
	return nil
}

// watch reloads the denylist when an address of the node changes. Changes
// to sandbox veths (pool and link-local addresses) are ignored; a burst of
// changes is one reload. If the subscription breaks (a full socket buffer),
// it subscribes again and rereads everything.
func (e *Egress) watch(ch chan netlink.AddrUpdate) {
	defer e.watchWG.Done()
	for {
		u, ok := <-ch
		if !ok {
			select {
			case <-e.watchDone:
				return
			case <-time.After(100 * time.Millisecond):
			}
			ch = make(chan netlink.AddrUpdate, 256)
			if err := e.subscribe(ch); err != nil {
				e.logger.Error("node address watch stopped; node addresses are still denied by route lookups", "error", err)
				return
			}
		} else if !e.nodeAddrChange(u) {
			continue
		}
		// Take what else is queued: one reload for a burst.
	drain:
		for {
			select {
			case _, ok := <-ch:
				if !ok {
					break drain
				}
			default:
				break drain
			}
		}
		select {
		case <-e.watchDone:
			continue // drain until the subscription closes ch
		default:
		}
		changed, err := e.refreshNode()
		switch {
		case err != nil:
			e.logger.Warn("reload node addresses", "error", err)
		case changed:
			e.logger.Info("node addresses changed; denylist reloaded", "node_addrs", e.NodeAddrs())
		}
	}
}

// nodeAddrChange reports whether u may change the node's entries: not a
// sandbox veth's address (from the pools, or link-local).
func (e *Egress) nodeAddrChange(u netlink.AddrUpdate) bool {
	a, ok := netip.AddrFromSlice(u.LinkAddress.IP)
	if !ok {
		return true
	}
	a = a.Unmap()
	return !(a.IsLinkLocalUnicast() || e.m.cfg.Pool4.Contains(a) || e.m.cfg.Pool6.Contains(a))
}

// refreshNode rereads the node's addresses and, when its entries changed,
// loads the new denylist.
func (e *Egress) refreshNode() (bool, error) {
	e.reloadMu.Lock()
	defer e.reloadMu.Unlock()
	node, addrs, err := e.hostEntries()
	if err != nil {
		return false, err
	}
	e.mu.Lock()
	same := slices.Equal(node, e.node) && e.list != nil
	old, oldAddrs := e.node, e.nodeAddrs
	e.node, e.nodeAddrs = node, append(addrs, e.extraNode...)
	e.mu.Unlock()
	if same {
		return false, nil
	}
	if err := e.reloadLocked(); err != nil {
		e.mu.Lock()
		e.node, e.nodeAddrs = old, oldAddrs
		e.mu.Unlock()
		return false, err
	}
	return true, nil
}

// hostEntries returns the denylist entries of the node namespace's own
// addresses, not those of sandbox veths (their gateways are in the pool,
// denied as private anyway): each address (ReasonNode), each IPv4 subnet's
// broadcast address (ReasonBroadcast) and each IPv6 subnet's subnet-router
// anycast address (ReasonNode). Loopback and link-local addresses are left
// to the table (loopback, link_local).
func (e *Egress) hostEntries() ([]Entry, []netip.Addr, error) {
	h, err := netlink.NewHandleAt(e.m.hostNS, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, nil, fmt.Errorf("netlink in node namespace: %w", err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return nil, nil, fmt.Errorf("list node interfaces: %w", err)
	}
	var entries []Entry
	var addrs []netip.Addr
	add := func(a netip.Addr, r Reason) {
		entries = append(entries, Entry{Prefix: netip.PrefixFrom(a, a.BitLen()), Reason: r})
	}
	for _, l := range links {
		if isHostIfname(l.Attrs().Name) {
			continue
		}
		list, err := h.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, nil, fmt.Errorf("list addresses of %s: %w", l.Attrs().Name, err)
		}
		for _, ad := range list {
			ip, ok := netip.AddrFromSlice(ad.IP)
			if !ok {
				continue
			}
			ip = ip.Unmap()
			if ip.IsLoopback() || ip.IsLinkLocalUnicast() {
				continue
			}
			addrs = append(addrs, ip)
			add(ip, ReasonNode)
			bits, _ := ad.Mask.Size()
			p := netip.PrefixFrom(ip, bits).Masked()
			switch {
			case ip.Is4() && ad.Broadcast != nil:
				if b, ok := netip.AddrFromSlice(ad.Broadcast); ok && b.Unmap() != ip {
					add(b.Unmap(), ReasonBroadcast)
				}
			case ip.Is4() && bits < 31:
				add(lastAddr(p), ReasonBroadcast)
			case ip.Is6() && bits < 127 && p.Addr() != ip:
				add(p.Addr(), ReasonNode) // the subnet-router anycast address
			}
		}
	}
	slices.SortFunc(entries, func(a, b Entry) int { return a.Prefix.Addr().Compare(b.Prefix.Addr()) })
	entries = slices.Compact(entries)
	return entries, addrs, nil
}

// lastAddr is the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	host := p.Addr().BitLen() - p.Bits()
	for i := len(b) - 1; i >= 0 && host > 0; i-- {
		n := min(host, 8)
		b[i] |= byte(1<<n - 1)
		host -= n
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Close releases the filter and the namespace handle. Sandbox networks set
// up and not torn down stay, closed to traffic (their filter is gone); a
// Sweep by the next Egress removes them.
func (e *Egress) Close() error {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		close(e.watchDone)
	}
	e.mu.Unlock()
	e.watchWG.Wait()
	var err error
	if e.f != nil {
		err = e.f.Close()
	}
	return errors.Join(err, e.m.Close())
}

// Resolvers returns the configured DNS resolvers.
func (e *Egress) Resolvers() []netip.Addr {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.resolvers)
}

// NodeAddrs returns the node addresses in the denylist: those on the node
// namespace's interfaces now, and EgressConfig.NodeAddrs.
func (e *Egress) NodeAddrs() []netip.Addr {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.nodeAddrs)
}

// SetPlatform replaces the platform CIDRs. The new denylist applies to every
// sandbox, running ones included, from the next packet on.
func (e *Egress) SetPlatform(p []netip.Prefix) error {
	e.mu.Lock()
	old := e.platform
	e.platform = slices.Clone(p)
	e.mu.Unlock()
	if err := e.reload(); err != nil {
		e.mu.Lock()
		e.platform = old
		e.mu.Unlock()
		return err
	}
	e.logger.Info("platform CIDRs replaced", "platform", p)
	return nil
}

// reload loads the denylist made of the table, the node's entries and the
// platform CIDRs. Reloads are serialized, so the last one loads the latest
// state.
func (e *Egress) reload() error {
	e.reloadMu.Lock()
	defer e.reloadMu.Unlock()
	return e.reloadLocked()
}

func (e *Egress) reloadLocked() error {
	e.mu.Lock()
	node := slices.Clone(e.node)
	for _, a := range e.extraNode {
		a = a.WithZone("").Unmap()
		node = append(node, Entry{Prefix: netip.PrefixFrom(a, a.BitLen()), Reason: ReasonNode})
	}
	list := Denylist(node, e.platform)
	e.mu.Unlock()
	if err := e.f.SetDenylist(list); err != nil {
		return err
	}
	e.mu.Lock()
	e.list = list
	e.mu.Unlock()
	return nil
}

// Denylist returns the denylist loaded last.
func (e *Egress) Denylist() []Entry {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.list)
}

// SandboxEgress is one sandbox's network with the filter attached.
type SandboxEgress struct {
	Net       *SandboxNet
	Resolvers []netip.Addr
	att       *Attachment
}

// Counters returns the packets the filter denied for this sandbox, by
// reason. Read them before Teardown.
func (s *SandboxEgress) Counters() (map[Reason]Count, error) {
	if s == nil || s.att == nil {
		return nil, nil
	}
	return s.att.Counters()
}

// Setup makes the network of sandbox id and attaches the filter to its
// veth before any packet can leave. On error nothing is left. It is Begin
// and Finish in one.
func (e *Egress) Setup(ctx context.Context, id string) (*SandboxEgress, error) {
	p, err := e.Begin(ctx, id)
	if err != nil {
		return nil, err
	}
	return e.Finish(ctx, p)
}

// PendingEgress is a sandbox network Begin made and Finish has not: its
// namespace exists, empty, and its resolvers are chosen.
type PendingEgress struct {
	Net       *SandboxNet
	Resolvers []netip.Addr
}

// Begin makes the empty namespace of sandbox id (Manager.Begin) and fixes
// its resolvers, so that the sandbox's spec and resolv.conf can be written
// and its runtime sandbox created while Finish makes the veth and attaches
// the filter. No packet can leave before Finish: the namespace has no link
// but loopback. Finish or TeardownID(ctx, id) must follow (Teardown takes
// the SandboxEgress that only Finish returns); Finish cleans up after
// itself when it fails.
func (e *Egress) Begin(ctx context.Context, id string) (*PendingEgress, error) {
	sn, err := e.m.Begin(ctx, id)
	if err != nil {
		return nil, err
	}
	return &PendingEgress{Net: sn, Resolvers: e.Resolvers()}, nil
}

// Finish makes the veth, addresses and routes of a network Begin made and
// attaches the filter to the veth before any packet can leave. On error
// nothing of the network is left.
func (e *Egress) Finish(ctx context.Context, p *PendingEgress) (*SandboxEgress, error) {
	if err := e.m.Plumb(p.Net); err != nil {
		return nil, err
	}
	sb, err := e.attach(p.Net, p.Resolvers)
	if err != nil {
		terr := e.m.Teardown(context.WithoutCancel(ctx), p.Net)
		return nil, errors.Join(err, terr)
	}
	return sb, nil
}

// Adopt attaches the filter again to the veth of a sandbox whose network
// was set up by an earlier Egress (an agent that restarted), so that it can
// send again. Call Sweep first, keeping id, so its pool link is reserved.
func (e *Egress) Adopt(id string) (*SandboxEgress, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	sn := &SandboxNet{ID: id, HostIfname: HostIfname(id)}
	h, err := netlink.NewHandleAt(e.m.hostNS, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink in node namespace: %w", err)
	}
	defer h.Close()
	l, err := h.LinkByName(sn.HostIfname)
	if err != nil {
		return nil, fmt.Errorf("find veth %s of sandbox %s: %w", sn.HostIfname, id, err)
	}
	sn.HostIfindex = l.Attrs().Index
	return e.attach(sn, e.Resolvers())
}

func (e *Egress) attach(sn *SandboxNet, res []netip.Addr) (*SandboxEgress, error) {
	var att *Attachment
	err := doInNS(e.m.hostNS, func() (err error) {
		att, err = e.f.Attach(sn.HostIfindex, SandboxConfig{Resolvers: res, LinkLocal: SandboxLinkLocal})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", sn.ID, err)
	}
	return &SandboxEgress{Net: sn, Resolvers: res, att: att}, nil
}

// Teardown removes the sandbox's network and then its filter. It is
// idempotent; TeardownID does the same for a network known only by id.
// Deleting the veth first detaches the filter with it, which makes closing
// the link afterwards nearly free (about 14 ms less than detaching a live
// link first).
func (e *Egress) Teardown(ctx context.Context, s *SandboxEgress) error {
	if s == nil {
		return nil
	}
	err := e.m.Teardown(ctx, s.Net)
	if s.att != nil {
		err = errors.Join(err, s.att.Close())
	}
	return err
}

// TeardownID removes the network of sandbox id, made by this or an
// earlier Egress.
func (e *Egress) TeardownID(ctx context.Context, id string) error {
	return e.m.Teardown(ctx, &SandboxNet{ID: id})
}

// Sweep removes every sandbox network not in keep (see Manager.Sweep).
func (e *Egress) Sweep(ctx context.Context, keep []string) ([]string, error) {
	return e.m.Sweep(ctx, keep)
}

// RemoveNAT removes the node's shared NAT and filter table (see
// Manager.RemoveNAT), for a node that stops hosting sandboxes.
func (e *Egress) RemoveNAT(ctx context.Context) error { return e.m.RemoveNAT(ctx) }

// ResolvConf returns the /etc/resolv.conf of a sandbox using resolvers.
// With none, the file names no server and lookups fail at once.
func ResolvConf(resolvers []netip.Addr) []byte {
	var b strings.Builder
	b.WriteString("# written by rodon agentd\n")
	for _, r := range resolvers {
		fmt.Fprintf(&b, "nameserver %s\n", r)
	}
	b.WriteString("options timeout:2 attempts:2\n")
	return []byte(b.String())
}
