package agentd

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/pki/pkitest"
)

// TestAgentMuxAccess serves the agent's routes over mutual TLS and checks
// who may use them: streams and input only gateways and operators, health
// and metrics any cluster identity; and that a gateway's source address is
// learnt.
// newStepLog returns a log store in a temporary directory and the open
// log of step id in it.
func newStepLog(t *testing.T, id cluster.StepID) (*logstore.Store, *logstore.Log) {
	t.Helper()
	cfg := logstore.DefaultConfig()
	cfg.Dir = t.TempDir()
	logs, err := logstore.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	lg, err := logs.Create(id)
	if err != nil {
		t.Fatal(err)
	}
	return logs, lg
}

func TestAgentMuxAccess(t *testing.T) {
	ca := pkitest.New(t)
	logger := slog.New(slog.DiscardHandler)
	logs, lg := newStepLog(t, "s-1")
	io.WriteString(lg.Stdout(), "hello\n")
	if err := lg.Exit(cluster.ExitRecord{State: cluster.StateExited, TerminatedBy: cluster.ByExit}); err != nil {
		t.Fatal(err)
	}
	lg.Close()
	cfg := DefaultAgentConfig()
	cfg.Node, cfg.Address = "n1", netip.MustParseAddrPort("127.0.0.1:1")
	agent, err := NewAgent(cfg, nil, nil, nil, logger)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]netip.Addr{}
	acc := access{authenticated: true, seenGateway: func(name string, a netip.Addr, _ time.Time) {
		mu.Lock()
		defer mu.Unlock()
		seen[name] = a
	}}
	mux, err := newAgentMux(logs, agent, acc, logger)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = ca.Source(t, pki.RoleAgent, "n1").ServerConfig(pki.AnyIdentity)
	srv.StartTLS()
	t.Cleanup(srv.Close)

	do := func(t *testing.T, src *pki.Source, method, path, body string) (int, string) {
		t.Helper()
		tr := src.Transport(pki.AllowIdentity(pki.Identity{Role: pki.RoleAgent, Name: "n1"}))
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const input = `{"type":"stdin","data":"x"}`
	for _, tc := range []struct {
		role       pki.Role
		name       string
		stream     int
		input      int
		forbidName string
	}{
		{pki.RoleGateway, "gw", 200, 404, ""},
		{pki.RoleOperator, "ops", 200, 404, ""},
		{pki.RoleAgent, "n2", 403, 403, "agent/n2"},
		{pki.RoleAgent, "n1", 403, 403, "agent/n1"},
		{pki.RoleMember, "m1", 403, 403, "member/m1"},
	} {
		t.Run(string(tc.role)+"-"+tc.name, func(t *testing.T) {
			src := ca.Source(t, tc.role, tc.name)
			code, body := do(t, src, "GET", "/v1/steps/s-1/stream?follow=0", "")
			if code != tc.stream || tc.stream == 200 && !strings.Contains(body, "hello") {
				t.Errorf("GET stream = %d %s, want %d", code, body, tc.stream)
			}
			if tc.forbidName != "" && (!strings.Contains(body, `"forbidden"`) || !strings.Contains(body, tc.forbidName)) {
				t.Errorf("GET stream refusal = %s, want forbidden naming %s", body, tc.forbidName)
			}
			if code, body := do(t, src, "POST", "/v1/steps/s-1/input", input); code != tc.input {
				t.Errorf("POST input = %d %s, want %d", code, body, tc.input)
			}
			for _, path := range []string{"/healthz", "/metrics"} {
				if code, body := do(t, src, "GET", path, ""); code != 200 {
					t.Errorf("GET %s = %d %.100s, want 200", path, code, body)
				}
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if got := seen["gw"]; got != netip.MustParseAddr("127.0.0.1") || len(seen) != 1 {
		t.Errorf("gateway addresses learnt = %v, want gw at 127.0.0.1 only", seen)
	}

	// A client without a certificate, or with one of another CA, does not
	// get past the handshake.
	for name, tr := range map[string]*http.Transport{
		"no certificate": {TLSClientConfig: ca.Source(t, pki.RoleGateway, "x").ClientConfig(pki.AnyIdentity).Clone()},
		"another CA":     pkitest.New(t).Source(t, pki.RoleGateway, "gw").Transport(pki.AnyIdentity),
	} {
		if name == "no certificate" {
			tr.TLSClientConfig.GetClientCertificate = nil
		}
		resp, err := (&http.Client{Transport: tr}).Get(srv.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: GET /healthz = %d, want a failed handshake", name, resp.StatusCode)
		}
		tr.CloseIdleConnections()
	}
}

// TestURLHosts: the control plane denies the hosts of the scheduler URLs.
func TestURLHosts(t *testing.T) {
	if got := urlHosts([]string{"https://a:1", "http://[2600::1]:2", "http://11.0.0.1:3"}); strings.Join(got, ",") != "a,2600::1,11.0.0.1" {
		t.Errorf("urlHosts() = %v", got)
	}
}
