package scheduler

import (
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/pki/pkitest"
)

// attack is one attempt to get past the trust boundary. It returns nil
// when the cluster refused it as it should (a 403 naming the identity,
// or a failed handshake), else what went wrong.
type attack struct {
	name string
	try  func() error
}

// refused403 sends the request as who to m and wants a 403 naming
// blamed (who, or the identity the request claims to act for).
func (c *serverCluster) refused403(who string, m *testServer, method, path, body string, header http.Header, blamed string) error {
	status, answer, err := c.sendWith(c.identity(who).tr, m, method, path, body, header)
	if err != nil {
		return err
	}
	if status != http.StatusForbidden || !strings.Contains(string(answer), `"forbidden"`) || !strings.Contains(string(answer), blamed) {
		return errors.New(method + " " + path + " = " + strconv.Itoa(status) + " " + strings.TrimSpace(string(answer)) + ", want 403 forbidden naming " + blamed)
	}
	return nil
}

// handshakeFails sends a request to m through a TLS client config and
// wants it to fail before any answer.
func (c *serverCluster) handshakeFails(cfg *tls.Config, m *testServer) error {
	tr := &http.Transport{TLSClientConfig: cfg}
	defer tr.CloseIdleConnections()
	status, answer, err := c.sendWith(tr, m, http.MethodPost, "/v1/agent/heartbeat", `{"node":"n1","health":{"state":"ready"}}`, nil)
	if err == nil {
		return errors.New("answered " + strconv.Itoa(status) + " " + strings.TrimSpace(string(answer)) + ", want a failed handshake")
	}
	return nil
}

// raftVote sends a RequestVote for term, as member m1 asking for
// leadership, to addr over a Raft transport on stream (a plain TCP one
// when nil), and returns the transport's error.
func raftVote(t *testing.T, stream raft.StreamLayer, addr string, term uint64) (*raft.RequestVoteResponse, error) {
	t.Helper()
	var trans *raft.NetworkTransport
	if stream == nil {
		tcp, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 2*time.Second, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		trans = tcp
	} else {
		trans = raft.NewNetworkTransport(stream, 1, 2*time.Second, io.Discard)
	}
	defer trans.Close()
	defer trans.CloseStreams()
	req := &raft.RequestVoteRequest{
		RPCHeader:          raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("m1"), Addr: []byte(addr)},
		Term:               term,
		LastLogIndex:       1 << 40,
		LastLogTerm:        term,
		LeadershipTransfer: true,
	}
	var resp raft.RequestVoteResponse
	err := trans.RequestVote("m0", raft.ServerAddress(addr), req, &resp)
	return &resp, err
}

// raftStreamAs is a TLS Raft stream layer presenting src's certificate.
func raftStreamAs(t *testing.T, src *pki.Source) *raftStream {
	t.Helper()
	s, err := listenRaft("127.0.0.1:0", src)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// term is member m's current Raft term.
func term(t *testing.T, m *testServer) uint64 {
	t.Helper()
	m.srv.raft.mu.Lock()
	ra := m.srv.raft.ra
	m.srv.raft.mu.Unlock()
	n, err := strconv.ParseUint(ra.Stats()["term"], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAttacks is issue 9's attack table: three members with mutual TLS on
// loopback (HTTP and Raft's NetworkTransport over the TLS stream layer),
// two agents' nodes with running steps, and every attempt across the trust
// boundary refused with a 403 or a failed handshake, the replicated state
// and every member's Raft log and term the same before and after each.
// The allowed counterparts then work, so that the refusals are the
// boundary's, not a broken cluster's.
func TestAttacks(t *testing.T) {
	// silent are connections left open across the members' shutdown, which
	// must end their handlers (checkNoServerGoroutines); closed last.
	var silent []net.Conn
	t.Cleanup(func() {
		for _, c := range silent {
			c.Close()
		}
	})
	c := newTLSCluster(t, 3, func(cfg *Config) { cfg.NodeTTL = time.Hour })
	applyFixture(t, c)
	leader := c.waitLeader()
	follower := c.follower()
	targets := []*testServer{leader, follower}

	otherCA := pkitest.New(t)
	expired := c.ca.Expired(t, pki.RoleAgent, "old")
	expiredPair, err := tls.LoadX509KeyPair(expired.Cert, expired.Key)
	if err != nil {
		t.Fatal(err)
	}

	var attacks []attack
	add := func(name string, try func() error) { attacks = append(attacks, attack{name, try}) }
	for _, m := range targets {
		at := " (to a follower)"
		if m == leader {
			at = " (to the leader)"
		}
		add("no client certificate"+at, func() error {
			return c.handshakeFails(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}, m)
		})
		add("a certificate of another CA"+at, func() error {
			return c.handshakeFails(otherCA.Source(t, pki.RoleAgent, "n1").ClientConfig(pki.AnyIdentity), m)
		})
		add("an expired certificate"+at, func() error {
			return c.handshakeFails(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{expiredPair}}, m)
		})

		// An agent acting for another node.
		n1 := "agent/n1"
		add("agent n1 registers as n2"+at, func() error {
			return c.refused403(n1, m, "POST", "/v1/agent/register",
				`{"node":"n2","address":"127.0.0.1:9999","capacity":{"cpu":64,"memory_bytes":1099511627776},"health":{"state":"ready"}}`, nil, n1)
		})
		add("agent n1 heartbeats as n2"+at, func() error {
			return c.refused403(n1, m, "POST", "/v1/agent/heartbeat", `{"node":"n2","health":{"state":"ready"}}`, nil, n1)
		})
		add("agent n1 polls n2's assignments"+at, func() error {
			return c.refused403(n1, m, "GET", "/v1/agent/assignments?node=n2", "", nil, n1)
		})
		reports := []struct{ what, path, body string }{
			{"phase", "phase", `{"node":"NODE","attempt":1,"state":"running"}`},
			{"exit", "exit", `{"node":"NODE","attempt":1,"record":{"state":"exited","exit_code":0,"terminated_by":"exit"}}`},
			{"events", "events", `{"node":"NODE","attempt":1,"events":[{"kind":"warning","message":"forged"}]}`},
			{"cancel-confirmed", "cancel-confirmed", `{"node":"NODE","attempt":1}`},
		}
		for _, rp := range reports {
			add("agent n1 reports "+rp.what+" as n2"+at, func() error {
				return c.refused403(n1, m, "POST", "/v1/agent/steps/s2/"+rp.path, strings.ReplaceAll(rp.body, "NODE", "n2"), nil, n1)
			})
			// The report names n1 truthfully, but s2 runs on n2: the leader
			// refuses it (a follower forwards it there).
			add("agent n1 reports "+rp.what+" for a step on n2"+at, func() error {
				return c.refused403(n1, m, "POST", "/v1/agent/steps/s2/"+rp.path, strings.ReplaceAll(rp.body, "NODE", "n1"), nil, n1)
			})
		}

		// A gateway changing membership or restoring a snapshot.
		gw := "gateway/gw"
		add("gateway joins the cluster"+at, func() error {
			return c.refused403(gw, m, "POST", "/v1/members/join", `{"id":"gw","raft_address":"127.0.0.1:9998","http_address":"127.0.0.1:9997"}`, nil, gw)
		})
		add("gateway joins as a member's id"+at, func() error {
			return c.refused403(gw, m, "POST", "/v1/members/join", `{"id":"m3","raft_address":"127.0.0.1:9998","http_address":"127.0.0.1:9997"}`, nil, gw)
		})
		add("gateway restores a snapshot"+at, func() error {
			return c.refused403(gw, m, "POST", "/v1/snapshot/restore", `{"version":1,"nodes":[],"steps":[]}`, nil, gw)
		})
		add("gateway removes a member"+at, func() error {
			return c.refused403(gw, m, "POST", "/v1/members/remove", `{"id":"m2"}`, nil, gw)
		})

		// An operator acting as an agent.
		ops := "operator/ops"
		add("operator registers a node"+at, func() error {
			return c.refused403(ops, m, "POST", "/v1/agent/register",
				`{"node":"n1","address":"127.0.0.1:9999","capacity":{"cpu":1,"memory_bytes":1},"health":{"state":"ready"}}`, nil, ops)
		})
		add("operator heartbeats for a node"+at, func() error {
			return c.refused403(ops, m, "POST", "/v1/agent/heartbeat", `{"node":"n1","health":{"state":"ready"}}`, nil, ops)
		})
		add("operator polls assignments"+at, func() error {
			return c.refused403(ops, m, "GET", "/v1/agent/assignments?node=n1", "", nil, ops)
		})
		add("operator reports an exit"+at, func() error {
			return c.refused403(ops, m, "POST", "/v1/agent/steps/s1/exit", strings.ReplaceAll(reports[1].body, "NODE", "n1"), nil, ops)
		})

		// Forged forwarding markers: only a member forwards.
		forged := func(claim string) http.Header {
			return http.Header{ForwardedForHeader: {claim}, ForwardedHeader: {"m1"}}
		}
		add("agent n1 forwards as agent n2"+at, func() error {
			return c.refused403(n1, m, "POST", "/v1/agent/heartbeat", `{"node":"n2","health":{"state":"ready"}}`, forged("agent/n2"), n1)
		})
		add("agent n1 sends only the forwarded-by marker"+at, func() error {
			return c.refused403(n1, m, "POST", "/v1/agent/heartbeat", `{"node":"n1","health":{"state":"ready"}}`,
				http.Header{ForwardedHeader: {"m1"}}, n1)
		})
		add("gateway forwards as a member joining"+at, func() error {
			return c.refused403(gw, m, "POST", "/v1/members/join", `{"id":"m3","raft_address":"127.0.0.1:9998","http_address":"127.0.0.1:9997"}`,
				forged("member/m3"), gw)
		})
		add("gateway forwards as an operator restoring"+at, func() error {
			return c.refused403(gw, m, "POST", "/v1/snapshot/restore", `{"version":1,"nodes":[],"steps":[]}`, forged("operator/ops"), gw)
		})
		add("operator forwards as the gateway writing a record"+at, func() error {
			return c.refused403(ops, m, "PUT", "/v1/records/users/a", `{"version":1,"value":{"owner":"eve"}}`, forged("gateway/gw"), ops)
		})
		add("operator forwards as agent n2"+at, func() error {
			return c.refused403(ops, m, "POST", "/v1/agent/heartbeat", `{"node":"n2","health":{"state":"ready"}}`, forged("agent/n2"), ops)
		})
		// A member's forwarding is trusted, and what it forwards is
		// authorized as the caller it names.
		add("a member forwards agent n1 heartbeating as n2"+at, func() error {
			return c.refused403("member/m1", m, "POST", "/v1/agent/heartbeat", `{"node":"n2","health":{"state":"ready"}}`,
				http.Header{ForwardedForHeader: {"agent/n1"}}, "agent/n1")
		})
	}

	// The Raft port speaks TLS with members only.
	raftAddr := leader.srv.cfg.RaftAddr
	add("a raw TCP connection to the Raft port", func() error {
		conn, err := net.Dial("tcp", raftAddr)
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.Copy(io.Discard, conn)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return errors.New("the connection is still open 5s later, want it dropped")
		}
		return nil
	})
	add("a silent TCP connection to each Raft port", func() error {
		for _, m := range c.members {
			conn, err := net.Dial("tcp", m.srv.cfg.RaftAddr)
			if err != nil {
				return err
			}
			silent = append(silent, conn)
		}
		return nil
	})
	add("a plaintext Raft RequestVote with a higher term", func() error {
		if _, err := raftVote(t, nil, raftAddr, term(t, leader)+100); err == nil {
			return errors.New("RequestVote answered, want the connection dropped")
		}
		return nil
	})
	add("a Raft RequestVote over TLS with a gateway certificate", func() error {
		if _, err := raftVote(t, raftStreamAs(t, c.identity("gateway/gw").src), raftAddr, term(t, leader)+100); err == nil {
			return errors.New("RequestVote answered, want the handshake refused")
		}
		return nil
	})
	add("a Raft RequestVote over TLS with an agent certificate", func() error {
		if _, err := raftVote(t, raftStreamAs(t, c.identity("agent/n1").src), raftAddr, term(t, leader)+100); err == nil {
			return errors.New("RequestVote answered, want the handshake refused")
		}
		return nil
	})
	add("a Raft RequestVote over TLS with a member certificate of another CA", func() error {
		if _, err := raftVote(t, raftStreamAs(t, otherCA.Source(t, pki.RoleMember, "m1")), raftAddr, term(t, leader)+100); err == nil {
			return errors.New("RequestVote answered, want the handshake refused")
		}
		return nil
	})

	start := c.settled()
	for _, a := range attacks {
		before := c.settled()
		if err := a.try(); err != nil {
			t.Errorf("%s: not refused: %v", a.name, err)
		}
		if after := c.settled(); after.String() != before.String() {
			t.Errorf("%s changed the state:\nbefore %s\nafter  %s", a.name, before, after)
		}
	}
	if end := c.settled(); end.String() != start.String() {
		t.Errorf("the attacks changed the state:\nbefore %s\nafter  %s", start, end)
	}
	if l := c.waitLeader(); l != leader {
		t.Errorf("the leader is %s after the attacks, want %s still", l.id, leader.id)
	}

	// The allowed counterparts work.
	for _, m := range targets {
		for _, ok := range []struct {
			who, method, path, body string
			header                  http.Header
			want                    int
		}{
			{"agent/n1", "POST", "/v1/agent/heartbeat", `{"node":"n1","health":{"state":"ready"}}`, nil, 200},
			{"agent/n1", "GET", "/v1/agent/assignments?node=n1", "", nil, 200},
			{"agent/n1", "POST", "/v1/agent/steps/s1/phase", `{"node":"n1","attempt":1,"state":"running"}`, nil, 200},
			{"agent/n2", "POST", "/v1/agent/steps/s2/events", `{"node":"n2","attempt":1,"events":[{"kind":"warning","message":"ok"}]}`, nil, 200},
			{"gateway/gw", "POST", "/v1/steps", unplaceableStep, nil, 422},
			{"gateway/gw", "PUT", "/v1/records/users/" + m.id, `{"version":0,"value":{}}`, nil, 200},
			{"operator/ops", "GET", "/v1/snapshot", "", nil, 200},
			{"operator/ops", "POST", "/v1/nodes/n2/drain", `{}`, nil, 200},
			{"operator/ops", "POST", "/v1/nodes/n2/undrain", ``, nil, 200},
			{"member/m1", "POST", "/v1/agent/heartbeat", `{"node":"n1","health":{"state":"ready"}}`, http.Header{ForwardedForHeader: {"agent/n1"}}, 200},
		} {
			status, answer := c.send(ok.who, m, ok.method, ok.path, ok.body, ok.header)
			// A loaded machine may lose the leader for a moment: this part
			// is about who may act, so an election is waited out.
			for try := 0; status == http.StatusServiceUnavailable && try < 5; try++ {
				c.waitLeader()
				status, answer = c.send(ok.who, m, ok.method, ok.path, ok.body, ok.header)
			}
			if status != ok.want {
				t.Errorf("%s %s as %s to %s = %d %s, want %d", ok.method, ok.path, ok.who, m.id, status, strings.TrimSpace(string(answer)), ok.want)
			}
		}
	}
	// A member's Raft RPC over TLS is answered (its stale term gets no
	// vote).
	if resp, err := raftVote(t, raftStreamAs(t, c.identity("member/m1").src), raftAddr, 1); err != nil || resp.Granted {
		t.Errorf("RequestVote of a member for term 1 = %+v, %v; want an answer that grants nothing", resp, err)
	}
	c.settled()
}

// TestForwardVerifiesTheLeader: a follower forwards only to a member. With
// the leader's HTTP address recorded as that of a server with a valid
// certificate of another role, a forwarded write fails the handshake, is
// answered no_leader (nothing was applied; retry), and the impostor never
// sees the request or the caller's identity.
func TestForwardVerifiesTheLeader(t *testing.T) {
	c := newTLSCluster(t, 3, nil)
	leader := c.waitLeader()
	follower := c.follower()
	var calls atomic.Int32
	impostor := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	impostor.TLS = c.ca.Source(t, pki.RoleGateway, "evil").ServerConfig(pki.AnyIdentity)
	impostor.Config.ErrorLog = log.New(io.Discard, "", 0)
	impostor.StartTLS()
	defer impostor.Close()
	addr := strings.TrimPrefix(impostor.URL, "https://")
	if _, err := leader.srv.raft.Apply(t.Context(), cluster.SetMember{ID: leader.id, RaftAddress: leader.srv.cfg.RaftAddr,
		HTTPAddress: addr, At: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the follower to learn the forged address", func() bool {
		m, _ := follower.srv.fsm.State().Member(leader.id)
		return m.HTTPAddress == addr
	})
	before := c.settled()
	status, answer := c.send("gateway/gw", follower, "POST", "/v1/steps", unplaceableStep, nil)
	if status != http.StatusServiceUnavailable || !strings.Contains(string(answer), api.CodeNoLeader) {
		t.Errorf("POST /v1/steps forwarded to an impostor = %d %s, want 503 no_leader", status, answer)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the impostor got %d requests, want none", n)
	}
	if after := c.settled(); after.String() != before.String() {
		t.Errorf("the forwarded write changed the state:\nbefore %s\nafter  %s", before, after)
	}
}
