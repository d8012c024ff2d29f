package agentd

import (
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/pki/pkitest"
)

// fakeGateway is a cluster listener over mutual TLS that answers by
// ticket, and counts the requests.
type fakeGateway struct {
	srv      *httptest.Server
	requests atomic.Int32
}

const secretValue = "s3cr3t-value-that-must-not-leak"

func newFakeGateway(t *testing.T, ca *pkitest.CA, role pki.Role) *fakeGateway {
	t.Helper()
	g := &fakeGateway{}
	g.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.requests.Add(1)
		id, ok := pki.PeerIdentity(r.TLS)
		if !ok || id.Role != pki.RoleAgent || id.Name != "n1" {
			http.Error(w, `{"error":{"code":"forbidden","message":"not agent/n1"}}`, http.StatusForbidden)
			return
		}
		var req api.SecretsDeliveryRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Step != "s-1" || req.Attempt != 1 {
			http.Error(w, `{"error":{"code":"bad_request","message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		switch req.Ticket {
		case "good":
			json.NewEncoder(w).Encode(api.SecretsDeliveryAnswer{Values: map[string]string{"API_TOKEN": secretValue, "OTHER": "x", "EXTRA": "dropped"}})
		case "lacking":
			json.NewEncoder(w).Encode(api.SecretsDeliveryAnswer{Values: map[string]string{"API_TOKEN": secretValue}})
		case "used":
			http.Error(w, `{"error":{"code":"not_found","message":"no such secrets ticket"}}`, http.StatusNotFound)
		case "refused":
			http.Error(w, `{"error":{"code":"forbidden","message":"runs on another node"}}`, http.StatusForbidden)
		case "flaky":
			if g.requests.Load() == 1 {
				http.Error(w, `{"error":{"code":"unavailable","message":"later"}}`, http.StatusServiceUnavailable)
				return
			}
			json.NewEncoder(w).Encode(api.SecretsDeliveryAnswer{Values: map[string]string{"API_TOKEN": secretValue, "OTHER": "x"}})
		default:
			http.Error(w, `{"error":{"code":"unavailable","message":"down"}}`, http.StatusBadGateway)
		}
	}))
	g.srv.TLS = ca.Source(t, role, "gw1").ServerConfig(pki.AnyIdentity)
	g.srv.StartTLS()
	t.Cleanup(g.srv.Close)
	return g
}

// TestFetchSecrets: the node fetches a step's secrets over mutual TLS
// with its agent certificate from a gateway only, gets exactly the names
// it asked for, retries only what got no answer or a 5xx, and every
// failure is cause secrets_unavailable in words without the ticket or a
// value.
func TestFetchSecrets(t *testing.T) {
	ca := pkitest.New(t)
	gw := newFakeGateway(t, ca, pki.RoleGateway)
	impostor := newFakeGateway(t, ca, pki.RoleMember)
	tr := ca.Source(t, pki.RoleAgent, "n1").Transport(pki.AllowRoles(pki.RoleGateway))
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	names := []string{"API_TOKEN", "OTHER"}

	got, err := fetchSecrets(t.Context(), hc, "s-1", 1, &cluster.StepSecrets{Names: names, Gateway: gw.srv.URL, Ticket: "good"})
	if want := map[string]string{"API_TOKEN": secretValue, "OTHER": "x"}; err != nil || !maps.Equal(got, want) {
		t.Fatalf("fetchSecrets(good) = %v, %v; want the named values only", got != nil, err)
	}

	gw.requests.Store(0)
	if got, err := fetchSecrets(t.Context(), hc, "s-1", 1, &cluster.StepSecrets{Names: names, Gateway: gw.srv.URL + "/", Ticket: "flaky"}); err != nil || got["API_TOKEN"] != secretValue {
		t.Errorf("fetchSecrets(flaky) = %v; want the values after a retry", err)
	}

	for _, tc := range []struct {
		name     string
		hc       *http.Client
		sec      cluster.StepSecrets
		requests int32 // to gw; -1: not counted
		want     string
	}{
		{"used", hc, cluster.StepSecrets{Names: names, Gateway: gw.srv.URL, Ticket: "used"}, 1, "no such ticket"},
		{"refused", hc, cluster.StepSecrets{Names: names, Gateway: gw.srv.URL, Ticket: "refused"}, 1, "refused this node"},
		{"lacking", hc, cluster.StepSecrets{Names: names, Gateway: gw.srv.URL, Ticket: "lacking"}, 1, "lacks secret OTHER"},
		{"down", hc, cluster.StepSecrets{Names: names, Gateway: gw.srv.URL, Ticket: "down"}, secretsTries, "did not answer after 3 tries"},
		{"not a gateway", hc, cluster.StepSecrets{Names: names, Gateway: impostor.srv.URL, Ticket: "good"}, -1, "did not answer"},
		{"ticket error", hc, cluster.StepSecrets{Names: names, Gateway: gw.srv.URL, Error: "the secrets ticket does not open"}, 0, "does not open"},
		{"no ticket", hc, cluster.StepSecrets{Names: names, Gateway: gw.srv.URL}, 0, "no ticket"},
		{"plaintext node", nil, cluster.StepSecrets{Names: names, Gateway: gw.srv.URL, Ticket: "good"}, 0, "--plaintext"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw.requests.Store(0)
			got, err := fetchSecrets(t.Context(), tc.hc, "s-1", 1, &tc.sec)
			cause, reason := classify(err)
			if got != nil || cause != api.CauseSecretsUnavailable || !strings.Contains(reason, tc.want) {
				t.Errorf("fetchSecrets() = %v, %q %q; want cause %s naming %q", got != nil, cause, reason, api.CauseSecretsUnavailable, tc.want)
			}
			var se *stepError
			if !errors.As(err, &se) {
				t.Errorf("fetchSecrets() error %T, want a stepError", err)
			}
			if err != nil && strings.Contains(err.Error(), secretValue) || strings.Contains(reason, secretValue) {
				t.Errorf("fetchSecrets() error %q holds a value", err)
			}
			if tc.requests >= 0 && gw.requests.Load() != tc.requests {
				t.Errorf("requests to the gateway = %d, want %d", gw.requests.Load(), tc.requests)
			}
			if tc.name == "not a gateway" && impostor.requests.Load() != 0 {
				t.Errorf("the request reached a server that is not a gateway")
			}
		})
	}
}
