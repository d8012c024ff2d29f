package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestListenAddrs(t *testing.T) {
	ifaces := func() ([]net.Addr, error) {
		var out []net.Addr
		for _, p := range []string{"127.0.0.1/8", "::1/128", "192.0.2.10/24", "fe80::1/64", "2001:db8::5/64", "198.51.100.3/32", "192.0.2.10/24"} {
			ip, n, _ := net.ParseCIDR(p)
			out = append(out, &net.IPNet{IP: ip, Mask: n.Mask})
		}
		return out, nil
	}
	for _, tc := range []struct {
		listen string
		want   []string
	}{
		{"127.0.0.1:7300", []string{"127.0.0.1"}},
		{"192.0.2.10:443", []string{"192.0.2.10"}},
		{"[2001:db8::5]:443", []string{"2001:db8::5"}},
		{"0.0.0.0:443", []string{"192.0.2.10", "198.51.100.3", "2001:db8::5"}},
		{"[::]:443", []string{"192.0.2.10", "198.51.100.3", "2001:db8::5"}},
	} {
		ap := netip.MustParseAddrPort(tc.listen)
		got, err := listenAddrs(net.TCPAddrFromAddrPort(ap), ifaces)
		var want []netip.Addr
		for _, w := range tc.want {
			want = append(want, netip.MustParseAddr(w))
		}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("listenAddrs(%s) = %v, %v; want %v", tc.listen, got, err, want)
		}
	}
	onlyLoopback := func() ([]net.Addr, error) {
		return []net.Addr{&net.IPNet{IP: net.IPv4(127, 0, 0, 1), Mask: net.CIDRMask(8, 32)}}, nil
	}
	if got, err := listenAddrs(&net.TCPAddr{IP: net.IPv4zero, Port: 1}, onlyLoopback); err == nil {
		t.Errorf("listenAddrs(0.0.0.0) on a host with loopback only = %v, want an error", got)
	}
}

// fakeRegistrar records registrations; the first failures calls fail.
type fakeRegistrar struct {
	mu       sync.Mutex
	failures int
	calls    []string
	got      [][]netip.Addr
	changed  chan struct{}
}

func (r *fakeRegistrar) RegisterGateway(ctx context.Context, name string, addrs []netip.Addr) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, name)
	close(r.changed)
	r.changed = make(chan struct{})
	if r.failures > 0 {
		r.failures--
		return errors.New("scheduler: no route PUT /v1/gateways/gw1 (404 not_found)")
	}
	r.got = append(r.got, addrs)
	return nil
}

// wait waits until n registrations succeeded.
func (r *fakeRegistrar) wait(t *testing.T, n int) [][]netip.Addr {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		got, ch := slices.Clone(r.got), r.changed
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%d registrations, want %d", len(got), n)
		}
	}
}

// TestRegister: the gateway registers its listen address at start, again
// after a failure, and every interval after.
func TestRegister(t *testing.T) {
	reg := &fakeRegistrar{failures: 1, changed: make(chan struct{})}
	cfg := DefaultConfig()
	cfg.OwnerEmail, cfg.Name, cfg.Registrar, cfg.RegisterInterval = "", "gw1", reg, 50*time.Millisecond
	ts := newTestScheduler(t)
	g, err := New(cfg, ts.store, ts.sched, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	_, stop := serveLoopback(t, g)
	got := reg.wait(t, 2)
	if err := stop(); err != nil {
		t.Errorf("Serve() = %v, want nil after cancel", err)
	}
	want := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	if diff := cmp.Diff([][]netip.Addr{want, want}, got[:2], cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("registered addresses (-want +got):\n%s", diff)
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if len(reg.calls) < 3 || reg.calls[0] != "gw1" {
		t.Errorf("registration calls %q, want a failure then two successes as gw1", reg.calls)
	}
}

// TestRunRefusesPlainPublic: Run serves plain HTTP on loopback only.
func TestRunRefusesPlainPublic(t *testing.T) {
	cfg := DefaultConfig()
	cfg.OwnerEmail, cfg.Listen = "", "0.0.0.0:0"
	ts := newTestScheduler(t)
	g, err := New(cfg, ts.store, ts.sched, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Run(t.Context()); !errors.Is(err, ErrPlainPublic) {
		t.Errorf("Run(--listen 0.0.0.0:0 without TLS) = %v, want ErrPlainPublic", err)
	}
}

// TestNewHTTPSSite: a gateway serving HTTPS has an https site.
func TestNewHTTPSSite(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TLS = &tls.Config{}
	ts := newTestScheduler(t)
	if _, err := New(cfg, ts.store, ts.sched, nil); err == nil {
		t.Errorf("New(TLS, site %s) = nil, want an error", cfg.Site)
	}
	cfg.Site = "https://gw.example.com"
	if _, err := New(cfg, ts.store, ts.sched, nil); err != nil {
		t.Errorf("New(TLS, site %s) = %v", cfg.Site, err)
	}
}
