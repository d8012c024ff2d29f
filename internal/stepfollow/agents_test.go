package stepfollow

import (
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/pki/pkitest"
)

// TestAgentsRefuse: addresses that cannot be dialled as asked are refused
// before any connection, with errStreamAddress (asking again gives the
// same answer).
func TestAgentsRefuse(t *testing.T) {
	ca := pkitest.New(t)
	tlsAgents, plainAgents := NewAgents(ca.Source(t, pki.RoleOperator, "op"), time.Second), NewAgents(nil, time.Second)
	for _, tc := range []struct {
		name   string
		agents *Agents
		loc    api.StreamURL
	}{
		{"no host", plainAgents, api.StreamURL{URL: "http:///v1/steps/s1/stream"}},
		{"other scheme", plainAgents, api.StreamURL{URL: "ftp://127.0.0.1:1/"}},
		{"https in plaintext", plainAgents, api.StreamURL{URL: "https://127.0.0.1:1/", Node: "n1"}},
		{"http with TLS", tlsAgents, api.StreamURL{URL: "http://127.0.0.1:1/", Node: "n1"}},
		{"no node with TLS", tlsAgents, api.StreamURL{URL: "https://127.0.0.1:1/"}},
		{"bad node with TLS", tlsAgents, api.StreamURL{URL: "https://127.0.0.1:1/", Node: "n/1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := tc.agents.get(tc.loc); !errors.Is(err, errStreamAddress) {
				t.Errorf("get(%+v) = %v, want errStreamAddress", tc.loc, err)
			}
		})
	}
}

// TestAgentsIdentity: with TLS, the agent must present exactly agent/NODE
// of the scheduler's answer; another agent's certificate is a TLS error
// IsTLSError recognizes, and a client of one node is never reused for
// another.
func TestAgentsIdentity(t *testing.T) {
	ca := pkitest.New(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.TLS = ca.Source(t, pki.RoleAgent, "n1").ServerConfig(pki.AnyIdentity)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // a refused handshake is expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	agents := NewAgents(ca.Source(t, pki.RoleOperator, "op"), time.Second)
	get := func(node string) (*http.Client, error) {
		hc, u, err := agents.get(api.StreamURL{URL: srv.URL + "/v1/steps/s1/stream", Node: node})
		if err != nil {
			t.Fatalf("get(node %s) = %v", node, err)
		}
		resp, err := hc.Get(u.String())
		if err == nil {
			resp.Body.Close()
		}
		return hc, err
	}
	c1, err := get("n1")
	if err != nil {
		t.Errorf("GET agent/n1 as node n1 = %v, want ok", err)
	}
	if again, _ := get("n1"); again != c1 {
		t.Errorf("a second get of node n1 made a new client, want the same")
	}
	c2, err := get("n2")
	if err == nil || !IsTLSError(err) {
		t.Errorf("GET agent/n1 as node n2 = %v, want a TLS error", err)
	}
	if c2 == c1 {
		t.Errorf("the client of node n2 is node n1's, want a new one")
	}
	c2.CloseIdleConnections()
}
