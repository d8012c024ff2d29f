package netpolicy

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDefaultDenylist(t *testing.T) {
	got := DefaultDenylist(
		[]netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("2001:db8::1")},
		[]netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")},
	)
	tail := got[len(got)-3:]
	want := []Entry{
		{netip.MustParsePrefix("198.51.100.1/32"), ReasonNode},
		{netip.MustParsePrefix("2001:db8::1/128"), ReasonNode},
		{netip.MustParsePrefix("203.0.113.0/24"), ReasonPlatform},
	}
	if diff := cmp.Diff(want, tail, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("DefaultDenylist tail (-want +got):\n%s", diff)
	}
	spec := []string{"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
		"172.16.0.0/12", "192.168.0.0/16", "224.0.0.0/4", "240.0.0.0/4", "::1/128", "fc00::/7",
		"fe80::/10", "ff00::/8"}
	for _, s := range spec {
		found := false
		for _, e := range got {
			found = found || e.Prefix == netip.MustParsePrefix(s)
		}
		if !found {
			t.Errorf("DefaultDenylist lacks SPEC range %s", s)
		}
	}
}

func TestDenyKey(t *testing.T) {
	tests := []struct {
		prefix string
		bits   uint32
		addr   string
	}{
		{"10.1.2.3/8", 104, "::ffff:10.0.0.0"},
		{"169.254.169.254/32", 128, "::ffff:169.254.169.254"},
		{"fe80::1/10", 10, "fe80::"},
		{"::1/128", 128, "::1"},
	}
	for _, tt := range tests {
		k, err := denyKey(netip.MustParsePrefix(tt.prefix))
		if err != nil {
			t.Fatalf("denyKey(%s): %v", tt.prefix, err)
		}
		bits := uint32(k[0]) | uint32(k[1])<<8 | uint32(k[2])<<16 | uint32(k[3])<<24
		if addr := netip.AddrFrom16([16]byte(k[4:])); bits != tt.bits || addr != netip.MustParseAddr(tt.addr) {
			t.Errorf("denyKey(%s) = %d %v, want %d %s", tt.prefix, bits, addr, tt.bits, tt.addr)
		}
	}
	if _, err := denyKey(netip.Prefix{}); err == nil {
		t.Error("denyKey(invalid) = nil error, want error")
	}
}
