package e2e

import (
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// TestEgressGloballyReachableOnly runs a gVisor step against stand-ins of
// the addresses that are not globally reachable but looked public to the
// filter before (issue 10): a NAT64 and a 6to4 address of a private host,
// the benchmarking range, the deprecated site-local range, the node's
// subnet broadcast and subnet-router anycast addresses, and an address
// added to the node after agentd started. Nothing may arrive at any of
// them, each TCP and UDP attempt must be refused in under a second, and
// each must be counted by reason (in the step's events and agentd's
// metrics), while a public IPv4 and IPv6 stand-in still answer. Each
// stand-in is first shown to receive what is sent to it without the
// filter in the way, so that its zero count means something.
func TestEgressGloballyReachableOnly(t *testing.T) {
	testenv.RequireContainerd(t)
	testenv.RequireNetAdmin(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	w := newWorld(t)
	a := netip.MustParseAddr
	// On inet: the NAT64 (RFC 6052) and 6to4 (RFC 3056) forms of the
	// private stand-in 10.99.0.10, 198.18.0.9 and fec0::1.
	inet := map[string]netip.Addr{
		"nat64": a("64:ff9b::10.99.0.10"), "6to4": a("2002:a63:a::1"),
		"benchmarking": a("198.18.0.9"), "site-local": a("fec0::1"),
	}
	for name, ad := range inet {
		w.addInetHost(t, name, ad)
	}
	// On the node: its uplink's subnet broadcast and subnet-router anycast.
	for name, ad := range map[string]netip.Addr{"broadcast": w.nodeBroadcast, "anycast": w.nodeAnycast} {
		w.hosts[name] = w.serve(t, w.nodeH, name, ad)
	}
	platformFile := filepath.Join(t.TempDir(), "platform")
	if err := os.WriteFile(platformFile, []byte(worldPlatform+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &fleet{wsRoot: t.TempDir()}
	startSchedulers(t, f, 1)
	agent := startEgressAgent(t, f, w, "n1", t.TempDir(), platformFile, "ready")
	listen := f.agentAddrs[len(f.agentAddrs)-1]

	// An address of each family added to the node after agentd started.
	late4, late6 := a("11.0.9.9"), a("2600:9::9")
	for name, ad := range map[string]netip.Addr{"late": late4, "late6": late6} {
		w.addAddr(t, w.nodeH, "lo", ad)
		w.hosts[name] = w.serve(t, w.nodeH, name, ad)
	}

	// Without the filter, each stand-in receives: from the node namespace
	// (routed to inet, or delivered locally), or from inet for the
	// uplink's broadcast and anycast addresses.
	for name := range inet {
		w.checkReceives(t, w.nodeH, name)
	}
	for _, name := range []string{"broadcast", "anycast"} {
		w.checkReceives(t, w.inetH, name)
	}
	for _, name := range []string{"late", "late6"} {
		w.checkReceives(t, w.nodeH, name)
	}

	closed := []string{"nat64", "6to4", "benchmarking", "site-local", "broadcast", "anycast", "late", "late6"}
	wantReason := map[string]string{
		"nat64": "private", "6to4": "private", "benchmarking": "benchmarking", "site-local": "reserved",
		"broadcast": "broadcast", "anycast": "node", "late": "node", "late6": "node",
	}
	all := append([]string{"public", "public6"}, closed...)
	before := w.hits()
	res := runProbe(t, f, w, "egress-global", false, all...)
	after := w.hits()
	for _, key := range slices.Sorted(maps.Keys(res)) {
		a := res[key]
		t.Logf("%-22s ok=%-5v %4d ms  %s", key, a.OK, a.MS, a.Detail)
	}
	for _, name := range []string{"public", "public6"} {
		for _, kind := range []string{"tcp", "http", "udp", "ping"} {
			if a := res[name+"/"+kind]; !a.OK {
				t.Errorf("%s %s (%v) = %+v, want an answer", kind, name, w.hosts[name].addr, a)
			}
		}
	}
	for _, name := range closed {
		for _, kind := range []string{"tcp", "http", "udp", "ping"} {
			at, ok := res[name+"/"+kind]
			switch {
			case !ok:
				t.Errorf("%s/%s: no attempt reported", name, kind)
			case at.OK:
				t.Errorf("%s %s (%v) succeeded (%s), want it denied", kind, name, w.hosts[name].addr, at.Detail)
			case kind != "ping" && at.MS >= 1000:
				// A denied SYN is reset, a denied datagram answered with a
				// port unreachable; a denied ping has no answer to give.
				t.Errorf("denied %s to %s took %d ms, want under 1000 (%s)", kind, name, at.MS, at.Detail)
			}
		}
		if n := after[name] - before[name]; n != 0 {
			t.Errorf("denied stand-in %s (%v) received %d connections or datagrams, want 0", name, w.hosts[name].addr, n)
		}
	}

	// Counted by reason: each target's four attempts (a SYN each for tcp
	// and http, a datagram, a ping), in the step's events.
	ev := deniedEvents(t, f, "egress-global")
	need := map[string]uint64{}
	for _, name := range closed {
		need[wantReason[name]] += 4
	}
	for r, n := range need {
		if ev[r].Packets < n {
			t.Errorf("egress events: %s = %+v, want at least %d packets", r, ev[r], n)
		}
	}
	t.Logf("egress events by reason: %v", ev.packets())

	// And in agentd's metrics.
	resp, err := clusterHTTP(t, pki.RoleOperator, operatorName).Get("https://" + listen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET agentd /metrics = %s", resp.Status)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for r := range need {
		if !strings.Contains(string(metrics), `rodon_agent_egress_denied_packets_total{reason="`+r+`"}`) {
			t.Errorf("agentd /metrics has no egress denial counter for reason %s", r)
		}
	}
	agent.stop(30 * time.Second)
	checkNodeNetClean(t, w)
}

// checkReceives sends a UDP datagram to stand-in name from namespace from
// and waits for it to arrive: what the stand-in receives is counted.
func (w *world) checkReceives(t *testing.T, from netns.NsHandle, name string) {
	t.Helper()
	s := w.hosts[name]
	n := s.hits.Load()
	err := inNS(from, func() error {
		// SO_BROADCAST, or the kernel refuses to send to a broadcast
		// address (the uplink's, from inet).
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				if s.addr.Is4() {
					serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_BROADCAST, 1)
				}
			})
			if err != nil {
				return err
			}
			return serr
		}}
		c, err := d.Dial("udp", netip.AddrPortFrom(s.addr, 7).String())
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("are you there"))
		return err
	})
	if err != nil {
		t.Fatalf("send to stand-in %s (%v): %v", name, s.addr, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.hits.Load() == n {
		if time.Now().After(deadline) {
			t.Fatalf("stand-in %s (%v) received nothing sent to it without the filter in the way", name, s.addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
