package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// TestTLSFleet is issue 9's "Done means" 1: three scheduler members, two
// agents and a gateway, every connection between them mutual TLS on
// loopback; a run of two steps goes through the gateway, the leader is
// SIGKILLed while the first step runs, and the run completes. Every
// connection was authenticated, as both ends count it: the servers' and
// the clients' handshake counters (rodon_tls_handshakes_total) show each
// expected pair of roles, and none refused; plain HTTP gets no answer
// from any member or agent.
func TestTLSFleet(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	f := &fleet{}
	startSchedulers(t, f, 3)
	startAgents(t, f, 2)
	g, owner, wsID := ownerWithWorkspace(t, f, "tls")

	op := owner.startRun(wsID,
		map[string]any{"image": "base", "args": []string{"sh", "-c", "echo before; sleep 4; echo after"}, "cpu": 0.5, "memory": "128Mi"},
		map[string]any{"image": "base", "args": []string{"sh", "-c", "echo second"}, "cpu": 0.5, "memory": "128Mi"},
	)
	// The first step's first line has come through scheduler, agent and
	// gateway: kill the leader while the step runs.
	st := owner.openStream(op.Steps[0].ID, 0)
	var last int64
	for {
		fr, err := st.next()
		if err != nil {
			t.Fatalf("stream of step 0 before the leader kill: %v", err)
		}
		last = fr.Seq
		if fr.Kind == "stdout" {
			break
		}
	}
	c := newClient(t, f.urls())
	killed := killLeader(t, f, []*client.Client{c})
	t.Logf("killed the leader %s while step 0 ran", killed)
	rest := st.untilExit()
	done := owner.waitRun(op.ID, 3*time.Minute)
	if done.State != "succeeded" || len(done.Steps) != 2 {
		t.Fatalf("run after the leader kill = %+v, want succeeded with 2 steps", done)
	}
	if got := string(stdout(t, rest, last+1)); !strings.HasSuffix(got, "after\n") {
		t.Errorf("step 0 stdout after the kill = %q, want it to end with %q", got, "after\n")
	}
	if got := string(stdout(t, owner.openStream(op.Steps[1].ID, 0).untilExit(), 1)); got != "second\n" {
		t.Errorf("step 1 stdout = %q, want %q", got, "second\n")
	}

	// Both ends of every kind of connection counted it authenticated.
	type end struct {
		name, url string
	}
	var members, agents []end
	for i, a := range f.httpAddrs {
		if fmt.Sprintf("m%d", i+1) != killed {
			members = append(members, end{fmt.Sprintf("m%d", i+1), "https://" + a + "/metrics"})
		}
	}
	for i, a := range f.agentAddrs {
		agents = append(agents, end{agentName(i), "https://" + a + "/metrics"})
	}
	ops := clusterHTTP(t, pki.RoleOperator, operatorName)
	// sum adds up the ends' successful handshakes of side with role; any
	// refused handshake fails the test.
	sum := func(ends []end, side, role string) (ok float64) {
		for _, e := range ends {
			hs := handshakes(t, ops, e.url)
			ok += hs[pki.HandshakeKey{Side: side, PeerRole: role, Result: pki.ResultOK}]
			for k, v := range hs {
				if k.Result == pki.ResultRefused {
					t.Errorf("%s refused %v handshakes %+v", e.name, v, k)
				}
			}
		}
		return ok
	}
	for _, want := range []struct {
		who        string
		ends       []end
		side, peer string
	}{
		// The members as servers saw every kind of client...
		{"members", members, pki.SideServer, "member"},
		{"members", members, pki.SideServer, "agent"},
		{"members", members, pki.SideServer, "gateway"},
		{"members", members, pki.SideServer, "operator"},
		// ...and as clients (Raft, forwarding, joins) only members.
		{"members", members, pki.SideClient, "member"},
		// The agents served the gateway's stream relay (and each dialled
		// members: below).
		{"agents", agents, pki.SideServer, "gateway"},
		// The gateway dialled members and the agent of the run.
		{"the gateway", []end{{"gateway", g.site + "/metrics"}}, pki.SideClient, "member"},
		{"the gateway", []end{{"gateway", g.site + "/metrics"}}, pki.SideClient, "agent"},
	} {
		if sum(want.ends, want.side, want.peer) == 0 {
			t.Errorf("%s counted no %s-side handshake with a %s: want every connection between them authenticated",
				want.who, want.side, want.peer)
		}
	}
	for _, e := range agents {
		if sum([]end{e}, pki.SideClient, "member") == 0 {
			t.Errorf("agent %s counted no handshake with a member", e.name)
		}
	}
	for _, p := range []string{"agent", "gateway", "operator"} {
		if ok := sum(members, pki.SideClient, p); ok != 0 {
			t.Errorf("members dialled %v servers of role %s, want members only", ok, p)
		}
	}

	// Nothing answers plain HTTP.
	for _, a := range append(append([]string{}, f.httpAddrs...), f.agentAddrs...) {
		if a == f.httpAddrs[killedIndex(killed)] {
			continue
		}
		resp, err := http.Get("http://" + a + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Errorf("plain HTTP GET http://%s/healthz = %s, want no answer of the API", a, resp.Status)
			}
		}
	}
}

func killedIndex(id string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(id, "m"))
	return n - 1
}

// handshakes scrapes url's rodon_tls_handshakes_total.
func handshakes(t *testing.T, hc *http.Client, url string) map[pki.HandshakeKey]float64 {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s = %s: %s", url, resp.Status, b)
	}
	out := map[pki.HandshakeKey]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "rodon_tls_handshakes_total{")
		if !ok {
			continue
		}
		labels, value, _ := strings.Cut(rest, "} ")
		var k pki.HandshakeKey
		for kv := range strings.SplitSeq(labels, ",") {
			name, v, _ := strings.Cut(kv, "=")
			v = strings.Trim(v, `"`)
			switch name {
			case "side":
				k.Side = v
			case "peer_role":
				k.PeerRole = v
			case "result":
				k.Result = v
			}
		}
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("%s: bad sample %q", url, line)
		}
		out[k] += n
	}
	if len(out) == 0 {
		t.Fatalf("%s has no rodon_tls_handshakes_total", url)
	}
	return out
}
