package agentd

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/netpolicy"
)

func TestDeniedMessage(t *testing.T) {
	tests := []struct {
		r    netpolicy.Reason
		c    netpolicy.Count
		want string
	}{
		{netpolicy.ReasonMetadata, netpolicy.Count{Packets: 3, Last: netip.MustParseAddrPort("169.254.169.254:80")}, "egress denied: 169.254.169.254:80, metadata, 3 packets"},
		{netpolicy.ReasonPrivate, netpolicy.Count{Packets: 1, Last: netip.MustParseAddrPort("[fd00::1]:443")}, "egress denied: [fd00::1]:443, private, 1 packet"},
		{netpolicy.ReasonMulticast, netpolicy.Count{Packets: 2, Last: netip.AddrPortFrom(netip.MustParseAddr("224.0.0.1"), 0)}, "egress denied: 224.0.0.1, multicast, 2 packets"},
	}
	for _, tt := range tests {
		got := DeniedMessage(tt.r, tt.c)
		if got != tt.want {
			t.Errorf("DeniedMessage(%v, %+v) = %q, want %q", tt.r, tt.c, got, tt.want)
		}
		// The event says the same in its payload, which is what
		// programs read.
		e := deniedEventOf(tt.r, tt.c, time.Now())
		if eg := e.Egress; eg == nil || eg.Reason != tt.r.String() || eg.Packets != tt.c.Packets || eg.Destination == "" || e.Message != got {
			t.Errorf("deniedEventOf(%v, %+v) = %+v (egress %+v), want the reason, count and destination in its payload", tt.r, tt.c, e, e.Egress)
		}
	}
}

// TestDeniedTracker checks that an event is made only when a reason's count
// grew, with the delta for the metrics.
func TestDeniedTracker(t *testing.T) {
	var tr deniedTracker
	now := time.Now()
	last := netip.MustParseAddrPort("10.0.0.1:22")
	c := map[netpolicy.Reason]netpolicy.Count{netpolicy.ReasonPrivate: {Packets: 2, Last: last, Protocol: 6}}
	got := tr.events(c, now)
	if len(got) != 1 || got[0].delta != 2 || got[0].event.Kind != cluster.EventEgressDenied {
		t.Fatalf("first events = %+v, want one private event with delta 2", got)
	}
	want := cluster.Event{Time: now, Kind: cluster.EventEgressDenied, Message: "egress denied: 10.0.0.1:22, private, 2 packets",
		Egress: &api.Egress{Reason: "private", Destination: "10.0.0.1:22", Protocol: "tcp", Packets: 2}}
	if !reflect.DeepEqual(got[0].event, want) {
		t.Errorf("first event = %+v, want %+v", got[0].event, want)
	}
	if got := tr.events(c, now); len(got) != 0 {
		t.Errorf("unchanged counters gave events %+v", got)
	}
	c[netpolicy.ReasonPrivate] = netpolicy.Count{Packets: 5, Last: last}
	c[netpolicy.ReasonMetadata] = netpolicy.Count{Packets: 1, Last: netip.MustParseAddrPort("169.254.169.254:80")}
	got = tr.events(c, now)
	if len(got) != 2 || got[0].reason != netpolicy.ReasonPrivate || got[0].delta != 3 || got[1].reason != netpolicy.ReasonMetadata {
		t.Errorf("events after growth = %+v, want private (+3) then metadata (+1)", got)
	}
}
