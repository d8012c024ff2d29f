package agentd

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/netpolicy"
	"github.com/rodon-compute/rodon/oci"
)

// setupNetwork begins the sandbox's network, when the runtime has one and
// the step may use it, and returns the spec options that put the sandbox in
// it and the function that finishes it. The namespace exists when it
// returns, empty; finish makes the veth and attaches the egress filter, and
// may run while the sandbox is created: runsc reads the namespace's links
// when the sandbox starts. finish must return before the sandbox starts,
// and before it is destroyed (a failed finish leaves no network behind; an
// error here leaves the empty namespace to the sandbox's clean-up). Every
// sandbox gets a resolv.conf: the runtime's resolvers, or none.
func (s *Sandbox) setupNetwork(ctx context.Context) (opts []oci.SpecOpt, finish func() error, err error) {
	var resolvers []netip.Addr
	finish = func() error { return nil }
	if n := s.rt.cfg.Network; n != nil && !s.step.NoInternet {
		s.hasNet = true
		p, err := n.Begin(ctx, s.sandboxID())
		if err != nil {
			return nil, nil, fmt.Errorf("sandbox network: %w", err)
		}
		finish = func() error {
			sn, err := n.Finish(ctx, p)
			if err != nil {
				return fmt.Errorf("sandbox network: %w", err)
			}
			s.net = sn
			return nil
		}
		resolvers = p.Resolvers
		opts = append(opts, oci.WithNetNS(p.Net.NSPath))
	}
	rc := filepath.Join(s.ctlDir, "resolv.conf")
	if err := os.WriteFile(rc, netpolicy.ResolvConf(resolvers), 0o644); err != nil {
		// The namespace is empty; the caller's clean-up removes it.
		return nil, nil, fmt.Errorf("write resolv.conf: %w", err)
	}
	return append(opts, oci.WithResolvConf(rc)), finish, nil
}

// sandboxID is the sandbox's id, also before its container exists.
func (s *Sandbox) sandboxID() string { return s.id }

// adoptNetwork attaches the egress filter again to the network of a
// sandbox found after a restart.
func (s *Sandbox) adoptNetwork() error {
	n := s.rt.cfg.Network
	if !s.hasNet || s.net != nil {
		return nil
	}
	if n == nil {
		return errors.New("the sandbox has a network but this agent runs without one")
	}
	sn, err := n.Adopt(s.ID())
	if err != nil {
		return fmt.Errorf("adopt sandbox network: %w", err)
	}
	s.net = sn
	return nil
}

// teardownNetwork removes the sandbox's network, its filter first.
func (s *Sandbox) teardownNetwork(ctx context.Context) error {
	n := s.rt.cfg.Network
	switch {
	case s.net != nil:
		if err := n.Teardown(ctx, s.net); err != nil {
			return err
		}
		s.net = nil
	case s.hasNet && n != nil:
		return n.TeardownID(ctx, s.sandboxID())
	}
	return nil
}

// Denied returns what the egress filter denied for this sandbox so far,
// by reason; nil for a sandbox without a network.
func (s *Sandbox) Denied() (map[netpolicy.Reason]netpolicy.Count, error) {
	return s.net.Counters()
}

// SweepNetworks removes sandbox networks that no sandbox in containerd
// owns (left by an agent that was killed between making a network and its
// container, or after its container was deleted). Networks of sandboxes
// that still exist, on any node sharing this containerd, are kept for
// their owners. Call it at start-up, before the first Create.
func (r *Runtime) SweepNetworks(ctx context.Context) ([]string, error) {
	if r.cfg.Network == nil {
		return nil, nil
	}
	cs, err := r.client.Containers(r.nsCtx(ctx), fmt.Sprintf("labels.%q==true", LabelManaged))
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	keep := make([]string, 0, len(cs))
	for _, c := range cs {
		keep = append(keep, c.ID())
	}
	return r.cfg.Network.Sweep(ctx, keep)
}

// deniedTracker turns the filter's counters into step events: one event
// per reason whenever its count grew.
type deniedTracker struct {
	seen map[netpolicy.Reason]uint64
}

// deniedEvent is one reason's event and how many packets it adds.
type deniedEvent struct {
	event  cluster.Event
	reason netpolicy.Reason
	delta  uint64
}

// events returns an event for each reason whose count grew since the last
// call, in reason order.
func (t *deniedTracker) events(c map[netpolicy.Reason]netpolicy.Count, now time.Time) []deniedEvent {
	if t.seen == nil {
		t.seen = make(map[netpolicy.Reason]uint64)
	}
	reasons := make([]netpolicy.Reason, 0, len(c))
	for r := range c {
		reasons = append(reasons, r)
	}
	slices.Sort(reasons)
	var out []deniedEvent
	for _, r := range reasons {
		n := c[r]
		if n.Packets <= t.seen[r] {
			continue
		}
		out = append(out, deniedEvent{
			event:  deniedEventOf(r, n, now),
			reason: r,
			delta:  n.Packets - t.seen[r],
		})
		t.seen[r] = n.Packets
	}
	return out
}

// deniedEventOf is the egress event of reason r's count c: its payload,
// and its message for people.
func deniedEventOf(r netpolicy.Reason, c netpolicy.Count, now time.Time) cluster.Event {
	eg := &api.Egress{Reason: r.String(), Destination: deniedDestination(c), Packets: c.Packets}
	if c.Protocol != 0 {
		eg.Protocol = c.Protocol.String()
	}
	return cluster.Event{Time: now, Kind: cluster.EventEgressDenied, Message: DeniedMessage(r, c), Egress: eg}
}

// deniedDestination is the last denied destination, without a port when
// it had none.
func deniedDestination(c netpolicy.Count) string {
	if !c.Last.IsValid() {
		return ""
	}
	if c.Last.Port() == 0 {
		return c.Last.Addr().String()
	}
	return c.Last.String()
}

// DeniedMessage is the text of an egress event, such as
// "egress denied: 169.254.169.254:80, metadata, 3 packets".
func DeniedMessage(r netpolicy.Reason, c netpolicy.Count) string {
	dst := deniedDestination(c)
	unit := "packets"
	if c.Packets == 1 {
		unit = "packet"
	}
	return fmt.Sprintf("egress denied: %s, %s, %d %s", dst, r, c.Packets, unit)
}

// RemoveNAT removes the node's shared NAT and filter table; a no-op
// without a network.
func (r *Runtime) RemoveNAT(ctx context.Context) error {
	if r.cfg.Network == nil {
		return nil
	}
	return r.cfg.Network.RemoveNAT(ctx)
}
