package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Sweep removes what earlier runs left behind, for example after agentd was
// killed: namespaces named rodon-<id> in NSDir and veths named rv<hash> in
// the node namespace whose sandbox ID is not in keep. The pool links of the
// kept sandboxes found on their veths are reserved, so call Sweep once at
// start-up before any Setup. It returns the names of the namespaces and
// links it removed, and keeps going past errors, returning them joined.
// The shared masquerade rules are rewritten by the next Setup.
func (m *Manager) Sweep(ctx context.Context, keep []string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sweep sandbox networks: %w", err)
	}
	kept := make(map[string]string, len(keep)) // host ifname -> id
	keepNS := make(map[string]bool, len(keep))
	for _, id := range keep {
		kept[HostIfname(id)] = id
		keepNS[NSName(id)] = true
	}
	var removed []string
	var errs []error

	names, err := listNS(m.cfg.NSDir)
	if err != nil {
		errs = append(errs, err)
	}
	for _, name := range names {
		if keepNS[name] {
			continue
		}
		if err := removeNS(filepath.Join(m.cfg.NSDir, name)); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, name)
	}

	host, err := netlink.NewHandleAt(m.hostNS, unix.NETLINK_ROUTE)
	if err != nil {
		errs = append(errs, fmt.Errorf("netlink in node namespace: %w", err))
		return removed, sweepErr(errs)
	}
	defer host.Close()
	links, err := host.LinkList()
	if err != nil {
		errs = append(errs, fmt.Errorf("list links in node namespace: %w", err))
	}
	for _, l := range links {
		name := l.Attrs().Name
		if l.Type() != "veth" || !isHostIfname(name) {
			continue
		}
		if id, ok := kept[name]; ok {
			if err := m.reserve(host, l, id); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if err := host.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
			errs = append(errs, fmt.Errorf("delete veth %s: %w", name, err))
			continue
		}
		removed = append(removed, name)
	}
	if len(removed) > 0 {
		m.logger.Info("removed leftover sandbox networks", "removed", strings.Join(removed, ","))
	}
	return removed, sweepErr(errs)
}

// reserve marks the pool link of the addresses on a kept sandbox's veth.
func (m *Manager) reserve(h *netlink.Handle, l netlink.Link, id string) error {
	addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("list addresses of veth %s: %w", l.Attrs().Name, err)
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || ip.IsLinkLocalUnicast() {
			continue
		}
		if err := m.pool.Reserve(id, ip.Unmap()); err != nil {
			return err
		}
	}
	return nil
}

func sweepErr(errs []error) error {
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sweep sandbox networks: %w", err)
	}
	return nil
}
