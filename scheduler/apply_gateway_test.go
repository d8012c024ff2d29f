package scheduler

import (
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/cluster"
)

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, x := range s {
		out = append(out, netip.MustParseAddr(x))
	}
	return out
}

func TestApplySetGateway(t *testing.T) {
	f := newTestFSM(t)
	f.mustApply(t,
		cluster.SetGateway{Name: "gw1", Addresses: addrs("11.0.0.1"), At: at(1)},
		cluster.SetGateway{Name: "gw2", Addresses: addrs("11.0.0.2"), At: at(2)},
		// A PUT replaces the whole record.
		cluster.SetGateway{Name: "gw1", Addresses: addrs("11.0.0.9", "2600:1f00::9"), At: at(3)},
	)
	want := []cluster.Gateway{
		{Name: "gw1", Addresses: addrs("11.0.0.9", "2600:1f00::9"), Updated: at(3), CreateIndex: 1, ModifyIndex: 3},
		{Name: "gw2", Addresses: addrs("11.0.0.2"), Updated: at(2), CreateIndex: 2, ModifyIndex: 2},
	}
	if diff := cmp.Diff(want, f.State().Gateways(at(4)), equateAddr); diff != "" {
		t.Errorf("Gateways() (-want +got):\n%s", diff)
	}
	for _, bad := range []cluster.SetGateway{
		{Name: "Bad Name", Addresses: addrs("11.0.0.1"), At: at(4)},
		{Name: "gw3", At: at(4)},
		{Name: "gw3", Addresses: addrs("::ffff:11.0.0.1"), At: at(4)},
	} {
		checkErr(t, fmt.Sprintf("Apply(%+v)", bad), f.applyErr(t, bad), ErrInvalid)
	}

	// Gateway records survive a snapshot; an operator's restore leaves
	// them alone (they describe the running cluster, as members do).
	g := newTestFSM(t)
	if err := g.Restore(io.NopCloser(bytes.NewReader(persist(t, f.FSM)))); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, g.State().Gateways(at(4)), equateAddr); diff != "" {
		t.Errorf("Gateways() after a snapshot restore (-want +got):\n%s", diff)
	}
	g.mustApply(t, cluster.Restore{At: at(5)})
	if got := len(g.State().Gateways(at(5))); got != 2 {
		t.Errorf("%d gateways after a cluster.Restore, want 2", got)
	}

	// A record expires GatewayTTL after its last update: it is no longer
	// listed, and the next SetGateway drops it from the state.
	later := at(3).Add(cluster.GatewayTTL)
	if diff := cmp.Diff(want[:1], f.State().Gateways(later.Add(-time.Second)), equateAddr); diff != "" {
		t.Errorf("Gateways() just before gw1 expires (-want +got):\n%s", diff)
	}
	if got := f.State().Gateways(later); len(got) != 0 {
		t.Errorf("Gateways() after both expired = %v, want none", got)
	}
	f.mustApply(t, cluster.SetGateway{Name: "gw3", Addresses: addrs("11.0.0.3"), At: later})
	if got := len(f.State().snapshotGateways()); got != 1 {
		t.Errorf("%d gateway records kept after expiry, want 1 (gw3)", got)
	}
}

func TestApplySetGatewayBound(t *testing.T) {
	f := newTestFSM(t)
	for i := range cluster.MaxGateways {
		f.mustApply(t, cluster.SetGateway{Name: fmt.Sprintf("gw%d", i), Addresses: addrs("11.0.0.1"), At: at(i)})
	}
	checkErr(t, "Apply(SetGateway past the bound)",
		f.applyErr(t, cluster.SetGateway{Name: "one-more", Addresses: addrs("11.0.0.1"), At: at(100)}), ErrExists)
	// A known gateway may still update its record.
	f.mustApply(t, cluster.SetGateway{Name: "gw0", Addresses: addrs("11.0.0.2"), At: at(100)})
	// Once the first record expired, a new name fits.
	f.mustApply(t, cluster.SetGateway{Name: "one-more", Addresses: addrs("11.0.0.1"), At: at(1).Add(cluster.GatewayTTL)})
}

func TestPlatformList(t *testing.T) {
	f := newTestFSM(t)
	n2 := register("n2", 1, gib)
	n2.Address = netip.MustParseAddrPort("[::ffff:11.0.0.12]:7200")
	f.mustApply(t,
		cluster.SetMember{ID: "m1", RaftAddress: "11.0.0.1:7101", HTTPAddress: "[2600:1f00::1]:7100", At: at(1)},
		cluster.SetMember{ID: "m2", RaftAddress: "sched2.example:7101", HTTPAddress: "sched2.example:7100", At: at(1)},
		cluster.SetMember{ID: "m3", RaftAddress: "nowhere.example:7101", HTTPAddress: "11.0.0.3:7100", At: at(1)},
		register("n1", 1, gib), n2,
		cluster.SetGateway{Name: "gw1", Addresses: addrs("11.0.0.20", "2600:1f00::20"), At: at(2)},
		cluster.SetGateway{Name: "old", Addresses: addrs("11.0.0.99"), At: at(1).Add(-cluster.GatewayTTL)},
	)
	resolve := func(host string) []netip.Addr {
		if host == "sched2.example" {
			return addrs("11.0.0.2")
		}
		return nil
	}
	p, unresolved := f.State().platform(at(3), resolve)
	pa := func(kind cluster.PlatformKind, name, a string) cluster.PlatformAddr {
		return cluster.PlatformAddr{Kind: kind, Name: name, Addr: netip.MustParseAddr(a)}
	}
	want := cluster.Platform{Index: f.idx, Addresses: []cluster.PlatformAddr{
		pa(cluster.PlatformGateway, "gw1", "11.0.0.20"),
		pa(cluster.PlatformGateway, "gw1", "2600:1f00::20"),
		pa(cluster.PlatformMember, "m1", "11.0.0.1"),
		pa(cluster.PlatformMember, "m1", "2600:1f00::1"),
		pa(cluster.PlatformMember, "m2", "11.0.0.2"), // both addresses: listed once
		pa(cluster.PlatformMember, "m3", "11.0.0.3"),
		pa(cluster.PlatformNode, "n1", "10.0.0.1"),
		pa(cluster.PlatformNode, "n2", "11.0.0.12"),
	}}
	if diff := cmp.Diff(want, p, equateAddr); diff != "" {
		t.Errorf("platform() (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"nowhere.example"}, unresolved); diff != "" {
		t.Errorf("platform() unresolved (-want +got):\n%s", diff)
	}
	if p, _ := newTestFSM(t).State().platform(at(3), resolve); p.Addresses == nil {
		t.Errorf("platform() of an empty state has nil addresses, want [] (JSON [])")
	}
}
