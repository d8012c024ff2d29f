package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"
)

// Registrar records a gateway's addresses with the scheduler (PUT
// /v1/gateways/{name}), which hands them to every node agent to deny to
// sandboxes. *client.Client implements it.
type Registrar interface {
	RegisterGateway(ctx context.Context, name string, addrs []netip.Addr) error
}

// registerLoop registers the gateway's addresses at once and then every
// RegisterInterval until ctx ends. A failure is logged and tried again
// sooner, with backoff up to the interval; it never stops the gateway.
func (g *Gateway) registerLoop(ctx context.Context, ln net.Addr) {
	backoff := time.Second
	for {
		wait := g.cfg.RegisterInterval
		addrs, err := g.registerOnce(ctx, ln)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			wait = min(backoff, g.cfg.RegisterInterval)
			backoff *= 2
			g.log.Warn("register the gateway's addresses with the scheduler", "error", err, "retry_in", wait.String())
		default:
			backoff = time.Second
			g.log.Debug("gateway addresses registered", "name", g.cfg.Name, "addresses", addrs)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// registerOnce registers the addresses of the listener at ln and returns
// them.
func (g *Gateway) registerOnce(ctx context.Context, ln net.Addr) ([]netip.Addr, error) {
	addrs, err := listenAddrs(ln, net.InterfaceAddrs)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := g.cfg.Registrar.RegisterGateway(ctx, g.cfg.Name, addrs); err != nil {
		return nil, fmt.Errorf("register gateway %s at %v: %w", g.cfg.Name, addrs, err)
	}
	return addrs, nil
}

// listenAddrs are the addresses a listener at ln is reached at: its IP
// when it is bound to one, else every address of the host's interfaces
// (from ifaceAddrs) except loopback and link-local ones.
func listenAddrs(ln net.Addr, ifaceAddrs func() ([]net.Addr, error)) ([]netip.Addr, error) {
	ta, ok := ln.(*net.TCPAddr)
	if !ok {
		return nil, fmt.Errorf("listener address %v is not TCP", ln)
	}
	ip := ta.AddrPort().Addr().Unmap()
	if !ip.IsUnspecified() {
		return []netip.Addr{ip}, nil
	}
	ifaddrs, err := ifaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list the host's addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range ifaddrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsMulticast() || ip.IsUnspecified() {
			continue
		}
		out = append(out, ip)
	}
	if len(out) == 0 {
		return nil, errors.New("the host has no address but loopback and link-local ones to register")
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out), nil
}
