package agentd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

// PlatformSource is the scheduler's list of control-plane addresses
// (scheduler/client implements it: GET /v1/agent/platform).
type PlatformSource interface {
	Platform(ctx context.Context) (cluster.Platform, error)
}

// PlatformSink loads the platform part of the egress denylist
// (netpolicy.Egress.SetPlatform): every sandbox, running ones included, is
// denied the new list from the next packet on.
type PlatformSink interface {
	SetPlatform(p []netip.Prefix) error
}

// ControlPlaneConfig configures a ControlPlane.
type ControlPlaneConfig struct {
	// SchedulerHosts are the hosts of the agent's scheduler URLs: IP
	// literals, or names resolved again at every refresh.
	SchedulerHosts []string
	// Pools are the node's sandbox address pools: a sandbox may not reach
	// another.
	Pools []netip.Prefix
	// Static are the operator's platform CIDRs (--platform-cidrs and
	// --platform-file); SetStatic replaces them.
	Static []netip.Prefix
	// Refresh is the interval between fetches of the scheduler's list and
	// lookups of the scheduler hosts.
	Refresh time.Duration
	// NodeAddrs are the node's own addresses, which the denylist holds
	// already (reason node): left out of the platform list so that their
	// denials keep saying node.
	NodeAddrs []netip.Addr
	// SeenTTL is how long the address a gateway connected from stays
	// denied after its last request.
	SeenTTL time.Duration
	// Lookup resolves a host name; nil is the system resolver.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
}

// DefaultControlPlaneConfig returns the defaults of `agentd serve`.
func DefaultControlPlaneConfig() ControlPlaneConfig {
	return ControlPlaneConfig{Refresh: 5 * time.Second, SeenTTL: 24 * time.Hour}
}

// Bounds of the control-plane list.
const (
	// MaxPlatformEntries bounds the prefixes loaded into the denylist
	// (its trie holds 16384 entries, the fixed ranges and node
	// addresses included). A longer list is refused and the previous one
	// kept.
	MaxPlatformEntries = 8192
	// maxSeenGateways bounds the gateway source addresses remembered; the
	// least recently seen gives way.
	maxSeenGateways = 64
	// lookupTimeout bounds the resolution of one scheduler host.
	lookupTimeout = 2 * time.Second
)

// ControlPlane keeps the platform part of a node's egress denylist: the
// addresses of everything a sandbox must never reach besides the fixed
// ranges (SPEC, "Sandboxes never reach the control plane"). It merges
//
//   - the scheduler URLs' hosts, resolved (and resolved again at every
//     refresh; a failed lookup keeps the last addresses);
//   - every member, node and gateway the scheduler knows (PlatformSource,
//     fetched every Refresh; a failed fetch keeps the last list);
//   - the source addresses of gateways that connected to this agent
//     (SeenGateway);
//   - the node's own sandbox pools;
//   - the operator's static CIDRs;
//
// and loads the union into the PlatformSink whenever it changes, logging
// what changed. Loopback and unspecified addresses and the node's own are
// left out: the denylist holds them already, with a more telling reason.
// Denials of these addresses count under
// netpolicy.ReasonPlatform.
//
// Call Load before the first sandbox starts, then Run. Its methods are
// safe for concurrent use.
type ControlPlane struct {
	cfg    ControlPlaneConfig
	src    PlatformSource
	sink   PlatformSink
	logger *slog.Logger
	// kick asks Run to reload now (a gateway seen for the first time).
	kick chan struct{}
	// fetched is closed at the first successful fetch from src.
	fetched     chan struct{}
	fetchedOnce sync.Once

	mu       sync.Mutex
	static   []netip.Prefix
	resolved map[string][]netip.Addr
	remote   []cluster.PlatformAddr
	seen     map[netip.Addr]seenGateway
	// loaded is what the sink holds, with where each prefix came from;
	// didLoad is set once the sink was loaded.
	loaded  map[netip.Prefix][]string
	didLoad bool
}

type seenGateway struct {
	name string
	last time.Time
}

// NewControlPlane wires a ControlPlane; it loads and starts nothing.
func NewControlPlane(cfg ControlPlaneConfig, src PlatformSource, sink PlatformSink, logger *slog.Logger) (*ControlPlane, error) {
	d := DefaultControlPlaneConfig()
	if cfg.Refresh <= 0 {
		cfg.Refresh = d.Refresh
	}
	if cfg.SeenTTL <= 0 {
		cfg.SeenTTL = d.SeenTTL
	}
	cfg.NodeAddrs = slices.Clone(cfg.NodeAddrs)
	for i, a := range cfg.NodeAddrs {
		cfg.NodeAddrs[i] = a.WithZone("").Unmap()
	}
	if cfg.Lookup == nil {
		cfg.Lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if sink == nil {
		return nil, errors.New("control plane: no egress filter to load")
	}
	return &ControlPlane{
		cfg: cfg, src: src, sink: sink, logger: logger.With("component", "control_plane"),
		kick: make(chan struct{}, 1), fetched: make(chan struct{}),
		static: slices.Clone(cfg.Static), resolved: map[string][]netip.Addr{},
		seen: map[netip.Addr]seenGateway{}, loaded: map[netip.Prefix][]string{},
	}, nil
}

// Load resolves the scheduler hosts and loads what is known without the
// scheduler's list: the scheduler URLs, the pools and the static CIDRs.
func (c *ControlPlane) Load(ctx context.Context) error {
	c.resolve(ctx)
	return c.reload()
}

// Run fetches the scheduler's list at once and then every Refresh,
// resolves the scheduler hosts again, and reloads the denylist when
// anything changed, until ctx ends. It returns nil on cancellation.
func (c *ControlPlane) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.Refresh)
	defer t.Stop()
	c.refresh(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			c.refresh(ctx)
		case <-c.kick:
			// A new gateway address: load it now, fetch on schedule.
			if err := c.reload(); err != nil {
				c.logger.Error("load the control-plane denylist; keeping the previous one", "error", err)
			}
		}
	}
}

func (c *ControlPlane) refresh(ctx context.Context) {
	c.resolve(ctx)
	if c.src != nil {
		fctx, cancel := context.WithTimeout(ctx, max(c.cfg.Refresh, 10*time.Second))
		p, err := c.src.Platform(fctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				c.logger.Warn("fetch the control-plane addresses from the scheduler; keeping the last list", "error", err)
			}
		} else {
			c.mu.Lock()
			c.remote = p.Addresses
			c.mu.Unlock()
			c.fetchedOnce.Do(func() { close(c.fetched) })
		}
	}
	if err := c.reload(); err != nil {
		c.logger.Error("load the control-plane denylist; keeping the previous one", "error", err)
	}
}

// resolve looks the scheduler hosts up; a failed lookup keeps the last
// addresses of its host.
func (c *ControlPlane) resolve(ctx context.Context) {
	for _, h := range c.cfg.SchedulerHosts {
		if _, err := netip.ParseAddr(h); err == nil {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		addrs, err := c.cfg.Lookup(lctx, h)
		cancel()
		if err != nil || len(addrs) == 0 {
			if ctx.Err() == nil {
				c.logger.Warn("resolve scheduler host; keeping its last addresses", "host", h, "error", err)
			}
			continue
		}
		c.mu.Lock()
		c.resolved[h] = addrs
		c.mu.Unlock()
	}
}

// WaitFetched returns once the scheduler's list was fetched once, or
// ctx's error.
func (c *ControlPlane) WaitFetched(ctx context.Context) error {
	select {
	case <-c.fetched:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SetStatic replaces the operator's CIDRs and reloads the denylist.
func (c *ControlPlane) SetStatic(p []netip.Prefix) error {
	c.mu.Lock()
	old := c.static
	c.static = slices.Clone(p)
	c.mu.Unlock()
	if err := c.reload(); err != nil {
		c.mu.Lock()
		c.static = old
		c.mu.Unlock()
		return err
	}
	return nil
}

// SeenGateway records that gateway name connected from a. A new address
// is loaded within moments (Run reloads); a known one only has its time
// renewed. It does not block.
func (c *ControlPlane) SeenGateway(name string, a netip.Addr, now time.Time) {
	a = a.WithZone("").Unmap()
	if !a.IsValid() || skipAddr(a) {
		return
	}
	c.mu.Lock()
	_, known := c.seen[a]
	c.seen[a] = seenGateway{name: name, last: now}
	if !known && len(c.seen) > maxSeenGateways {
		oldest := a
		for k, v := range c.seen {
			if v.last.Before(c.seen[oldest].last) {
				oldest = k
			}
		}
		delete(c.seen, oldest)
	}
	c.mu.Unlock()
	if !known {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
}

// Prefixes returns the prefixes loaded now, sorted.
func (c *ControlPlane) Prefixes() []netip.Prefix {
	c.mu.Lock()
	defer c.mu.Unlock()
	return sortedPrefixes(c.loaded)
}

// skipAddr reports addresses the fixed ranges deny already with a more
// telling reason.
func skipAddr(a netip.Addr) bool { return a.IsLoopback() || a.IsUnspecified() }

// entries merges every source into prefixes and where they come from.
// The caller holds mu.
func (c *ControlPlane) entries(now time.Time) map[netip.Prefix][]string {
	out := map[netip.Prefix][]string{}
	addAddr := func(a netip.Addr, src string) {
		a = a.WithZone("").Unmap()
		if a.IsValid() && !skipAddr(a) && !slices.Contains(c.cfg.NodeAddrs, a) {
			p := netip.PrefixFrom(a, a.BitLen())
			out[p] = append(out[p], src)
		}
	}
	for _, h := range c.cfg.SchedulerHosts {
		if a, err := netip.ParseAddr(h); err == nil {
			addAddr(a, "scheduler_url")
		}
		for _, a := range c.resolved[h] {
			addAddr(a, "scheduler_url "+h)
		}
	}
	for _, pa := range c.remote {
		addAddr(pa.Addr, string(pa.Kind)+" "+pa.Name)
	}
	for a, g := range c.seen {
		if now.Sub(g.last) >= c.cfg.SeenTTL {
			delete(c.seen, a)
			continue
		}
		addAddr(a, "gateway_seen "+g.name)
	}
	for _, p := range c.cfg.Pools {
		out[p.Masked()] = append(out[p.Masked()], "sandbox_pool")
	}
	for _, p := range c.static {
		out[p.Masked()] = append(out[p.Masked()], "platform_cidrs")
	}
	return out
}

// reload loads the merged list into the sink if its prefixes changed.
func (c *ControlPlane) reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := c.entries(time.Now())
	if len(next) > MaxPlatformEntries {
		return fmt.Errorf("control plane: %d addresses and CIDRs, at most %d", len(next), MaxPlatformEntries)
	}
	added, removed := diffPrefixes(c.loaded, next)
	if len(added) == 0 && len(removed) == 0 && c.didLoad {
		c.loaded = next // the sources may differ; the prefixes do not
		return nil
	}
	if err := c.sink.SetPlatform(sortedPrefixes(next)); err != nil {
		return fmt.Errorf("control plane: %w", err)
	}
	c.logger.Info("control-plane denylist changed", "entries", len(next),
		"added", describe(added, next), "removed", describe(removed, c.loaded))
	c.loaded, c.didLoad = next, true
	return nil
}

func diffPrefixes(old, next map[netip.Prefix][]string) (added, removed []netip.Prefix) {
	for p := range next {
		if _, ok := old[p]; !ok {
			added = append(added, p)
		}
	}
	for p := range old {
		if _, ok := next[p]; !ok {
			removed = append(removed, p)
		}
	}
	return sortPrefixes(added), sortPrefixes(removed)
}

// maxDescribed bounds the prefixes one log line names.
const maxDescribed = 32

// describe names prefixes with their sources, as "11.0.0.1/32 (member
// m1)", at most maxDescribed of them.
func describe(ps []netip.Prefix, src map[netip.Prefix][]string) []string {
	out := make([]string, 0, min(len(ps), maxDescribed+1))
	for i, p := range ps {
		if i == maxDescribed {
			out = append(out, fmt.Sprintf("and %d more", len(ps)-i))
			break
		}
		out = append(out, p.String()+" ("+strings.Join(slices.Compact(slices.Sorted(slices.Values(src[p]))), ", ")+")")
	}
	return out
}

func sortedPrefixes(m map[netip.Prefix][]string) []netip.Prefix {
	return sortPrefixes(slices.Collect(maps.Keys(m)))
}

func sortPrefixes(ps []netip.Prefix) []netip.Prefix {
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
	})
	return ps
}
