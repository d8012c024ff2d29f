package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"

	"github.com/rodon-compute/rodon/internal/cli"
	"github.com/rodon-compute/rodon/netpolicy"
)

// networkFlags are the sandbox network flags of `agentd run` and `agentd
// serve`.
type networkFlags struct {
	mode         string
	nodeNetns    string
	netnsDir     string
	dns          string
	nodeAddrs    string
	platform     string
	platformFile string
	pool4, pool6 string
}

func (f *networkFlags) register(fs *flag.FlagSet) {
	d := netpolicy.DefaultConfig()
	fs.StringVar(&f.mode, "network", "egress", "sandbox network: egress (own namespace, public internet only) or none (loopback only)")
	fs.StringVar(&f.nodeNetns, "node-netns", "", "network namespace (path) holding the sandboxes' veths, NAT and uplink (default: agentd's own)")
	fs.StringVar(&f.netnsDir, "netns-dir", d.NSDir, "directory of the sandboxes' named network namespaces")
	fs.StringVar(&f.dns, "dns", "auto", "DNS resolvers of sandboxes, comma-separated IPs; auto: the non-loopback nameservers of /etc/resolv.conf; none: no DNS")
	fs.StringVar(&f.nodeAddrs, "node-addrs", "", "more addresses of this node to deny, comma-separated (the node namespace's own are always denied)")
	fs.StringVar(&f.platform, "platform-cidrs", "", "platform CIDRs to deny (scheduler, gateway, databases), comma-separated")
	fs.StringVar(&f.platformFile, "platform-file", "", "file of platform CIDRs to deny, one per line (# comments); agentd serve re-reads it on SIGHUP")
	fs.StringVar(&f.pool4, "pool4", d.Pool4.String(), "IPv4 pool of sandbox links")
	fs.StringVar(&f.pool6, "pool6", d.Pool6.String(), "IPv6 pool of sandbox links")
}

// egressConfig checks the flags; ok is false for --network none.
func (f *networkFlags) egressConfig() (cfg netpolicy.EgressConfig, ok bool, err error) {
	switch f.mode {
	case "none":
		return cfg, false, nil
	case "egress":
	default:
		return cfg, false, fmt.Errorf("%w: --network %q: want egress or none", cli.ErrUsage, f.mode)
	}
	cfg.Net = netpolicy.DefaultConfig()
	cfg.Net.HostNS = f.nodeNetns
	cfg.Net.NSDir = f.netnsDir
	if cfg.Net.Pool4, err = netip.ParsePrefix(f.pool4); err != nil || !cfg.Net.Pool4.Addr().Is4() {
		return cfg, false, fmt.Errorf("%w: --pool4 %q: want an IPv4 CIDR", cli.ErrUsage, f.pool4)
	}
	if cfg.Net.Pool6, err = netip.ParsePrefix(f.pool6); err != nil || !cfg.Net.Pool6.Addr().Is6() {
		return cfg, false, fmt.Errorf("%w: --pool6 %q: want an IPv6 CIDR", cli.ErrUsage, f.pool6)
	}
	switch f.dns {
	case "none":
	case "auto":
		cfg.Resolvers = hostResolvers("/etc/resolv.conf")
	default:
		if cfg.Resolvers, err = parseAddrs(f.dns); err != nil {
			return cfg, false, fmt.Errorf("%w: --dns: %v", cli.ErrUsage, err)
		}
	}
	if len(cfg.Resolvers) > netpolicy.MaxResolvers {
		cfg.Resolvers = cfg.Resolvers[:netpolicy.MaxResolvers]
	}
	if cfg.NodeAddrs, err = parseAddrs(f.nodeAddrs); err != nil {
		return cfg, false, fmt.Errorf("%w: --node-addrs: %v", cli.ErrUsage, err)
	}
	if cfg.Platform, err = f.platformCIDRs(); err != nil {
		return cfg, false, fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	return cfg, true, nil
}

// platformCIDRs returns the CIDRs of --platform-cidrs and --platform-file.
func (f *networkFlags) platformCIDRs() ([]netip.Prefix, error) {
	out, err := parsePrefixes(strings.Split(f.platform, ","), "--platform-cidrs")
	if err != nil {
		return nil, err
	}
	if f.platformFile == "" {
		return out, nil
	}
	b, err := os.ReadFile(f.platformFile)
	if err != nil {
		return nil, fmt.Errorf("--platform-file: %w", err)
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		lines = append(lines, line)
	}
	more, err := parsePrefixes(lines, f.platformFile)
	if err != nil {
		return nil, err
	}
	return append(out, more...), nil
}

func parsePrefixes(items []string, where string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, s := range items {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			if a, aerr := netip.ParseAddr(s); aerr == nil {
				p = netip.PrefixFrom(a, a.BitLen())
			} else {
				return nil, fmt.Errorf("%s: item %d %q: want a CIDR such as 10.1.0.0/16 or an address", where, i+1, s)
			}
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func parseAddrs(s string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		a, err := netip.ParseAddr(item)
		if err != nil {
			return nil, fmt.Errorf("%q: want an IP address", item)
		}
		out = append(out, a)
	}
	return out, nil
}

// hostResolvers returns the nameservers of a resolv.conf that a sandbox
// could reach: not loopback (a stub resolver on the node is not the
// sandbox's loopback).
func hostResolvers(file string) []netip.Addr {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	var out []netip.Addr
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		if a, err := netip.ParseAddr(f[1]); err == nil && !a.IsLoopback() && !a.IsUnspecified() {
			out = append(out, a.WithZone(""))
		}
	}
	return out
}

// openEgress loads the node's sandbox networking per the flags; nil when
// --network none.
func (f *networkFlags) openEgress(logger *slog.Logger) (*netpolicy.Egress, error) {
	cfg, ok, err := f.egressConfig()
	if err != nil || !ok {
		return nil, err
	}
	e, err := netpolicy.NewEgress(cfg, logger)
	if err != nil {
		return nil, fmt.Errorf("egress filter: %w", err)
	}
	return e, nil
}
