package netpolicy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestPoolAllocate(t *testing.T) {
	tests := []struct {
		name         string
		pool4, pool6 string
		bits4, bits6 int
		slot         int
		want         Lease
	}{
		{"first /30 /126", "10.200.0.0/16", "fd00:200::/64", 30, 126, 0, Lease{
			Addr4: pfx("10.200.0.2/30"), Gateway4: ip("10.200.0.1"),
			Addr6: pfx("fd00:200::2/126"), Gateway6: ip("fd00:200::1"),
		}},
		{"third /30 /126", "10.200.0.0/16", "fd00:200::/64", 30, 126, 2, Lease{
			Addr4: pfx("10.200.0.10/30"), Gateway4: ip("10.200.0.9"),
			Addr6: pfx("fd00:200::a/126"), Gateway6: ip("fd00:200::9"),
		}},
		{"second /31 /127", "10.200.0.0/16", "fd00:200::/64", 31, 127, 1, Lease{
			Addr4: pfx("10.200.0.3/31"), Gateway4: ip("10.200.0.2"),
			Addr6: pfx("fd00:200::3/127"), Gateway6: ip("fd00:200::2"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPool(pfx(tt.pool4), pfx(tt.pool6), tt.bits4, tt.bits6)
			if err != nil {
				t.Fatal(err)
			}
			var got Lease
			for i := 0; i <= tt.slot; i++ {
				if got, err = p.Allocate(string(rune('a' + i))); err != nil {
					t.Fatal(err)
				}
			}
			if got != tt.want {
				t.Errorf("Allocate = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestPoolExhaustReleaseReserve(t *testing.T) {
	p, err := NewPool(pfx("10.0.0.0/29"), pfx("fd00::/64"), 30, 126)
	if err != nil {
		t.Fatal(err)
	}
	if p.Len() != 2 {
		t.Fatalf("Len() = %d, want 2", p.Len())
	}
	a, _ := p.Allocate("a")
	if again, _ := p.Allocate("a"); again != a {
		t.Errorf("Allocate(a) again = %+v, want %+v", again, a)
	}
	if _, err := p.Allocate("b"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Allocate("c"); !errors.Is(err, ErrPoolExhausted) {
		t.Errorf("Allocate(c) on a full pool = %v, want %v", err, ErrPoolExhausted)
	}
	p.Release("a")
	if c, err := p.Allocate("c"); err != nil || c != a {
		t.Errorf("Allocate(c) after Release(a) = %+v, %v, want %+v", c, err, a)
	}

	q, _ := NewPool(pfx("10.0.0.0/29"), pfx("fd00::/64"), 30, 126)
	if err := q.Reserve("x", a.Gateway6); err != nil {
		t.Fatal(err)
	}
	if err := q.Reserve("y", a.Addr4.Addr()); err == nil {
		t.Errorf("Reserve(y) of x's link = nil, want an error")
	}
	if err := q.Reserve("y", ip("192.0.2.1")); err == nil {
		t.Errorf("Reserve(y) outside the pool = nil, want an error")
	}
	if got, _ := q.Allocate("y"); got == a {
		t.Errorf("Allocate(y) = %+v, the link reserved for x", got)
	}
}

func TestNewPoolRejects(t *testing.T) {
	for _, tt := range []struct {
		pool4, pool6 string
		bits4, bits6 int
	}{
		{"fd00::/64", "fd00::/64", 30, 126},
		{"10.0.0.0/16", "10.0.0.0/16", 30, 126},
		{"10.0.0.0/16", "fd00::/48", 30, 126},
		{"10.0.0.0/16", "fd00::/64", 32, 126},
		{"10.0.0.0/16", "fd00::/64", 16, 126},
		{"10.0.0.0/16", "fd00::/64", 30, 128},
	} {
		if _, err := NewPool(pfx(tt.pool4), pfx(tt.pool6), tt.bits4, tt.bits6); err == nil {
			t.Errorf("NewPool(%s, %s, %d, %d) = nil error, want one", tt.pool4, tt.pool6, tt.bits4, tt.bits6)
		}
	}
}

func TestNames(t *testing.T) {
	seen := map[string]string{}
	for _, id := range []string{"a", "b", "step-0001", strings.Repeat("x", 128)} {
		name := HostIfname(id)
		if len(name) > 15 || !isHostIfname(name) {
			t.Errorf("HostIfname(%q) = %q, want rv and 12 hex digits", id, name)
		}
		if other, dup := seen[name]; dup {
			t.Errorf("HostIfname(%q) = HostIfname(%q) = %q", id, other, name)
		}
		seen[name] = id
	}
	for _, tt := range []struct {
		id string
		ok bool
	}{{"step-1.a_B", true}, {"", false}, {"..", false}, {"a/b", false}, {"a b", false}, {strings.Repeat("x", 129), false}} {
		if err := validID(tt.id); (err == nil) != tt.ok {
			t.Errorf("validID(%q) = %v, want ok=%v", tt.id, err, tt.ok)
		}
	}
	if isHostIfname("rveth0") || isHostIfname("eth0") {
		t.Errorf("isHostIfname accepts a foreign name")
	}
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func ip(s string) netip.Addr    { return netip.MustParseAddr(s) }
