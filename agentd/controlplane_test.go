package agentd

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/cluster"
)

// fakePlatform is the scheduler's platform list: set it, or make it fail.
type fakePlatform struct {
	mu    sync.Mutex
	p     cluster.Platform
	err   error
	calls int
}

func (f *fakePlatform) Platform(context.Context) (cluster.Platform, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.p, f.err
}

func (f *fakePlatform) set(err error, addrs ...cluster.PlatformAddr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.p.Index++
	f.p.Addresses, f.err = addrs, err
}

// fakeSink records what was loaded into the egress filter.
type fakeSink struct {
	mu    sync.Mutex
	loads [][]netip.Prefix
	err   error
}

func (s *fakeSink) SetPlatform(p []netip.Prefix) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.loads = append(s.loads, p)
	return nil
}

func (s *fakeSink) last() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.loads) == 0 {
		return nil
	}
	var out []string
	for _, p := range s.loads[len(s.loads)-1] {
		out = append(out, p.String())
	}
	return out
}

func (s *fakeSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.loads)
}

func pfx(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		out = append(out, netip.MustParsePrefix(x))
	}
	return out
}

func paddr(kind cluster.PlatformKind, name, a string) cluster.PlatformAddr {
	return cluster.PlatformAddr{Kind: kind, Name: name, Addr: netip.MustParseAddr(a)}
}

func TestControlPlaneMerges(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	src, sink := &fakePlatform{}, &fakeSink{}
	lookups := map[string][]netip.Addr{"sched.example": {netip.MustParseAddr("11.0.0.2"), netip.MustParseAddr("2600:1f00::2")}}
	var lookupMu sync.Mutex
	cfg := ControlPlaneConfig{
		SchedulerHosts: []string{"11.0.0.1", "sched.example", "127.0.0.1"},
		Pools:          pfx("10.200.0.0/16", "fd00:200::/64"),
		Static:         pfx("203.0.113.0/24"),
		NodeAddrs:      []netip.Addr{netip.MustParseAddr("11.0.0.11")},
		Lookup: func(_ context.Context, host string) ([]netip.Addr, error) {
			lookupMu.Lock()
			defer lookupMu.Unlock()
			if a, ok := lookups[host]; ok {
				return a, nil
			}
			return nil, errors.New("no such host")
		},
	}
	c, err := NewControlPlane(cfg, src, sink, logger)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := c.Load(ctx); err != nil {
		t.Fatal(err)
	}
	// Before the scheduler's list: the scheduler URLs (loopback left
	// out), the pools and the static CIDRs.
	want := []string{"10.200.0.0/16", "11.0.0.1/32", "11.0.0.2/32", "203.0.113.0/24", "2600:1f00::2/128", "fd00:200::/64"}
	if diff := cmp.Diff(want, sink.last()); diff != "" {
		t.Errorf("after Load (-want +got):\n%s", diff)
	}

	// The scheduler's list adds members, nodes and gateways.
	src.set(nil, paddr(cluster.PlatformMember, "m1", "11.0.0.1"), paddr(cluster.PlatformNode, "n2", "11.0.0.12"),
		paddr(cluster.PlatformNode, "n1", "11.0.0.11"), // this node: denied as node already
		paddr(cluster.PlatformGateway, "gw", "2600:1f00::20"), paddr(cluster.PlatformNode, "n1", "127.0.0.1"))
	c.refresh(ctx)
	want = []string{"10.200.0.0/16", "11.0.0.1/32", "11.0.0.2/32", "11.0.0.12/32", "203.0.113.0/24", "2600:1f00::2/128", "2600:1f00::20/128", "fd00:200::/64"}
	if diff := cmp.Diff(want, sink.last()); diff != "" {
		t.Errorf("after a fetch (-want +got):\n%s", diff)
	}
	if err := c.WaitFetched(ctx); err != nil {
		t.Errorf("WaitFetched() = %v after a fetch", err)
	}
	if !strings.Contains(logs.String(), "11.0.0.12/32 (node n2)") {
		t.Errorf("the change was not logged with its source:\n%s", logs.String())
	}

	// Nothing changed: nothing is loaded again.
	n := sink.count()
	c.refresh(ctx)
	if sink.count() != n {
		t.Errorf("a refresh without change loaded the denylist again")
	}

	// A failed fetch or lookup keeps what was known.
	src.set(errors.New("scheduler down"))
	lookupMu.Lock()
	delete(lookups, "sched.example")
	lookupMu.Unlock()
	c.refresh(ctx)
	if diff := cmp.Diff(want, sink.last()); diff != "" {
		t.Errorf("after failures (-want +got):\n%s", diff)
	}

	// A node that goes away is removed; a gateway that connects is added.
	src.set(nil, paddr(cluster.PlatformMember, "m1", "11.0.0.1"))
	c.SeenGateway("gw", netip.MustParseAddr("::ffff:11.0.0.30"), time.Now())
	c.SeenGateway("gw", netip.MustParseAddr("127.0.0.1"), time.Now())
	c.refresh(ctx)
	want = []string{"10.200.0.0/16", "11.0.0.1/32", "11.0.0.2/32", "11.0.0.30/32", "203.0.113.0/24", "2600:1f00::2/128", "fd00:200::/64"}
	if diff := cmp.Diff(want, sink.last()); diff != "" {
		t.Errorf("after a node left and a gateway connected (-want +got):\n%s", diff)
	}
	if !strings.Contains(logs.String(), "11.0.0.12/32 (node n2)") || !strings.Contains(logs.String(), "removed") {
		t.Errorf("the removal was not logged:\n%s", logs.String())
	}

	// SIGHUP's new static CIDRs replace the old ones.
	if err := c.SetStatic(pfx("198.51.100.77/32")); err != nil {
		t.Fatal(err)
	}
	if got := sink.last(); !slices.Contains(got, "198.51.100.77/32") || slices.Contains(got, "203.0.113.0/24") {
		t.Errorf("after SetStatic: %v", got)
	}

	// A load that fails keeps the previous list, and SetStatic says so.
	sink.mu.Lock()
	sink.err = errors.New("map full")
	sink.mu.Unlock()
	if err := c.SetStatic(pfx("192.0.2.0/24")); err == nil {
		t.Errorf("SetStatic with a failing filter = nil error")
	}
	if got := c.Prefixes(); !slices.Contains(prefixStrings(got), "198.51.100.77/32") {
		t.Errorf("Prefixes() after a failed load = %v, want the previous list", got)
	}
}

func prefixStrings(ps []netip.Prefix) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

func TestControlPlaneSeenGateways(t *testing.T) {
	sink := &fakeSink{}
	c, err := NewControlPlane(ControlPlaneConfig{SeenTTL: time.Hour}, nil, sink, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i := range maxSeenGateways + 10 {
		c.SeenGateway("gw", netip.AddrFrom4([4]byte{11, 1, 0, byte(i)}), now.Add(time.Duration(i)*time.Second))
	}
	if err := c.reload(); err != nil {
		t.Fatal(err)
	}
	got := sink.last()
	if len(got) != maxSeenGateways || slices.Contains(got, "11.1.0.0/32") || !slices.Contains(got, "11.1.0.73/32") {
		t.Errorf("%d seen gateway addresses kept (%v), want the %d most recent", len(got), got, maxSeenGateways)
	}
	// An address last seen longer than SeenTTL ago is dropped.
	c.SeenGateway("gw", netip.MustParseAddr("11.2.0.1"), now.Add(-2*time.Hour))
	if err := c.reload(); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(sink.last(), "11.2.0.1/32") {
		t.Errorf("an expired gateway address is still denied")
	}
}

func TestControlPlaneRun(t *testing.T) {
	src, sink := &fakePlatform{}, &fakeSink{}
	src.set(nil, paddr(cluster.PlatformNode, "n2", "11.0.0.12"))
	c, err := NewControlPlane(ControlPlaneConfig{Refresh: 20 * time.Millisecond}, src, sink, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if err := c.WaitFetched(wctx); err != nil {
		t.Fatalf("WaitFetched() = %v", err)
	}
	src.set(nil, paddr(cluster.PlatformNode, "n2", "11.0.0.12"), paddr(cluster.PlatformNode, "n3", "11.0.0.13"))
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(sink.last(), "11.0.0.13/32") {
		if time.Now().After(deadline) {
			t.Fatalf("a new node was not loaded within 5s: %v", sink.last())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A gateway seen for the first time is loaded before the next fetch.
	c.SeenGateway("gw", netip.MustParseAddr("11.0.0.30"), time.Now())
	deadline = time.Now().Add(5 * time.Second)
	for !slices.Contains(sink.last(), "11.0.0.30/32") {
		if time.Now().After(deadline) {
			t.Fatalf("a seen gateway was not loaded within 5s: %v", sink.last())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run() = %v after cancel, want nil", err)
	}
}
