package netpolicy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// plumb creates the veth pair of sn between the node namespace and the
// sandbox namespace at sn.NSPath, addresses and brings up both ends, and
// adds the sandbox's default routes. It fills in sn.HostIfindex.
func (m *Manager) plumb(sn *SandboxNet) (err error) {
	sbNS, err := netns.GetFromPath(sn.NSPath)
	if err != nil {
		return fmt.Errorf("open namespace %s: %w", sn.NSPath, err)
	}
	defer sbNS.Close()
	host, err := netlink.NewHandleAt(m.hostNS, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink in node namespace: %w", err)
	}
	defer host.Close()
	sb, err := netlink.NewHandleAt(sbNS, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink in sandbox namespace: %w", err)
	}
	defer sb.Close()

	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: sn.HostIfname},
		PeerName:      SandboxIfname,
		PeerNamespace: netlink.NsFd(sbNS),
	}
	if err := host.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s: %w", sn.HostIfname, err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, deleteLink(host, sn.HostIfname))
		}
	}()
	hl, err := host.LinkByName(sn.HostIfname)
	if err != nil {
		return fmt.Errorf("find veth %s: %w", sn.HostIfname, err)
	}
	sn.HostIfindex = hl.Attrs().Index
	// Not an IPv6 router on this link: the node still forwards (that is
	// the namespace-wide all.forwarding), but the link joins no router
	// groups or anycast addresses, which makes deleting it about 20 ms
	// faster.
	if err := doInNS(m.hostNS, func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/"+sn.HostIfname+"/forwarding", []byte("0\n"), 0o644)
	}); err != nil {
		return fmt.Errorf("configure veth %s: %w", sn.HostIfname, err)
	}
	if err := addAddrs(host, hl, netip.PrefixFrom(sn.Gateway4, sn.Addr4.Bits()), netip.PrefixFrom(sn.Gateway6, sn.Addr6.Bits())); err != nil {
		return err
	}
	if err := host.LinkSetUp(hl); err != nil {
		return fmt.Errorf("set %s up: %w", sn.HostIfname, err)
	}

	sl, err := sb.LinkByName(SandboxIfname)
	if err != nil {
		return fmt.Errorf("find %s in sandbox namespace: %w", SandboxIfname, err)
	}
	// eth0's only link-local address is SandboxLinkLocal, the one the
	// filter lets neighbour discovery come from: no address generated from
	// its MAC.
	if err := sb.LinkSetIP6AddrGenMode(sl, addrGenModeNone); err != nil {
		return fmt.Errorf("configure %s in sandbox namespace: %w", SandboxIfname, err)
	}
	if err := addAddrs(sb, sl, sn.Addr4, sn.Addr6, netip.PrefixFrom(SandboxLinkLocal, 64)); err != nil {
		return err
	}
	lo, err := sb.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo in sandbox namespace: %w", err)
	}
	for _, l := range []netlink.Link{lo, sl} {
		if err := sb.LinkSetUp(l); err != nil {
			return fmt.Errorf("set %s up in sandbox namespace: %w", l.Attrs().Name, err)
		}
	}
	for _, gw := range []netip.Addr{sn.Gateway4, sn.Gateway6} {
		r := &netlink.Route{LinkIndex: sl.Attrs().Index, Gw: net.IP(gw.AsSlice())}
		if err := sb.RouteAdd(r); err != nil {
			return fmt.Errorf("add default route via %v in sandbox namespace: %w", gw, err)
		}
	}
	return pinNeighbours(host, hl, sb, sl, sn)
}

// addrGenModeNone is IN6_ADDR_GEN_MODE_NONE: no IPv6 link-local address
// made from the MAC when the link comes up.
const addrGenModeNone = 1

// pinNeighbours gives both ends of a sandbox's veth permanent IPv6
// neighbour entries for each other: the node knows the sandbox's address
// and link-local address, the sandbox its gateway (runsc copies permanent
// entries into gVisor's netstack). So neither end ever resolves the other
// with neighbour discovery from a global source address, which the egress
// filter does not let pass (only from SandboxLinkLocal or ::). IPv4 needs
// nothing: ARP passes.
func pinNeighbours(host *netlink.Handle, hl netlink.Link, sb *netlink.Handle, sl netlink.Link, sn *SandboxNet) error {
	pin := func(h *netlink.Handle, l netlink.Link, mac net.HardwareAddr, a netip.Addr) error {
		n := &netlink.Neigh{LinkIndex: l.Attrs().Index, Family: netlink.FAMILY_V6, State: netlink.NUD_PERMANENT,
			IP: net.IP(a.AsSlice()), HardwareAddr: mac}
		if err := h.NeighSet(n); err != nil {
			return fmt.Errorf("add neighbour %v on %s: %w", a, l.Attrs().Name, err)
		}
		return nil
	}
	// The attributes read before the links were moved and brought up
	// carry the MACs, which do not change.
	hostMAC, sbMAC := hl.Attrs().HardwareAddr, sl.Attrs().HardwareAddr
	if len(hostMAC) == 0 || len(sbMAC) == 0 {
		return fmt.Errorf("veth %s: no MAC address to pin neighbours with", sn.HostIfname)
	}
	return errors.Join(
		pin(host, hl, sbMAC, sn.Addr6.Addr()),
		pin(host, hl, sbMAC, SandboxLinkLocal),
		pin(sb, sl, hostMAC, sn.Gateway6),
	)
}

// addAddrs adds prefixes to link; IPv6 ones without duplicate address
// detection so they are usable at once.
func addAddrs(h *netlink.Handle, link netlink.Link, prefixes ...netip.Prefix) error {
	for _, p := range prefixes {
		a := &netlink.Addr{IPNet: &net.IPNet{
			IP:   net.IP(p.Addr().AsSlice()),
			Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen()),
		}}
		if p.Addr().Is6() {
			a.Flags = unix.IFA_F_NODAD
		}
		if err := h.AddrAdd(link, a); err != nil {
			return fmt.Errorf("add address %v to %s: %w", p, link.Attrs().Name, err)
		}
	}
	return nil
}

// deleteVeth deletes the node-side veth name; the kernel deletes its peer.
// A missing link is not an error.
func (m *Manager) deleteVeth(name string) error {
	host, err := netlink.NewHandleAt(m.hostNS, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink in node namespace: %w", err)
	}
	defer host.Close()
	return deleteLink(host, name)
}

func deleteLink(h *netlink.Handle, name string) error {
	l, err := h.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("find veth %s: %w", name, err)
	}
	if err := h.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete veth %s: %w", name, err)
	}
	return nil
}
