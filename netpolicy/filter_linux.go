package netpolicy

import (
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

const cfgNoInternet = 1 // CFG_NO_INTERNET in bpf/egress.c

// Filter is the loaded egress program and its maps, shared by every sandbox
// of one network namespace (the node's host namespace). Its methods are safe
// for concurrent use. Close it after closing its attachments.
type Filter struct {
	logger    *slog.Logger
	objs      egressObjects
	innerSpec *ebpf.MapSpec

	mu       sync.Mutex
	loaded   bool                // a denylist is in deny_outer
	attached map[int]*Attachment // by host-side ifindex
}

// NewFilter loads the egress program and its maps into the kernel (about
// 70 ms). No denylist is loaded yet: call SetDenylist before Attach.
func NewFilter(logger *slog.Logger) (*Filter, error) {
	spec, err := loadEgress()
	if err != nil {
		return nil, fmt.Errorf("load egress filter spec: %w", err)
	}
	f := &Filter{
		logger:    logger.With("component", "egress_filter"),
		innerSpec: spec.Maps[egressMapDenyOuter].InnerMap,
		attached:  make(map[int]*Attachment),
	}
	if f.innerSpec == nil {
		return nil, fmt.Errorf("load egress filter: %s has no inner map", egressMapDenyOuter)
	}
	if err := spec.LoadAndAssign(&f.objs, nil); err != nil {
		return nil, fmt.Errorf("load egress filter into the kernel (needs root and BPF): %w", err)
	}
	return f, nil
}

// Close releases the program and maps. Attachments still open keep the
// program running until they are closed.
func (f *Filter) Close() error {
	return f.objs.Close()
}

// SetDenylist replaces the whole denylist atomically: a new trie is filled and
// swapped in, so each packet sees the old or the new list. For a prefix listed
// twice the later entry wins.
func (f *Filter) SetDenylist(entries []Entry) error {
	inner, err := ebpf.NewMap(f.innerSpec)
	if err != nil {
		return fmt.Errorf("create denylist trie: %w", err)
	}
	defer inner.Close() // deny_outer holds its own reference
	for _, e := range entries {
		if e.Reason > maxReason || e.Embed > maxEmbedding {
			return fmt.Errorf("denylist entry %v: invalid reason %d or embedding %d", e.Prefix, e.Reason, e.Embed)
		}
		k, err := denyKey(e.Prefix)
		if err != nil {
			return fmt.Errorf("denylist entry: %w", err)
		}
		if err := inner.Put(k, denyValue(e)); err != nil {
			return fmt.Errorf("add %v to denylist: %w", e.Prefix, err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.objs.DenyOuter.Put(uint32(0), inner); err != nil {
		return fmt.Errorf("swap denylist: %w", err)
	}
	f.loaded = true
	f.logger.Info("egress denylist loaded", "entries", len(entries))
	return nil
}

// Attach configures and attaches the filter at TCX ingress of the host-side
// veth ifindex (resolved by the caller in the Filter's namespace; the calling
// thread must be in that namespace), ahead of any other TCX program. The
// configuration is written before the program is attached, so the first
// packet is already filtered. The caller closes the Attachment.
func (f *Filter) Attach(ifindex int, cfg SandboxConfig) (*Attachment, error) {
	val, err := sandboxCfgValue(cfg)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.loaded {
		return nil, ErrNoDenylist
	}
	if _, ok := f.attached[ifindex]; ok {
		return nil, fmt.Errorf("attach egress filter to ifindex %d: %w", ifindex, ErrAttached)
	}
	key := uint32(ifindex)
	if err := f.objs.SandboxCfgs.Put(key, val); err != nil {
		return nil, fmt.Errorf("configure egress filter for ifindex %d: %w", ifindex, err)
	}
	a := &Attachment{f: f, ifindex: ifindex}
	a.clearCounters() // a reused ifindex starts from zero
	l, err := link.AttachTCX(link.TCXOptions{
		Interface: ifindex,
		Program:   f.objs.EgressFilter,
		Attach:    ebpf.AttachTCXIngress,
		// First in the chain: a program before us returning TCX_PASS would
		// skip the filter.
		Anchor: link.Head(),
	})
	if err != nil {
		_ = f.objs.SandboxCfgs.Delete(key)
		return nil, fmt.Errorf("attach egress filter to ifindex %d: %w", ifindex, err)
	}
	a.link = l
	f.attached[ifindex] = a
	return a, nil
}

func sandboxCfgValue(cfg SandboxConfig) (egressSandboxCfg, error) {
	var v egressSandboxCfg
	if len(cfg.Resolvers) > MaxResolvers {
		return v, fmt.Errorf("egress filter: %d resolvers, at most %d", len(cfg.Resolvers), MaxResolvers)
	}
	if cfg.NoInternet {
		v.Flags |= cfgNoInternet
	}
	for i, r := range cfg.Resolvers {
		if !r.IsValid() {
			return v, fmt.Errorf("egress filter: invalid resolver address %v", r)
		}
		v.Resolvers[i] = r.As16() // IPv4 as ::ffff:a.b.c.d
	}
	v.N_resolvers = uint32(len(cfg.Resolvers))
	if cfg.LinkLocal.IsValid() {
		if !cfg.LinkLocal.Is6() || !cfg.LinkLocal.IsLinkLocalUnicast() {
			return v, fmt.Errorf("egress filter: %v is not an IPv6 link-local address", cfg.LinkLocal)
		}
		v.LinkLocal = cfg.LinkLocal.WithZone("").As16()
	}
	return v, nil
}

// addrFrom16 turns a key address back into an IPv4 or IPv6 address.
func addrFrom16(b [16]byte) netip.Addr {
	return netip.AddrFrom16(b).Unmap()
}
