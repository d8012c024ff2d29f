package relay

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/pki/pkitest"
)

// ndjsonAgent answers every request with one NDJSON frame and counts the
// requests it got.
type ndjsonAgent struct{ requests atomic.Int32 }

func (a *ndjsonAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.requests.Add(1)
	w.Header().Set("Content-Type", ndjson)
	io.WriteString(w, `{"seq":1,"kind":"stdout","data":"aGk="}`+"\n")
}

// TestAgentIdentity: the upstream reads a stream only from the agent of
// the node the scheduler named, over TLS with the cluster CA; everything
// else is refused before a request is sent.
func TestAgentIdentity(t *testing.T) {
	ca := pkitest.New(t)
	other := pkitest.New(t)
	gw := ca.Source(t, pki.RoleGateway, "gw1")
	agents := NewAgents(gw)
	t.Cleanup(agents.CloseIdleConnections)
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)

	serve := func(src *pki.Source) (*ndjsonAgent, string) {
		h := &ndjsonAgent{}
		srv := startTLSServer(ctx, h, src, pki.AllowRoles(pki.RoleGateway))
		t.Cleanup(srv.Close)
		return h, srv.URL
	}
	n1, n1URL := serve(ca.Source(t, pki.RoleAgent, "n1"))
	foreign, foreignURL := serve(other.Source(t, pki.RoleAgent, "n1"))
	notAgent, notAgentURL := serve(ca.Source(t, pki.RoleGateway, "n1"))
	plain := &ndjsonAgent{}
	plainSrv := startServer(ctx, plain)
	t.Cleanup(plainSrv.Close)

	for _, tc := range []struct {
		name string
		loc  api.StreamURL
		// agent must have got exactly want requests after the call.
		agent *ndjsonAgent
		want  int32
		err   string
	}{
		{"the named node", api.StreamURL{URL: n1URL + "/v1/steps/s1/stream", Node: "n1"}, n1, 1, ""},
		{"another node's certificate", api.StreamURL{URL: n1URL + "/v1/steps/s1/stream", Node: "n2"}, n1, 1, "peer agent/n1: want agent/n2"},
		{"no node named", api.StreamURL{URL: n1URL + "/v1/steps/s1/stream"}, n1, 1, "no valid node"},
		{"bad node named", api.StreamURL{URL: n1URL + "/v1/steps/s1/stream", Node: "N 1"}, n1, 1, "no valid node"},
		{"another CA", api.StreamURL{URL: foreignURL + "/v1/steps/s1/stream", Node: "n1"}, foreign, 0, "certificate signed by unknown authority"},
		{"not an agent", api.StreamURL{URL: notAgentURL + "/v1/steps/s1/stream", Node: "n1"}, notAgent, 0, "peer gateway/n1: want agent/n1"},
		{"plain http", api.StreamURL{URL: plainSrv.URL + "/v1/steps/s1/stream", Node: "n1"}, plain, 0, "plain HTTP: refused"},
		{"not a url", api.StreamURL{URL: "n1:7200", Node: "n1"}, plain, 0, "want https://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := NewAgentUpstream(func(context.Context, string) (api.StreamURL, error) { return tc.loc, nil }, agents)
			rc, err := up.Open(t.Context(), "s1", 0)
			if err == nil {
				b, _ := io.ReadAll(rc)
				rc.Close()
				if !strings.Contains(string(b), `"seq":1`) {
					t.Errorf("Open() read %q, want the agent's frame", b)
				}
			}
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("Open() = %v, want the stream", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("Open() = %v, want an error naming %q", err, tc.err)
			}
			if got := tc.agent.requests.Load(); got != tc.want {
				t.Errorf("the agent got %d requests, want %d", got, tc.want)
			}
		})
	}
}

// TestAgentPooledConnection: a kept-alive connection verified as agent/n1
// never carries a request meant for agent/n2 at the same address.
func TestAgentPooledConnection(t *testing.T) {
	ca := pkitest.New(t)
	agents := NewAgents(ca.Source(t, pki.RoleGateway, "gw1"))
	t.Cleanup(agents.CloseIdleConnections)
	h := &ndjsonAgent{}
	srv := startTLSServer(t.Context(), h, ca.Source(t, pki.RoleAgent, "n1"), pki.AnyIdentity)
	t.Cleanup(srv.Close)

	get := func(node string) error {
		client, u, err := agents.Client(api.StreamURL{URL: srv.URL + "/v1/steps/s1/stream", Node: node})
		if err != nil {
			return err
		}
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, u.String(), nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	for range 2 {
		if err := get("n1"); err != nil {
			t.Fatalf("GET as n1 = %v", err)
		}
	}
	if err := get("n2"); err == nil || !strings.Contains(err.Error(), "want agent/n2") {
		t.Errorf("GET as n2 over n1's address = %v, want a refused handshake", err)
	}
	if got := h.requests.Load(); got != 2 {
		t.Errorf("the agent got %d requests, want the 2 meant for it", got)
	}
}

// TestAgentsPlaintext: without a certificate only plain HTTP is dialled.
func TestAgentsPlaintext(t *testing.T) {
	agents := NewAgents(nil)
	if _, _, err := agents.Client(api.StreamURL{URL: "https://127.0.0.1:1/v1/steps/s1/stream", Node: "n1"}); err == nil ||
		!strings.Contains(err.Error(), "--plaintext") {
		t.Errorf("Client(https) in plaintext mode = %v, want a refusal naming --plaintext", err)
	}
	if _, u, err := agents.Client(api.StreamURL{URL: "http://127.0.0.1:1/v1/steps/s1/stream"}); err != nil || u.Host != "127.0.0.1:1" {
		t.Errorf("Client(http) in plaintext mode = %v, %v; want the URL", u, err)
	}
}

// TestAgentsForget: a node's transport unused for idleTransport is
// dropped.
func TestAgentsForget(t *testing.T) {
	ca := pkitest.New(t)
	agents := NewAgents(ca.Source(t, pki.RoleGateway, "gw1"))
	now := time.Now()
	agents.now = func() time.Time { return now }
	c1, _, _ := agents.Client(api.StreamURL{URL: "https://127.0.0.1:1/", Node: "n1"})
	if again, _, _ := agents.Client(api.StreamURL{URL: "https://127.0.0.1:2/", Node: "n1"}); again != c1 {
		t.Errorf("Client(n1) twice gave two clients, want one per node")
	}
	now = now.Add(idleTransport)
	agents.Client(api.StreamURL{URL: "https://127.0.0.1:1/", Node: "n2"})
	if _, ok := agents.nodes["n1"]; ok || len(agents.nodes) != 1 {
		t.Errorf("after %v unused, nodes = %v; want only n2", idleTransport, agents.nodes)
	}
}
