package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/pki/pkitest"
)

// deliveryFixture is a gateway whose cluster listener serves on a
// loopback port with a certificate of a test cluster CA, on the real
// scheduler (schedulertest) with node testNode.
type deliveryFixture struct {
	t   *testing.T
	ts  *testScheduler
	g   *Gateway
	ca  *pkitest.CA
	url string
}

func newDeliveryFixture(t *testing.T) *deliveryFixture {
	t.Helper()
	f := &deliveryFixture{t: t, ts: newTestScheduler(t), ca: pkitest.New(t)}
	cfg := DefaultConfig()
	cfg.Site, cfg.OwnerEmail = testSite, ""
	cfg.ClusterTLS = f.ca.Source(t, pki.RoleGateway, "gw1").ServerConfig(pki.AnyIdentity)
	g, err := New(cfg, f.ts.store, f.ts.sched, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	f.g = g
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.url = "https://" + ln.Addr().String() + "/v1/agent/secrets"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.serveCluster(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serveCluster() = %v, want nil once its context ended", err)
		}
	})
	return f
}

// client is an HTTP client with a certificate of role/name that accepts
// only a gateway.
func (f *deliveryFixture) client(role pki.Role, name string) *http.Client {
	tr := f.ca.Source(f.t, role, name).Transport(pki.AllowRoles(pki.RoleGateway))
	f.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// post sends req with c and returns the status and body.
func (f *deliveryFixture) post(c *http.Client, req api.SecretsDeliveryRequest) (int, string) {
	f.t.Helper()
	b, _ := json.Marshal(req)
	resp, err := c.Post(f.url, "application/json", bytes.NewReader(b))
	if err != nil {
		f.t.Fatalf("POST %s: %v", f.url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// placed submits step id and waits until it is placed on testNode.
func (f *deliveryFixture) placed(id string) {
	f.t.Helper()
	if _, err := f.ts.sched.SubmitStep(f.t.Context(), api.StepRequest{ID: id, Image: "base", Args: []string{"true"}, CPU: 0.1, MemoryBytes: 64 << 20}); err != nil {
		f.t.Fatal(err)
	}
	f.ts.sched.agent.Assigned(id)
}

// ticket writes a ticket record for step (attempt 1) of tenant acct-a
// expiring at expires, and returns its token.
func (f *deliveryFixture) ticket(step string, expires time.Time) string {
	f.t.Helper()
	token := randomString(64)
	rec := secretTicketRecord{Tenant: "acct-a", Step: step, Attempt: 1, Names: []string{"API_TOKEN"}, ExpiresAt: expires}
	if _, err := putRecord(f.t.Context(), f.ts.store, kindSecretTicket, ticketDigest(token), 0, &rec); err != nil {
		f.t.Fatal(err)
	}
	return token
}

// exists reports whether the record of token is stored.
func (f *deliveryFixture) exists(token string) bool {
	_, err := f.ts.store.GetRecord(f.t.Context(), kindSecretTicket, ticketDigest(token))
	if err != nil && !IsNotFound(err) {
		f.t.Fatal(err)
	}
	return err == nil
}

// TestSecretDelivery: the cluster listener delivers a step's secrets
// once, to the agent of the step's node, for the ticket's step and
// attempt, before the ticket expires; every other request is refused,
// and leaves the ticket as it was (but an expired one, deleted).
func TestSecretDelivery(t *testing.T) {
	f := newDeliveryFixture(t)
	f.placed("s-deliv1")
	f.placed("s-deliv2")
	agent := f.client(pki.RoleAgent, testNode)
	later := time.Now().Add(time.Hour)

	tok := f.ticket("s-deliv1", later)
	for _, tc := range []struct {
		name   string
		c      *http.Client
		req    api.SecretsDeliveryRequest
		status int
		msg    string
	}{
		{"gateway certificate", f.client(pki.RoleGateway, "gw2"), api.SecretsDeliveryRequest{Step: "s-deliv1", Attempt: 1, Ticket: tok}, 403, "only the agent"},
		{"operator certificate", f.client(pki.RoleOperator, "op"), api.SecretsDeliveryRequest{Step: "s-deliv1", Attempt: 1, Ticket: tok}, 403, "only the agent"},
		{"another node", f.client(pki.RoleAgent, "node-other"), api.SecretsDeliveryRequest{Step: "s-deliv1", Attempt: 1, Ticket: tok}, 403, "runs on node"},
		{"another step", agent, api.SecretsDeliveryRequest{Step: "s-deliv2", Attempt: 1, Ticket: tok}, 403, "not attempt 1 of step s-deliv2"},
		{"another attempt", agent, api.SecretsDeliveryRequest{Step: "s-deliv1", Attempt: 2, Ticket: tok}, 403, "not attempt 2"},
		{"unknown ticket", agent, api.SecretsDeliveryRequest{Step: "s-deliv1", Attempt: 1, Ticket: randomString(64)}, 404, "no such secrets ticket"},
		{"no ticket", agent, api.SecretsDeliveryRequest{Step: "s-deliv1", Attempt: 1}, 400, "ticket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.post(tc.c, tc.req)
			if code != tc.status || !strings.Contains(body, tc.msg) || strings.Contains(body, tok) {
				t.Errorf("POST = %d %s, want %d naming %q, without the ticket", code, body, tc.status, tc.msg)
			}
			if !f.exists(tok) {
				t.Fatalf("the ticket is gone after a refused request")
			}
		})
	}

	// Unknown fields are refused (strict decoding).
	resp, err := agent.Post(f.url, "application/json", strings.NewReader(`{"step":"s-deliv1","attempt":1,"ticket":"`+tok+`","extra":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("POST with an unknown field = %d, want 400", resp.StatusCode)
	}

	// The right agent: the ticket is used up, whatever secretValues
	// answers (it opens the tenant's values: the secrets store's part).
	code, body := f.post(agent, api.SecretsDeliveryRequest{Step: "s-deliv1", Attempt: 1, Ticket: tok})
	if code != http.StatusOK && !strings.Contains(body, "cannot be opened") {
		t.Errorf("POST by the step's node = %d %s, want 200 or the secrets store's refusal", code, body)
	}
	if f.exists(tok) {
		t.Errorf("the ticket is still stored after its use")
	}
	// Single use.
	if code, body := f.post(agent, api.SecretsDeliveryRequest{Step: "s-deliv1", Attempt: 1, Ticket: tok}); code != http.StatusNotFound || !strings.Contains(body, "no such secrets ticket") {
		t.Errorf("POST again = %d %s, want 404 no such secrets ticket", code, body)
	}

	// An expired ticket is refused and deleted.
	old := f.ticket("s-deliv2", time.Now().Add(-time.Second))
	if code, body := f.post(agent, api.SecretsDeliveryRequest{Step: "s-deliv2", Attempt: 1, Ticket: old}); code != http.StatusNotFound || !strings.Contains(body, "expired") {
		t.Errorf("POST with an expired ticket = %d %s, want 404 naming its expiry", code, body)
	}
	if f.exists(old) {
		t.Errorf("an expired ticket is still stored after its use")
	}

	// A client without a cluster certificate does not get through the
	// handshake.
	bare := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 10 * time.Second}
	if resp, err := bare.Post(f.url, "application/json", strings.NewReader(`{}`)); err == nil {
		resp.Body.Close()
		t.Errorf("POST without a client certificate = %d, want a failed handshake", resp.StatusCode)
	}

	// Maintenance deletes expired tickets and keeps live ones.
	gone, kept := f.ticket("s-deliv2", time.Now().Add(-time.Minute)), f.ticket("s-deliv2", later)
	if res, err := f.g.Maintain(t.Context()); err != nil || res.SecretTickets != 1 {
		t.Errorf("Maintain() = %+v, %v; want 1 secret ticket deleted", res, err)
	}
	if f.exists(gone) || !f.exists(kept) {
		t.Errorf("after Maintain: expired ticket stored %v, live one stored %v; want false, true", f.exists(gone), f.exists(kept))
	}
}

// TestSubmitIssuesSecretTicket: the Driver submits the Bash step of an
// agent run whose grant names secrets with a ticket of the run's tenant,
// bound to the step's first attempt; the scheduler shows the names and
// the gateway, and only the node's assignment the token, whose digest is
// the ticket's record.
func TestSubmitIssuesSecretTicket(t *testing.T) {
	f := newDeliveryFixture(t)
	ctx := withTenant(t.Context(), "acct-a")
	run := runRecord{ID: "run-sec", Agent: &agentRunRecord{RunAgent: api.RunAgent{Secrets: []string{"API_TOKEN", "DB_PASSWORD"}}}}
	s := runStepRecord{ID: "s-bash1", Spec: api.StepRequest{Image: "base", Args: []string{"true"}, CPU: 0.1, MemoryBytes: 64 << 20}}
	if refused, err := f.g.driver.submit(ctx, &run, &s, ""); refused != "" || err != nil {
		t.Fatalf("submit() = %q, %v", refused, err)
	}
	if s.Spec.Secrets != nil {
		t.Errorf("the run's step record holds the step's secrets: %+v", s.Spec.Secrets)
	}
	st, err := f.ts.sched.Step(t.Context(), "s-bash1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"API_TOKEN", "DB_PASSWORD"}
	if sec := st.Spec.Secrets; sec == nil || !slices.Equal(sec.Names, want) || sec.Gateway != DefaultConfig().ClusterURL || sec.Ticket != "" {
		t.Errorf("Step().Spec.Secrets = %+v, want the names and the cluster URL without a ticket", sec)
	}
	as := f.ts.sched.agent.Assigned("s-bash1")
	if as.Spec.Secrets == nil || as.Spec.Secrets.Ticket == "" {
		t.Fatalf("assignment secrets = %+v, want a ticket", as.Spec.Secrets)
	}
	var rec secretTicketRecord
	if _, err := getRecord(t.Context(), f.ts.store, kindSecretTicket, ticketDigest(as.Spec.Secrets.Ticket), &rec); err != nil {
		t.Fatalf("the ticket's record: %v", err)
	}
	if rec.Tenant != "acct-a" || rec.Step != "s-bash1" || rec.Attempt != 1 || !slices.Equal(rec.Names, want) ||
		rec.ExpiresAt.Sub(time.Now()) > secretTicketTTL || rec.ExpiresAt.Before(time.Now()) {
		t.Errorf("ticket record = %+v, want tenant acct-a, step s-bash1, attempt 1, the names, expiring within %v", rec, secretTicketTTL)
	}

	// A second submission (another driver's, racing) is a conflict, and
	// its ticket is dropped: the step keeps the first.
	if refused, err := f.g.driver.submit(ctx, &run, &s, ""); refused != "" || err != nil {
		t.Fatalf("submit() again = %q, %v", refused, err)
	}
	if recs, _, err := f.ts.store.ListRecordsPage(t.Context(), kindSecretTicket, "", 100, ""); err != nil || len(recs) != 1 || recs[0].ID != ticketDigest(as.Spec.Secrets.Ticket) {
		t.Errorf("ticket records after a second submission = %d, %v; want the first one only", len(recs), err)
	}

	// Outside a tenant, the step is refused.
	s2 := runStepRecord{ID: "s-bash2", Spec: s.Spec}
	// (The run's first read of a scoped record, or the ticket, refuses it.)
	if refused, err := f.g.driver.submit(t.Context(), &run, &s2, ""); !strings.Contains(refused, "no tenant") && !errors.Is(err, errNoTenant) {
		t.Errorf("submit(no tenant) = %q, %v; want a refusal naming the tenant", refused, err)
	}
}

// TestServeClusterListener: Serve serves the cluster listener with the
// cluster TLS, and stops it with its context; a cluster listen address
// that cannot be listened on fails Serve, naming the flag.
func TestServeClusterListener(t *testing.T) {
	ts := newTestScheduler(t)
	ca := pkitest.New(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		listen  string
		wantErr string
	}{
		{"127.0.0.1:0", ""},
		{busy.Addr().String(), "--cluster-listen"},
	} {
		cfg := DefaultConfig()
		cfg.Site, cfg.OwnerEmail, cfg.ClusterListen = testSite, "", tc.listen
		cfg.ClusterTLS = ca.Source(t, pki.RoleGateway, "gw1").ServerConfig(pki.AnyIdentity)
		g, err := New(cfg, ts.store, ts.sched, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		_, stop := serveLoopback(t, g)
		if tc.wantErr == "" {
			time.Sleep(50 * time.Millisecond)
		}
		if err := stop(); tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("Serve(cluster listen %s) = %v, want %q", tc.listen, err, tc.wantErr)
		}
	}
}
