package gateway

import (
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/api"
)

func TestScrub(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"exit code 1", "exit code 1"},
		{"node worker-3 stopped answering", "node [node] stopped answering"},
		{"dial tcp 10.0.0.7:7200: connection refused", "dial tcp [address]: connection refused"},
		{"egress denied: 169.254.169.254:80, metadata, 3 packets", "egress denied: [address], metadata, 3 packets"},
		{"egress denied: [fd00::1]:443, private, 1 packet", "egress denied: [address], private, 1 packet"},
		{"egress denied: fe80::1, link_local, 2 packets", "egress denied: [address], link_local, 2 packets"},
		{"get http://agent.internal:7200/v1/x: EOF", "get [url]: EOF"},
		{"agent at agent.internal:7200 gone", "agent at [address] gone"},
		{"container 4f1c2d3e4f1c2d3e4f1c2d3e4f1c2d3e4f1c2d3e4f1c2d3e4f1c2d3e4f1c2d3e exited", "container [id] exited"},
		{"runsc create failed: io.containerd.rodon.v1 shim", "[runtime] create failed: [runtime] shim"},
		{"open /var/lib/rodon/steps/x/rootfs: no space", "open [path]: no space"},
		{"started at 12:30:45", "started at 12:30:45"},
		{"python /workspace/a.py exited 2", "python /workspace/a.py exited 2"},
	} {
		if got := Scrub(tc.in, "worker-3"); got != tc.want {
			t.Errorf("Scrub(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestStepView: the node is never shown, event messages are the
// gateway's own (the node's are not shown) and denied counts keep the
// last count per reason, from the events' payloads.
func TestStepView(t *testing.T) {
	f := newFixture(t)
	id := stepOf(f)
	egress := func(dst, reason string, n uint64) {
		f.sched.AddTypedEvent(id, api.Event{Kind: api.EventEgressDenied, Message: "egress denied on node-secret-7 " + dst,
			Egress: &api.Egress{Reason: reason, Destination: dst, Packets: n}})
	}
	egress("169.254.169.254:80", "metadata", 1)
	egress("10.0.0.3:22", "private", 2)
	egress("169.254.169.254:80", "metadata", 5)
	f.sched.AddEvent(id, "warning", "slow disk on node-secret-7")
	var v api.RunStep
	w := f.do("viewer", "GET", "/v1/steps/"+id, "", 200, &v)
	if v.Denied["metadata"] != 5 || v.Denied["private"] != 2 || len(v.Denied) != 2 {
		t.Errorf("denied = %v, want metadata 5, private 2", v.Denied)
	}
	for _, bad := range []string{"node-secret-7", "169.254.169.254", "10.0.0.3", `"node"`} {
		if strings.Contains(w.Body.String(), bad) {
			t.Errorf("step view carries %q: %s", bad, w.Body)
		}
	}
	if v.State != "running" || v.Cleanup != "pending" || v.Retry == "" {
		t.Errorf("step view = %+v, want running, cleanup pending, a retry rule", v)
	}
}
