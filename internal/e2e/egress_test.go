package e2e

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// probeScript tries every target given as JSON [[name, addr], ...] in
// argv[1] with a TCP connect, an HTTP GET, a ping and a UDP echo (on a
// connected socket, so that an ICMP port unreachable fails it at once),
// all at once, and also resolves a name through the sandbox's resolver
// and asks another DNS server directly. It prints one JSON object per
// attempt.
const probeScript = `
import json, socket, struct, sys, threading, time, urllib.request
lock = threading.Lock()
def rec(**kw):
    with lock:
        print(json.dumps(kw), flush=True)
def fam(a):
    return socket.AF_INET6 if ':' in a else socket.AF_INET
def timed(name, kind, fn):
    t0 = time.monotonic()
    try:
        ok, detail = fn()
    except Exception as e:
        ok, detail = False, type(e).__name__ + ': ' + str(e)
    rec(target=name, kind=kind, ok=ok, ms=int((time.monotonic() - t0) * 1000), detail=str(detail))
def tcp(a):
    s = socket.socket(fam(a), socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((a, 80))
        return True, 'connected'
    finally:
        s.close()
def http(a):
    host = '[' + a + ']' if ':' in a else a
    body = urllib.request.urlopen('http://' + host + '/', timeout=3).read().decode()
    return body.startswith('hello from'), body
def udp(a):
    s = socket.socket(fam(a), socket.SOCK_DGRAM)
    s.settimeout(1)
    s.connect((a, 7))
    s.send(b'rodon')
    return s.recv(64) == b'rodon', 'echo'
def csum(b):
    if len(b) % 2:
        b += b'\0'
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xffff)
    s += s >> 16
    return ~s & 0xffff
def ping(a):
    if ':' in a:
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM, socket.IPPROTO_ICMPV6)
        typ = 128
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
        typ = 8
    s.settimeout(1)
    body = struct.pack('!BBHHH', typ, 0, 0, 0, 1) + b'rodon'
    body = body[:2] + struct.pack('!H', csum(body)) + body[4:]
    s.sendto(body, (a, 0))
    data = s.recv(128)
    return len(data) > 0, 'reply'
def resolve():
    return True, socket.gethostbyname('public.test')
def rogue(a):
    q = struct.pack('!HHHHHH', 0x1234, 0x0100, 1, 0, 0, 0) + b'\x06public\x04test\x00' + struct.pack('!HH', 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1)
    s.sendto(q, (a, 53))
    return len(s.recv(512)) > 0, 'answered'
targets = json.loads(sys.argv[1])
threads = []
for name, a in targets:
    for kind, fn in (('tcp', tcp), ('http', http), ('udp', udp), ('ping', ping)):
        threads.append(threading.Thread(target=timed, args=(name, kind, lambda fn=fn, a=a: fn(a))))
threads.append(threading.Thread(target=timed, args=('resolver', 'dns', resolve)))
threads.append(threading.Thread(target=timed, args=('rogue', 'dns', lambda: rogue(sys.argv[2]))))
for th in threads:
    th.start()
for th in threads:
    th.join()
`

type attempt struct {
	Target string `json:"target"`
	Kind   string `json:"kind"`
	OK     bool   `json:"ok"`
	MS     int    `json:"ms"`
	Detail string `json:"detail"`
}

// startEgressAgent starts agentd with its node side in the world's node
// namespace and waits until the scheduler has its node as state. Its
// --listen address is appended to f.agentAddrs.
func startEgressAgent(t *testing.T, f *fleet, w *world, id, dataDir, platformFile, wantState string, wrap ...string) *proc {
	t.Helper()
	listen := freePort(t)
	args := append(wrap, bin+"/agentd", "serve", "--tls-dir", tlsArgs(t, pki.RoleAgent, id)[1], "--scheduler", f.urls(),
		"--node-id", id, "--data-dir", dataDir, "--listen", listen,
		"--heartbeat", "500ms", "--cpu", "2", "--memory", "4g", "--log-level", "info",
		"--network", "egress", "--node-netns", w.nodePath(), "--dns", w.resolver.String(),
		"--platform-file", platformFile)
	p := start(t, "agentd "+id, args...)
	f.agentAddrs = append(f.agentAddrs, listen)
	c := newClient(t, f.urls())
	waitFor(t, 60*time.Second, "node "+id+" "+wantState, func() bool {
		n, err := c.Node(context.Background(), id)
		return err == nil && n.State == wantState
	})
	return p
}

// runProbe runs probeScript in a python step and returns its attempts by
// "target/kind".
func runProbe(t *testing.T, f *fleet, w *world, id string, noInternet bool, names ...string) map[string]attempt {
	t.Helper()
	var targets [][2]string
	for _, n := range names {
		targets = append(targets, [2]string{n, w.hosts[n].addr.String()})
	}
	tj, _ := json.Marshal(targets)
	args := []string{"run", "--id", id, "--image", "python", "--cpu", "0.5", "--memory", "256m", "--timeout", "60s"}
	if noInternet {
		args = append(args, "--no-internet")
	}
	args = append(args, "--", "python3", "-c", probeScript, string(tj), w.rogue.String())
	code, out, errOut := schedctl(t, f, args...)
	if code != 0 {
		t.Fatalf("probe step %s: exit %d\nstdout:\n%s\nstderr:\n%s", id, code, out, errOut)
	}
	res := map[string]attempt{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var a attempt
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("probe output line %q: %v", line, err)
		}
		res[a.Target+"/"+a.Kind] = a
	}
	return res
}

// deniedReasons returns the reasons of a step's egress events with their
// last packet counts, from the events' fields; each event's message must
// say the same.
func deniedReasons(t *testing.T, f *fleet, id string) map[string]uint64 {
	t.Helper()
	return deniedEvents(t, f, id).packets()
}

// denials are a step's egress events, the last one of each reason.
type denials map[string]api.Egress

func (d denials) packets() map[string]uint64 {
	out := map[string]uint64{}
	for r, e := range d {
		out[r] = e.Packets
	}
	return out
}

func deniedEvents(t *testing.T, f *fleet, id string) denials {
	t.Helper()
	s, err := newClient(t, f.urls()).Step(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	out := denials{}
	for _, e := range s.Events {
		if e.Kind != "egress_denied" {
			continue
		}
		eg := e.Egress
		if eg == nil || eg.Reason == "" || eg.Destination == "" || eg.Protocol == "" ||
			!strings.Contains(e.Message, eg.Destination+", "+eg.Reason+", "+strconv.FormatUint(eg.Packets, 10)+" packet") {
			t.Errorf("egress event %+v (payload %+v): no reason, destination or protocol, or a message that says otherwise", e, eg)
			continue
		}
		out[eg.Reason] = *eg
	}
	return out
}

// TestEgress runs gVisor steps on a node whose surroundings are stand-ins
// inside namespaces this test made (see world), and checks that only the
// public internet answers, that every denied attempt fails fast and is
// counted by reason, that DNS goes to the configured resolver only, that
// platform CIDRs change at run time, and that --no-internet reaches nothing.
func TestEgress(t *testing.T) {
	testenv.RequireContainerd(t)
	testenv.RequireNetAdmin(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	w := newWorld(t)
	platformFile := filepath.Join(t.TempDir(), "platform")
	if err := os.WriteFile(platformFile, []byte("# the platform\n"+worldPlatform+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &fleet{wsRoot: t.TempDir()}
	startSchedulers(t, f, 1)
	agent := startEgressAgent(t, f, w, "n1", t.TempDir(), platformFile, "ready")

	all := []string{"public", "public6", "metadata", "private", "node", "platform", "platform-late"}
	before := w.hits()
	res := runProbe(t, f, w, "egress-open", false, all...)
	after := w.hits()

	wantOpen := map[string]bool{"public": true, "public6": true, "platform-late": true}
	for _, name := range all {
		for _, kind := range []string{"tcp", "http", "udp", "ping"} {
			a, ok := res[name+"/"+kind]
			if !ok {
				t.Errorf("%s/%s: no attempt reported", name, kind)
				continue
			}
			if a.OK != wantOpen[name] {
				t.Errorf("%s %s (%s) ok = %v (%s), want %v", kind, name, w.hosts[name].addr, a.OK, a.Detail, wantOpen[name])
			}
			// A denied TCP connect is reset at once, a denied UDP
			// datagram answered with a port unreachable; a ping gets no
			// answer and gives up after its one-second timeout.
			if !wantOpen[name] && kind != "ping" && a.MS >= 1000 {
				t.Errorf("denied %s to %s took %d ms, want under 1000 (%s)", kind, name, a.MS, a.Detail)
			}
		}
		if !wantOpen[name] && after[name] != before[name] {
			t.Errorf("denied stand-in %s received %d connections or datagrams", name, after[name]-before[name])
		}
	}
	if a := res["resolver/dns"]; !a.OK || a.Detail != w.publicAddr.String() {
		t.Errorf("resolving through the configured resolver = %+v, want %v", a, w.publicAddr)
	}
	if a := res["rogue/dns"]; a.OK {
		t.Errorf("a DNS query to another server was answered: %+v", a)
	}
	if after["rogue"] != before["rogue"] {
		t.Errorf("the rogue DNS server received %d datagrams", after["rogue"]-before["rogue"])
	}
	reasons := deniedReasons(t, f, "egress-open")
	for _, r := range []string{"metadata", "private", "node", "platform", "dns_not_resolver"} {
		if reasons[r] == 0 {
			t.Errorf("no egress event with reason %s (events: %v)", r, reasons)
		}
	}
	// metadata: TCP and HTTP each reset one SYN (at least), a UDP datagram
	// and a ping dropped.
	if reasons["metadata"] < 4 {
		t.Errorf("metadata denials = %d, want at least 4", reasons["metadata"])
	}
	for _, key := range slices.Sorted(maps.Keys(res)) {
		a := res[key]
		t.Logf("%-20s ok=%-5v %4d ms  %s", key, a.OK, a.MS, a.Detail)
	}
	t.Logf("egress events by reason: %v", reasons)

	// Platform CIDRs change at run time: add the late platform host to the
	// file and send SIGHUP.
	if err := os.WriteFile(platformFile, []byte(worldPlatform+"\n"+w.platformLateAddr.String()+"/32\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	agent.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, "agentd to reload the platform CIDRs", func() bool {
		return strings.Contains(agent.out.String(), "platform CIDRs reloaded")
	})
	res = runProbe(t, f, w, "egress-platform", false, "platform-late", "public")
	if res["platform-late/tcp"].OK || !res["public/tcp"].OK {
		t.Errorf("after reload: platform-late tcp ok = %v, public tcp ok = %v; want false, true",
			res["platform-late/tcp"].OK, res["public/tcp"].OK)
	}
	if r := deniedReasons(t, f, "egress-platform"); r["platform"] == 0 {
		t.Errorf("after reload, no platform denial: %v", r)
	}

	// --no-internet: nothing answers, not even the resolver.
	before = w.hits()
	res = runProbe(t, f, w, "egress-none", true, all...)
	after = w.hits()
	for key, a := range res {
		if a.OK {
			t.Errorf("--no-internet step: %s succeeded (%s)", key, a.Detail)
		}
	}
	for name, n := range after {
		if n != before[name] {
			t.Errorf("--no-internet step reached stand-in %s (%d hits)", name, n-before[name])
		}
	}
	if len(res) != len(all)*4+2 {
		t.Errorf("--no-internet probe reported %d attempts, want %d", len(res), len(all)*4+2)
	}
	agent.stop(30 * time.Second)
	checkNodeNetClean(t, w)
}

// checkNodeNetClean checks that the node namespace holds no sandbox veth
// and that no sandbox namespace is left.
func checkNodeNetClean(t *testing.T, w *world) {
	t.Helper()
	var names []string
	err := inNS(w.nodeH, func() error {
		ifs, err := netInterfaces()
		names = ifs
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, "rv") {
			t.Errorf("sandbox veth %s left in the node namespace", n)
		}
	}
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "rodon-") {
			t.Errorf("sandbox namespace %s left", e.Name())
		}
	}
}
