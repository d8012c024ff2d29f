package client

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/pki/pkitest"
)

// tlsServer serves /healthz over mutual TLS as src, answering the
// caller's identity in the member id.
func tlsServer(t *testing.T, src *pki.Source) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := pki.PeerIdentity(r.TLS)
		w.Write([]byte(`{"status":"ok","id":"` + id.String() + `"}`))
	}))
	srv.TLS = src.ServerConfig(pki.AnyIdentity)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func TestTLS(t *testing.T) {
	ca := pkitest.New(t)
	agent := ca.Source(t, pki.RoleAgent, "n1")
	member := tlsServer(t, ca.Source(t, pki.RoleMember, "m1"))
	hostPort := strings.TrimPrefix(member.URL, "https://")

	c, err := New(hostPort, Options{TLS: agent, RetryFor: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	if got, want := c.URLs(), []string{"https://" + hostPort}; !cmp.Equal(got, want) {
		t.Errorf("URLs() = %v, want %v", got, want)
	}
	h, err := c.Health(t.Context())
	if err != nil || h.ID != "agent/n1" {
		t.Fatalf("Health() = %+v, %v; want the server to see agent/n1", h, err)
	}

	// A server that is not a member is refused, whatever it answers.
	impostor := tlsServer(t, ca.Source(t, pki.RoleGateway, "gw"))
	c2, err := New(impostor.URL, Options{TLS: agent, RetryFor: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.CloseIdleConnections()
	if _, err := c2.Health(t.Context()); err == nil || !strings.Contains(err.Error(), "gateway/gw") {
		t.Errorf("Health() of a gateway = %v, want a refusal naming gateway/gw", err)
	}

	// A caller's own HTTP client keeps its timeout and gets the TLS
	// transport.
	c3, err := New(member.URL, Options{TLS: agent, HTTPClient: &http.Client{Timeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	defer c3.CloseIdleConnections()
	if _, err := c3.Health(t.Context()); err != nil {
		t.Errorf("Health() with an HTTPClient and TLS = %v", err)
	}

	for name, tc := range map[string]struct {
		addrs string
		opts  Options
	}{
		"http URL with TLS":         {"http://" + hostPort, Options{TLS: agent}},
		"HTTPClient with transport": {hostPort, Options{TLS: agent, HTTPClient: &http.Client{Transport: &http.Transport{}}}},
	} {
		if _, err := New(tc.addrs, tc.opts); err == nil {
			t.Errorf("%s: New() = nil error, want a refusal", name)
		}
	}
}
