package netpolicy

import (
	"encoding/csv"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// registryRow is one row of a registry file in testdata/.
type registryRow struct {
	registry string
	prefix   netip.Prefix
	name     string
	rfc      string
	// global is the "Globally Reachable" cell: True, False, N/A, or empty
	// for a terminated allocation; for the address space registry, True
	// for Global Unicast and False for everything else.
	global string
}

func readRegistry(t *testing.T, file, registry string) []registryRow {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.Comment = '#'
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var rows []registryRow
	for _, rec := range recs[1:] { // the header
		p, err := netip.ParsePrefix(rec[0])
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		row := registryRow{registry: registry, prefix: p, name: rec[1], rfc: rec[2]}
		switch registry {
		case RegistryIPv6Space:
			row.global = map[bool]string{true: "True", false: "False"}[rec[1] == "Global Unicast"]
		default:
			row.global = rec[8]
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		t.Fatalf("%s has no rows", file)
	}
	return rows
}

// registries returns every row of the three registry files, and SPEC's
// ranges (denied) as rows too.
func registries(t *testing.T) []registryRow {
	t.Helper()
	var rows []registryRow
	rows = append(rows, readRegistry(t, "iana-ipv4-special-registry.csv", RegistryIPv4Special)...)
	rows = append(rows, readRegistry(t, "iana-ipv6-special-registry.csv", RegistryIPv6Special)...)
	rows = append(rows, readRegistry(t, "ipv6-address-space.csv", RegistryIPv6Space)...)
	for _, s := range []string{"224.0.0.0/4", "169.254.169.254/32"} {
		rows = append(rows, registryRow{registry: RegistrySPEC, prefix: netip.MustParsePrefix(s), global: "False"})
	}
	// RFC 4291 2.5.5.1: the deprecated IPv4-compatible addresses, a note of
	// the address space registry's ::/8 row.
	rows = append(rows, registryRow{registry: RegistryRFC, prefix: netip.MustParsePrefix("::/96"), global: "False"})
	return rows
}

// embeddings are the blocks whose addresses carry an IPv4 address, as the
// RFCs define them (independently of the table under test).
var embeddings = map[netip.Prefix]Embedding{
	netip.MustParsePrefix("64:ff9b::/96"):   EmbedLow32,  // RFC 6052
	netip.MustParsePrefix("64:ff9b:1::/48"): EmbedLow32,  // RFC 8215, /96 format
	netip.MustParsePrefix("::/96"):          EmbedLow32,  // RFC 4291 2.5.5.1
	netip.MustParsePrefix("2002::/16"):      Embed6to4,   // RFC 3056
	netip.MustParsePrefix("2001::/32"):      EmbedTeredo, // RFC 4380
}

// mostSpecific returns the longest row containing a, or false.
func mostSpecific(rows []registryRow, a netip.Addr) (registryRow, bool) {
	var best registryRow
	found := false
	for _, r := range rows {
		if r.prefix.Addr().BitLen() == a.BitLen() && r.prefix.Contains(a) && (!found || r.prefix.Bits() >= best.prefix.Bits()) {
			best, found = r, true
		}
	}
	return best, found
}

// registryReachable says whether the registries call a globally reachable,
// an embedded IPv4 address deciding as well: the longest row containing a
// must say True (or N/A, left to the embedded address), and every IPv4
// address a embeds must be globally reachable.
func registryReachable(rows []registryRow, a netip.Addr) bool {
	row, ok := mostSpecific(rows, a)
	if !ok {
		return true // IPv4 space no registry row names
	}
	if row.global != "True" && row.global != "N/A" {
		return false
	}
	for p, e := range embeddings {
		if !p.Contains(a) {
			continue
		}
		for _, v4 := range e.IPv4(a) {
			if !registryReachable(rows, v4) {
				return false
			}
		}
	}
	return true
}

// edges returns the first and last address of p, one in its middle (the
// first with the highest host bit set), and the addresses just outside it.
func edges(p netip.Prefix) []netip.Addr {
	p = p.Masked()
	first := p.Addr()
	b := first.AsSlice()
	host := first.BitLen() - p.Bits()
	for i := len(b) - 1; i >= 0 && host > 0; i-- {
		n := min(host, 8)
		b[i] |= byte(1<<n - 1)
		host -= n
	}
	last, _ := netip.AddrFromSlice(b)
	out := []netip.Addr{first}
	if host := first.BitLen() - p.Bits(); host >= 2 {
		m := first.AsSlice()
		bit := host - 1 // from the right
		m[len(m)-1-bit/8] |= 1 << (bit % 8)
		mid, _ := netip.AddrFromSlice(m)
		out = append(out, mid)
	}
	if last != first {
		out = append(out, last)
	}
	if prev := first.Prev(); prev.IsValid() {
		out = append(out, prev)
	}
	if next := last.Next(); next.IsValid() {
		out = append(out, next)
	}
	return out
}

// TestDenyTableMatchesRegistries checks the denylist table (Rules) against
// the registry rows in testdata/: each row the table cites exists there,
// each row that is not globally reachable is in the table, and at the
// first, middle and last address of every row and just outside it the
// table denies exactly what the registries say is not globally reachable.
func TestDenyTableMatchesRegistries(t *testing.T) {
	rows := registries(t)
	type key struct {
		registry string
		prefix   netip.Prefix
	}
	byKey := map[key]registryRow{}
	for _, r := range rows {
		byKey[key{r.registry, r.prefix}] = r
	}
	cited := map[key]Rule{}
	for _, rule := range Rules {
		k := key{rule.Registry, rule.Prefix}
		cited[k] = rule
		row, ok := byKey[k]
		if !ok {
			t.Errorf("rule %v cites %s, which has no such row", rule.Prefix, rule.Registry)
			continue
		}
		if rule.Registry != RegistrySPEC && rule.Registry != RegistryRFC && (rule.Name != row.name || rule.RFC != row.rfc) {
			t.Errorf("rule %v cites %q %s, the %s row says %q %s", rule.Prefix, rule.Name, rule.RFC, rule.Registry, row.name, row.rfc)
		}
		denied := rule.Reason != ReasonNone
		switch row.global {
		case "False", "":
			if !denied {
				t.Errorf("rule %v (%s %q, globally reachable %q) is an exception, want it denied", rule.Prefix, row.registry, row.name, row.global)
			}
		case "True":
			if denied {
				t.Errorf("rule %v (%s %q) is denied as %v, but it is globally reachable", rule.Prefix, row.registry, row.name, rule.Reason)
			}
		case "N/A":
			if denied || rule.Embed == EmbedNone {
				t.Errorf("rule %v (%s %q, reachability N/A) = %v embedding %d, want an exception decided by its embedded IPv4 address", rule.Prefix, row.registry, row.name, rule.Reason, rule.Embed)
			}
		}
		if want := embeddings[rule.Prefix]; rule.Embed != want {
			t.Errorf("rule %v embeds %d, want %d", rule.Prefix, rule.Embed, want)
		}
	}
	for _, r := range rows {
		if r.global == "True" {
			continue
		}
		if _, ok := cited[key{r.registry, r.prefix}]; ok {
			continue
		}
		// The address space rows fc00::/7 and fe80::/10 are cited from the
		// special-purpose registry.
		if _, ok := cited[key{RegistryIPv6Special, r.prefix}]; ok && r.registry == RegistryIPv6Space {
			continue
		}
		t.Errorf("%s row %v %q (globally reachable %q) is not in the table", r.registry, r.prefix, r.name, r.global)
	}

	entries := Denylist(nil, nil)
	checked := 0
	for _, r := range rows {
		for _, a := range edges(r.prefix) {
			want := registryReachable(rows, a)
			got := Decide(entries, a)
			if (got == ReasonNone) != want {
				t.Errorf("Decide(%v) = %v (edge of %s %v %q); registries: globally reachable %v", a, got, r.registry, r.prefix, r.name, want)
			}
			checked++
		}
	}
	t.Logf("%d rows, %d edge addresses checked", len(rows), checked)
}

func TestDecideEmbedded(t *testing.T) {
	entries := Denylist(nil, nil)
	tests := []struct {
		addr string
		want Reason
	}{
		{"64:ff9b::10.1.2.3", ReasonPrivate},
		{"64:ff9b::8.8.8.8", ReasonNone},
		{"64:ff9b::169.254.169.254", ReasonMetadata},
		{"64:ff9b:1::10.1.2.3", ReasonPrivate},
		{"64:ff9b:1::8.8.8.8", ReasonNotGlobal},
		{"2002:a01:203::1", ReasonPrivate},
		{"2002:808:808::1", ReasonNone},
		{"2001:0:a01:203::", ReasonPrivate},                   // Teredo server 10.1.2.3
		{"2001:0:808:808::f5fe:fdfc", ReasonPrivate},          // client ~f5fe:fdfc = 10.1.2.3
		{"2001:0:808:808:0:0:f7f7:f7f7", ReasonNone},          // client 8.8.8.8
		{"::10.1.2.3", ReasonPrivate},                         // IPv4-compatible
		{"::8.8.8.8", ReasonReserved},                         // IPv4-compatible of a public address
		{"::1", ReasonLoopback},                               // not an IPv4-compatible address
		{"::ffff:10.1.2.3", ReasonPrivate},                    // IPv4-mapped
		{"::ffff:8.8.8.8", ReasonNotGlobal},                   // IPv4-mapped, public
		{"8.8.8.8", ReasonNone},                               // the IPv4 address itself
		{"fec0::1", ReasonReserved},                           // site-local
		{"198.18.0.9", ReasonBenchmarking},                    // benchmarking
		{"2600::1", ReasonNone},                               // global unicast
		{"2001:db8::1", ReasonDocumentation},                  // documentation
		{"192.0.0.9", ReasonNone},                             // PCP anycast
		{"192.0.0.8", ReasonNotGlobal},                        // IPv4 dummy
		{"255.255.255.255", ReasonBroadcast},                  // limited broadcast
		{"2001:1::4", ReasonNotGlobal},                        // IETF protocol assignments
		{"2001:1::3", ReasonNone},                             // DNS-SD SRP anycast
		{"2001:0:c0a8:101:0:0:3f57:fefe", ReasonPrivate},      // Teredo server 192.168.1.1
		{"2001:0:808:808:8000:ffff:3f57:fefe", ReasonPrivate}, // client 192.168.1.1
	}
	for _, tt := range tests {
		if got := Decide(entries, netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("Decide(%s) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}

func TestDefaultDenylist(t *testing.T) {
	got := DefaultDenylist(
		[]netip.Addr{netip.MustParseAddr("11.0.0.1"), netip.MustParseAddr("2600::1")},
		[]netip.Prefix{netip.MustParsePrefix("12.0.0.0/24"), netip.MustParsePrefix("2001::/16")},
	)
	cmpPrefix := cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })
	if diff := cmp.Diff(Denylist([]Entry{
		{Prefix: netip.MustParsePrefix("11.0.0.1/32"), Reason: ReasonNode},
		{Prefix: netip.MustParsePrefix("2600::1/128"), Reason: ReasonNode},
	}, []netip.Prefix{netip.MustParsePrefix("12.0.0.0/24"), netip.MustParsePrefix("2001::/16")}), got, cmpPrefix); diff != "" {
		t.Errorf("DefaultDenylist (-want +got):\n%s", diff)
	}
	spec := []string{"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
		"172.16.0.0/12", "192.168.0.0/16", "224.0.0.0/4", "240.0.0.0/4", "::1/128", "fc00::/7",
		"fe80::/10", "ff00::/8"}
	for _, s := range spec {
		if r := Decide(got, netip.MustParsePrefix(s).Addr()); r == ReasonNone {
			t.Errorf("DefaultDenylist does not deny SPEC range %s", s)
		}
	}
	for _, tt := range []struct {
		addr string
		want Reason
	}{
		{"11.0.0.1", ReasonNode},
		{"2600::1", ReasonNode},
		{"12.0.0.9", ReasonPlatform},
		// Globally reachable exceptions and embedding blocks inside a
		// platform CIDR are platform too.
		{"2001:3::1", ReasonPlatform},
		{"2001:0:808:808::f7f7:f7f7", ReasonPlatform},
		{"2001:db8::1", ReasonPlatform},
		{"64:ff9b::12.0.0.9", ReasonPlatform},
		{"2600::2", ReasonNone},
	} {
		if r := Decide(got, netip.MustParseAddr(tt.addr)); r != tt.want {
			t.Errorf("Decide(DefaultDenylist, %s) = %v, want %v", tt.addr, r, tt.want)
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

func TestEdges(t *testing.T) {
	got := edges(netip.MustParsePrefix("10.0.0.0/8"))
	want := []string{"10.0.0.0", "10.128.0.0", "10.255.255.255", "9.255.255.255", "11.0.0.0"}
	var gs []string
	for _, a := range got {
		gs = append(gs, a.String())
	}
	if strings.Join(gs, " ") != strings.Join(want, " ") {
		t.Errorf("edges(10/8) = %v, want %v", gs, want)
	}
	if got := edges(netip.MustParsePrefix("::/128")); len(got) != 2 || got[1].String() != "::1" {
		t.Errorf("edges(::/128) = %v, want [:: ::1]", got)
	}
	if got := edges(netip.MustParsePrefix("fe80::/10")); got[1].String() != "fea0::" {
		t.Errorf("edges(fe80::/10)[1] = %v, want fea0::", got[1])
	}
}
