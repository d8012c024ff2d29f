package scheduler

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/pki/pkitest"
)

// matrixCase is one request of the authorization matrix.
type matrixCase struct {
	// name tells variants of a route apart ("" for the plain call).
	name string
	// path and body of the request; body may be nil for none.
	path func(c *serverCluster) string
	body func(c *serverCluster) string
	// allow are the identities (ROLE/NAME) that may send it; every other
	// identity of matrixIdentities is refused with 403.
	allow []string
	// ok is the status of an allowed call.
	ok int
}

func fixedPath(s string) func(*serverCluster) string { return func(*serverCluster) string { return s } }

// The identities of the matrix: m0 is the member under test, m9 a member
// of the same CA that is not m0.
var matrixIdentities = []string{"member/m0", "member/m9", "agent/n1", "agent/n2", "gateway/gw", "operator/ops"}

var (
	anyone       = matrixIdentities
	clientIDs    = []string{"gateway/gw", "operator/ops"}
	operatorOnly = []string{"operator/ops"}
	gatewayOnly  = []string{"gateway/gw"}
	agentN1      = []string{"agent/n1"}
)

const (
	// unplaceableStep asks more than any node has: it is answered 422 and
	// recorded failed at once, with nothing left for the leader loops to do.
	unplaceableStep = `{"image":"base","args":["true"],"cpu":64,"memory_bytes":1073741824}`
	registerN1      = `{"node":"n1","address":"127.0.0.1:7201","capacity":{"cpu":4,"memory_bytes":8589934592},"health":{"state":"ready"}}`
)

// matrixRows has the requests of every route the member serves;
// TestAuthorizationMatrix fails for a route without one. The fixture
// (newMatrixCluster) has nodes n1 and n2, steps s1 running on n1, s2
// running on n2, s3 on n1 cancelled and exited but not confirmed, record
// users/a and one audit entry. Within a route, the refused calls come
// first, then the allowed ones in the order of allow.
var matrixRows = map[string][]matrixCase{
	"GET /healthz": {
		{path: fixedPath("/healthz"), allow: anyone, ok: 200},
		{name: "read-index", path: fixedPath("/healthz?read-index"), allow: []string{"member/m0", "member/m9"}, ok: 200},
	},
	"GET /metrics":    {{path: fixedPath("/metrics"), allow: anyone, ok: 200}},
	"GET /v1/members": {{path: fixedPath("/v1/members"), allow: clientIDs, ok: 200}},
	"POST /v1/members/join": {{path: fixedPath("/v1/members/join"), allow: []string{"member/m0"}, ok: 200,
		body: func(c *serverCluster) string {
			cfg := c.members[0].srv.cfg
			return fmt.Sprintf(`{"id":"m0","raft_address":%q,"http_address":%q}`, cfg.RaftAddr, cfg.HTTPAddr)
		}}},
	"GET /v1/members/env-key": {{path: fixedPath("/v1/members/env-key"), allow: []string{"member/m0", "member/m9"}, ok: 200}},
	"POST /v1/members/remove": {{path: fixedPath("/v1/members/remove"), body: fixedPath(`{"id":"nobody"}`), allow: operatorOnly, ok: 404}},
	"GET /v1/snapshot":        {{path: fixedPath("/v1/snapshot"), allow: operatorOnly, ok: 200}},
	"POST /v1/snapshot/restore": {{path: fixedPath("/v1/snapshot/restore"), allow: operatorOnly, ok: 200,
		body: func(c *serverCluster) string {
			b, err := json.Marshal(c.members[0].srv.fsm.document())
			if err != nil {
				c.t.Fatal(err)
			}
			return string(b)
		}}},

	"GET /v1/nodes":               {{path: fixedPath("/v1/nodes"), allow: clientIDs, ok: 200}},
	"GET /v1/nodes/{id}":          {{path: fixedPath("/v1/nodes/n1"), allow: clientIDs, ok: 200}},
	"POST /v1/nodes/{id}/drain":   {{path: fixedPath("/v1/nodes/n2/drain"), body: fixedPath(`{}`), allow: operatorOnly, ok: 200}},
	"POST /v1/nodes/{id}/undrain": {{path: fixedPath("/v1/nodes/n2/undrain"), allow: operatorOnly, ok: 200}},

	"POST /v1/steps":                {{path: fixedPath("/v1/steps"), body: fixedPath(unplaceableStep), allow: clientIDs, ok: 422}},
	"GET /v1/steps":                 {{path: fixedPath("/v1/steps"), allow: clientIDs, ok: 200}},
	"POST /v1/env/seal":             {{path: fixedPath("/v1/env/seal"), body: fixedPath(`{"step":"later-1","env":["A=b"]}`), allow: clientIDs, ok: 200}},
	"GET /v1/steps/{id}":            {{path: fixedPath("/v1/steps/s1"), allow: clientIDs, ok: 200}},
	"POST /v1/steps/{id}/cancel":    {{path: fixedPath("/v1/steps/s2/cancel"), body: fixedPath(`{"reason":"matrix"}`), allow: clientIDs, ok: 200}},
	"GET /v1/steps/{id}/stream-url": {{path: fixedPath("/v1/steps/s1/stream-url"), allow: clientIDs, ok: 200}},

	"POST /v1/agent/register": {
		{path: fixedPath("/v1/agent/register"), body: fixedPath(registerN1), allow: agentN1, ok: 200},
	},
	"POST /v1/agent/heartbeat": {
		{path: fixedPath("/v1/agent/heartbeat"), body: fixedPath(`{"node":"n1","health":{"state":"ready"}}`), allow: agentN1, ok: 200},
	},
	"GET /v1/agent/assignments": {
		{path: fixedPath("/v1/agent/assignments?node=n1"), allow: agentN1, ok: 200},
		{name: "no node", path: fixedPath("/v1/agent/assignments")},
	},
	"POST /v1/agent/steps/{id}/phase": {
		{path: fixedPath("/v1/agent/steps/s1/phase"), body: fixedPath(`{"node":"n1","attempt":1,"state":"running"}`), allow: agentN1, ok: 200},
		// agent/n2 names itself, but s1 runs on n1.
		{name: "step of another node", path: fixedPath("/v1/agent/steps/s1/phase"), body: fixedPath(`{"node":"n2","attempt":1,"state":"running"}`)},
	},
	"POST /v1/agent/steps/{id}/events": {
		{path: fixedPath("/v1/agent/steps/s1/events"), body: fixedPath(`{"node":"n1","attempt":1,"events":[{"kind":"warning","message":"matrix"}]}`),
			allow: agentN1, ok: 200},
		{name: "step of another node", path: fixedPath("/v1/agent/steps/s2/events"),
			body: fixedPath(`{"node":"n1","attempt":1,"events":[{"kind":"warning","message":"matrix"}]}`)},
	},
	"POST /v1/agent/steps/{id}/exit": {
		{path: fixedPath("/v1/agent/steps/s1/exit"), body: fixedPath(`{"node":"n1","attempt":1,"record":{"state":"exited","exit_code":0,"terminated_by":"exit"}}`),
			allow: agentN1, ok: 200},
		{name: "step of another node", path: fixedPath("/v1/agent/steps/s2/exit"),
			body: fixedPath(`{"node":"n1","attempt":1,"record":{"state":"exited","exit_code":0,"terminated_by":"exit"}}`)},
	},
	"POST /v1/agent/steps/{id}/cancel-confirmed": {
		{path: fixedPath("/v1/agent/steps/s3/cancel-confirmed"), body: fixedPath(`{"node":"n1","attempt":1}`), allow: agentN1, ok: 200},
		{name: "step of another node", path: fixedPath("/v1/agent/steps/s2/cancel-confirmed"), body: fixedPath(`{"node":"n1","attempt":1}`)},
	},
	// Each report's step is checked by the handler: an item for another
	// node's step is refused in its result (TestAgentReports).
	"POST /v1/agent/reports": {
		{path: fixedPath("/v1/agent/reports"), body: fixedPath(`{"node":"n1","reports":[{"kind":"events","events":{"step":"s1","node":"n1","attempt":1,"events":[{"kind":"warning","message":"matrix"}]}}]}`),
			allow: agentN1, ok: 200},
	},

	"POST /v1/agent/uploads": {
		{path: fixedPath("/v1/agent/uploads"), body: fixedPath(`{"step":"s1","node":"n1","attempt":1,"blobs":[]}`), allow: agentN1, ok: 409},
		{name: "another node", path: fixedPath("/v1/agent/uploads"), body: fixedPath(`{"step":"s2","node":"n2","attempt":1,"blobs":[]}`),
			allow: []string{"agent/n2"}, ok: 409},
		{name: "step of another node", path: fixedPath("/v1/agent/uploads"), body: fixedPath(`{"step":"s2","node":"n1","attempt":1,"blobs":[]}`)},
	},

	"GET /v1/workspaces/{id}/revisions":          {{path: fixedPath("/v1/workspaces/ws-m/revisions"), allow: clientIDs, ok: 200}},
	"GET /v1/workspaces/{id}/revisions/{rev}":    {{path: fixedPath("/v1/workspaces/ws-m/revisions/rev-none"), allow: clientIDs, ok: 404}},
	"GET /v1/workspaces/{id}/tree":               {{path: fixedPath("/v1/workspaces/ws-m/tree"), allow: clientIDs, ok: 200}},
	"GET /v1/workspaces/{id}/files/{path...}":    {{path: fixedPath("/v1/workspaces/ws-m/files/none.txt"), allow: clientIDs, ok: 404}},
	"PUT /v1/workspaces/{id}/files/{path...}":    {{path: fixedPath("/v1/workspaces/ws-m/files/a.txt"), body: fixedPath(`{"a":1}`), allow: clientIDs, ok: 201}},
	"DELETE /v1/workspaces/{id}/files/{path...}": {{path: fixedPath("/v1/workspaces/ws-m/files/none.txt"), allow: clientIDs, ok: 404}},
	"POST /v1/workspaces/{id}/uploads": {{path: fixedPath("/v1/workspaces/ws-m/uploads"), allow: clientIDs, ok: 200,
		body: fixedPath(`{"files":[{"path":"b.txt","sha256":"` + digestOf([]byte("b")) + `","size":1}]}`)}},
	"GET /v1/workspaces/{id}/archive":  {{path: fixedPath("/v1/workspaces/ws-m/archive"), allow: clientIDs, ok: 200}},
	"GET /v1/workspaces/{id}/diff":     {{path: fixedPath("/v1/workspaces/ws-m/diff"), allow: clientIDs, ok: 200}},
	"POST /v1/workspaces/{id}/restore": {{path: fixedPath("/v1/workspaces/ws-m/restore"), body: fixedPath(`{"rev":"rev-none"}`), allow: clientIDs, ok: 404}},
	"GET /v1/blobs/{digest}":           {{path: fixedPath("/v1/blobs/" + digestOf([]byte("b"))), allow: anyone, ok: 403}},
	"PUT /v1/blobs/{digest}":           {{path: fixedPath("/v1/blobs/" + digestOf([]byte("b"))), body: fixedPath("b"), allow: anyone, ok: 403}},

	"GET /v1/agent/platform": {{path: fixedPath("/v1/agent/platform"), allow: []string{"agent/n1", "agent/n2"}, ok: 200}},

	"GET /v1/records/{kind}":         {{path: fixedPath("/v1/records/users"), allow: gatewayOnly, ok: 200}},
	"GET /v1/records/{kind}/{id}":    {{path: fixedPath("/v1/records/users/a"), allow: gatewayOnly, ok: 200}},
	"PUT /v1/records/{kind}/{id}":    {{path: fixedPath("/v1/records/users/b"), body: fixedPath(`{"version":0,"value":{"n":1}}`), allow: gatewayOnly, ok: 200}},
	"DELETE /v1/records/{kind}/{id}": {{path: fixedPath("/v1/records/users/b?version=1"), allow: gatewayOnly, ok: 204}},
	"POST /v1/audit":                 {{path: fixedPath("/v1/audit"), body: fixedPath(`{"entry":{"who":"matrix"}}`), allow: gatewayOnly, ok: 201}},
	"GET /v1/audit":                  {{path: fixedPath("/v1/audit"), allow: gatewayOnly, ok: 200}},
	"POST /v1/audit/drop":            {{path: fixedPath("/v1/audit/drop"), body: fixedPath(`{"before":1,"by":{"who":"matrix"}}`), allow: gatewayOnly, ok: 200}},
	"PUT /v1/gateways/{name}": {
		{name: "another gateway's name", path: fixedPath("/v1/gateways/gw2"), body: fixedPath(`{"addresses":["11.0.0.20"]}`)},
		{path: fixedPath("/v1/gateways/gw"), body: fixedPath(`{"addresses":["11.0.0.20"]}`), allow: gatewayOnly, ok: 200},
	},
}

// newMatrixCluster starts one member with TLS and the fixture of
// matrixRows.
func newMatrixCluster(t *testing.T) *serverCluster {
	t.Helper()
	c := newTLSCluster(t, 1, func(cfg *Config) { cfg.NodeTTL = time.Hour })
	applyFixture(t, c)
	return c
}

// applyFixture applies, through the leader's Raft, the fixture of
// matrixRows: nodes n1 and n2, steps s1 running on n1, s2 running on n2, s3
// on n1 cancelled and exited but not confirmed, record users/a and one
// audit entry. Nodes stay ready as long as the cluster's NodeTTL.
func applyFixture(t *testing.T, c *serverCluster) {
	t.Helper()
	m := c.waitLeader()
	now := time.Now().UTC()
	apply := func(cmds ...cluster.Command) {
		t.Helper()
		for _, cmd := range cmds {
			if _, err := m.srv.raft.Apply(t.Context(), cmd); err != nil {
				t.Fatalf("Apply(%s) = %v", cmd.CommandType(), err)
			}
		}
	}
	for i, n := range []cluster.NodeID{"n1", "n2"} {
		apply(cluster.RegisterNode{Node: n, Address: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(7201+i)),
			Capacity: cluster.Resources{CPU: 4, MemoryBytes: 8 * gib}, Health: cluster.Health{State: cluster.NodeReady}, At: now})
	}
	steps := []struct {
		id   cluster.StepID
		node cluster.NodeID
	}{{"s1", "n1"}, {"s2", "n2"}, {"s3", "n1"}}
	for _, s := range steps {
		sp := spec(1, gib, false)
		sp.Node = s.node
		apply(cluster.SubmitStep{Step: s.id, Spec: sp, At: now})
	}
	for _, s := range steps {
		waitFor(t, "step "+string(s.id)+" placed", func() bool {
			st, ok := m.srv.fsm.State().Step(s.id)
			return ok && st.State == cluster.StatePlaced
		})
		apply(cluster.StepPhase{Step: s.id, Node: s.node, Attempt: 1, State: cluster.StateStarting, Phases: cluster.Phases{Created: now}, At: now},
			cluster.StepPhase{Step: s.id, Node: s.node, Attempt: 1, State: cluster.StateRunning, Phases: cluster.Phases{Started: now}, At: now})
	}
	apply(cluster.RequestCancel{Step: "s3", Reason: "fixture", At: now},
		cluster.StepExit{Node: "n1", Attempt: 1, At: now, Record: cluster.ExitRecord{Step: "s3", State: cluster.StateCancelled,
			ExitCode: 143, TerminatedBy: cluster.ByUser, Phases: cluster.Phases{Exited: now}}},
		RecordPut{Kind: "users", ID: "a", Value: json.RawMessage(`{"n":0}`), At: now},
		AuditAppend{Entry: json.RawMessage(`{"who":"fixture"}`), At: now})
}

// send sends a request to member m as who (ROLE/NAME), with extra
// headers, and returns the answer's status and body.
func (c *serverCluster) send(who string, m *testServer, method, path, body string, header http.Header) (int, []byte) {
	c.t.Helper()
	status, b, err := c.sendWith(c.identity(who).tr, m, method, path, body, header)
	if err != nil {
		c.t.Fatalf("%s %s as %s: %v", method, path, who, err)
	}
	return status, b
}

// sendWith sends a request to member m through tr.
func (c *serverCluster) sendWith(tr http.RoundTripper, m *testServer, method, path, body string, header http.Header) (int, []byte, error) {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, m.url()+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// clusterState is what the members replicate, and Raft's view of it: it
// changes with any write that reaches the log, and with a term change.
type clusterState struct {
	// members are, per member, its FSM snapshot's digest, its last log
	// index and term.
	members []string
}

func (c *serverCluster) state() clusterState {
	c.t.Helper()
	var s clusterState
	for _, m := range c.members {
		m.srv.raft.mu.Lock()
		ra := m.srv.raft.ra
		m.srv.raft.mu.Unlock()
		if ra == nil {
			s.members = append(s.members, m.id+": stopped")
			continue
		}
		st := ra.Stats()
		s.members = append(s.members, fmt.Sprintf("%s: fsm %x, last index %s, term %s", m.id,
			sha256.Sum256(persist(c.t, m.srv.fsm)), st["last_log_index"], st["term"]))
	}
	return s
}

// settled waits until every member applied the leader's last entry, and
// returns the state then.
func (c *serverCluster) settled() clusterState {
	c.t.Helper()
	var s clusterState
	waitFor(c.t, "the members to converge", func() bool {
		s = c.state()
		digest := func(m string) string { _, d, _ := strings.Cut(m, ": "); return d }
		for _, m := range s.members[1:] {
			if digest(m) != digest(s.members[0]) {
				return false
			}
		}
		return true
	})
	return s
}

func (s clusterState) String() string { return strings.Join(s.members, "; ") }

// checkRefused checks that an answer is a 403 forbidden naming who.
func checkRefused(t *testing.T, what, who string, status int, body []byte) {
	t.Helper()
	var e api.Error
	if status != http.StatusForbidden || json.Unmarshal(body, &e) != nil || e.Detail.Code != api.CodeForbidden {
		t.Errorf("%s = %d %s, want 403 forbidden", what, status, bytes.TrimSpace(body))
		return
	}
	if !strings.Contains(e.Detail.Message, who) {
		t.Errorf("%s refused with %q, want the message to name %s", what, e.Detail.Message, who)
	}
}

// forbiddenCount is the value of m's forbidden counter for role and route.
func forbiddenCount(t *testing.T, m *testServer, role, route string) float64 {
	t.Helper()
	families, err := m.srv.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "rodon_scheduler_http_forbidden_total" {
			continue
		}
		for _, mt := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["role"] == role && labels["route"] == route {
				return mt.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestAuthorizationMatrix calls every route the member serves as every
// kind of identity: each refused call is a 403 naming the identity,
// counted by role and route, and changes nothing in the replicated state
// or the Raft log; each allowed call gets its status.
func TestAuthorizationMatrix(t *testing.T) {
	c := newMatrixCluster(t)
	m := c.members[0]
	served := m.srv.patterns
	for _, p := range served {
		if _, ok := matrixRows[p]; !ok {
			t.Errorf("route %s has no row in matrixRows: add one", p)
		}
	}
	for p := range matrixRows {
		if !slices.Contains(served, p) {
			t.Errorf("matrixRows has %s, which the member does not serve", p)
		}
	}
	for p := range accessTable {
		if !slices.Contains(served, p) {
			t.Errorf("accessTable has %s, which the member does not serve", p)
		}
	}

	for _, pattern := range served {
		method, _, _ := strings.Cut(pattern, " ")
		for _, tc := range matrixRows[pattern] {
			name := pattern
			if tc.name != "" {
				name += " (" + tc.name + ")"
			}
			path := tc.path(c)
			body := ""
			if tc.body != nil {
				body = tc.body(c)
			}
			for _, who := range matrixIdentities {
				if slices.Contains(tc.allow, who) {
					continue
				}
				role, _, _ := strings.Cut(who, "/")
				refusals := forbiddenCount(t, m, role, pattern)
				before := c.settled()
				status, answer := c.send(who, m, method, path, body, nil)
				checkRefused(t, fmt.Sprintf("%s %s as %s", method, path, who), who, status, answer)
				if after := c.settled(); after.String() != before.String() {
					t.Errorf("%s as %s changed the state:\nbefore %s\nafter  %s", name, who, before, after)
				}
				if got := forbiddenCount(t, m, role, pattern); got != refusals+1 {
					t.Errorf("%s as %s: forbidden counter{role=%s,route=%s} = %v, want %v", name, who, role, pattern, got, refusals+1)
				}
			}
			for _, who := range tc.allow {
				// Each allowed call gets a fresh body (a restore document
				// of the state as it is now).
				if tc.body != nil {
					body = tc.body(c)
				}
				if status, answer := c.send(who, m, method, path, body, nil); status != tc.ok {
					t.Errorf("%s %s as %s = %d %s, want %d", method, path, who, status, bytes.TrimSpace(answer), tc.ok)
				}
			}
		}
	}
}

// TestPlaintextOnlyOnLoopback: without TLS, New accepts loopback addresses
// only; with TLS, only the member's own certificate.
func TestPlaintextOnlyOnLoopback(t *testing.T) {
	ca := pkitest.New(t)
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"http address", func(c *Config) { c.HTTPAddr = "192.0.2.1:7100" }, "http address 192.0.2.1:7100 is not on loopback"},
		{"raft address", func(c *Config) { c.RaftAddr = "192.0.2.1:7101" }, "raft address 192.0.2.1:7101 is not on loopback"},
		{"join address", func(c *Config) { c.Join = []string{"192.0.2.1:7100"} }, "join address 192.0.2.1:7100 is not on loopback"},
		{"https join without TLS", func(c *Config) { c.Join = []string{"https://127.0.0.1:7100"} }, "use http://"},
		{"another member's certificate", func(c *Config) { c.TLS = ca.Source(t, pki.RoleMember, "m2") }, "want member/m1"},
		{"an agent's certificate", func(c *Config) { c.TLS = ca.Source(t, pki.RoleAgent, "m1") }, "names agent/m1"},
		{"http join with TLS", func(c *Config) {
			c.TLS, c.Join = ca.Source(t, pki.RoleMember, "m1"), []string{"http://127.0.0.1:7100"}
		}, "use https://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := serverConfig(t, "m1")
			tc.edit(&cfg)
			if _, err := New(cfg, testLogger(t)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New() = %v, want an error naming %q", err, tc.want)
			}
		})
	}
	cfg := serverConfig(t, "m1")
	cfg.HTTPAddr, cfg.RaftAddr = "192.0.2.1:7100", "192.0.2.1:7101"
	cfg.TLS = ca.Source(t, pki.RoleMember, "m1")
	if _, err := New(cfg, testLogger(t)); err != nil {
		t.Errorf("New() with TLS on a non-loopback address = %v, want it accepted", err)
	}
}
