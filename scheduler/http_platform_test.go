package scheduler

import (
	"bytes"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// TestServerPlatform registers a gateway through a follower (forwarded to
// the leader) and reads the platform list, which names every member, the
// node and the gateway.
func TestServerPlatform(t *testing.T) {
	c := newServerCluster(t, 2, nil)
	cl := c.client(c.follower())
	ctx := t.Context()
	newAgent(t, cl, "n1", 1, gib)
	if err := cl.RegisterGateway(ctx, "gw1", addrs("11.0.0.20", "2600:1f00::20")); err != nil {
		t.Fatalf("RegisterGateway(gw1) via a follower = %v", err)
	}
	p, err := cl.Platform(ctx)
	if err != nil {
		t.Fatalf("Platform() = %v", err)
	}
	got := map[cluster.PlatformAddr]bool{}
	for _, a := range p.Addresses {
		got[a] = true
	}
	want := []cluster.PlatformAddr{
		{Kind: cluster.PlatformGateway, Name: "gw1", Addr: netip.MustParseAddr("11.0.0.20")},
		{Kind: cluster.PlatformGateway, Name: "gw1", Addr: netip.MustParseAddr("2600:1f00::20")},
		{Kind: cluster.PlatformNode, Name: "n1", Addr: netip.MustParseAddr("127.0.0.1")},
		{Kind: cluster.PlatformMember, Name: "m0", Addr: netip.MustParseAddr("127.0.0.1")},
		{Kind: cluster.PlatformMember, Name: "m1", Addr: netip.MustParseAddr("127.0.0.1")},
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("Platform() = %+v, lacks %+v", p.Addresses, w)
		}
	}
	if len(p.Addresses) != len(want) || p.Index == 0 {
		t.Errorf("Platform() = index %d, %+v; want a non-zero index and %d addresses", p.Index, p.Addresses, len(want))
	}

	// Bad requests change nothing.
	many := make([]netip.Addr, cluster.MaxGatewayAddrs+1)
	for i := range many {
		many[i] = netip.AddrFrom4([4]byte{11, 0, 1, byte(i)})
	}
	for _, tc := range []struct {
		name  string
		addrs []netip.Addr
		want  string
	}{
		{"Bad", addrs("11.0.0.1"), "gateway name"},
		{"gw1", nil, "no address"},
		{"gw1", many, "at most 16"},
		{"gw1", addrs("::ffff:11.0.0.1"), "IPv4-mapped"},
		{"gw1", addrs("224.0.0.1"), "unicast"},
	} {
		if err := cl.RegisterGateway(ctx, tc.name, tc.addrs); !client.IsCode(err, api.CodeBadRequest) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("RegisterGateway(%q, %v) = %v, want a bad request naming %q", tc.name, tc.addrs, err, tc.want)
		}
	}
	for _, body := range []string{`{"addresses": ["11.0.0.1"], "ttl": 5}`, `{"addresses": ["not an ip"]}`, `{}`, `[`} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, c.members[0].url()+"/v1/gateways/gw1", bytes.NewReader([]byte(body)))
		resp, err := c.transport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("PUT /v1/gateways/gw1 %s = %d, want 400", body, resp.StatusCode)
		}
	}
	p2, err := cl.Platform(ctx)
	if err != nil || len(p2.Addresses) != len(want) {
		t.Errorf("Platform() after bad requests = %+v, %v; want it unchanged", p2.Addresses, err)
	}
}
