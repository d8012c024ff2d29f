package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/gateway/relay"
	"github.com/rodon-compute/rodon/internal/cli"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/pki/pkitest"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/scheduler/schedulertest"
)

// tlsScheduler is the real scheduler (schedulertest) over mutual TLS,
// recording who called it.
type tlsScheduler struct {
	*schedulertest.Cluster
	url string

	mu sync.Mutex
	// callers are the verified client identities, one per request.
	callers []string
}

func newTLSScheduler(t *testing.T, ca *pkitest.CA) *tlsScheduler {
	s := &tlsScheduler{Cluster: schedulertest.New(t, schedulertest.Options{CA: ca})}
	s.url = s.Members[0].URL()
	s.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, _ := pki.PeerIdentity(r.TLS)
			s.mu.Lock()
			s.callers = append(s.callers, id.String())
			s.mu.Unlock()
			next.ServeHTTP(w, r)
		})
	})
	return s
}

// impostor is a TLS server with src's certificate, which is not a
// scheduler member's: it counts the requests it gets (none should come).
type impostor struct {
	srv *httptest.Server
	mu  sync.Mutex
	n   int
}

func newImpostor(t *testing.T, src *pki.Source) *impostor {
	s := &impostor{}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.n++
		s.mu.Unlock()
		w.WriteHeader(http.StatusNotFound)
	}))
	s.srv.TLS = src.ServerConfig(pki.AnyIdentity)
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

func (s *impostor) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// who returns the distinct identities that called.
func (s *tlsScheduler) who() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.callers)
	slices.Sort(out)
	return slices.Compact(out)
}

// waitRegistered waits for gateway name to register and returns its
// addresses.
func (s *tlsScheduler) waitRegistered(t *testing.T, name string) []string {
	t.Helper()
	var addrs []string
	schedulertest.Eventually(t, "gateway "+name+" to register its addresses", func() bool {
		for _, g := range s.State().Gateways(time.Now()) {
			if g.Name == name {
				addrs = nil
				for _, a := range g.Addresses {
					addrs = append(addrs, a.String())
				}
				return true
			}
		}
		return false
	})
	return addrs
}

// TestBootstrapOverTLS: `gateway bootstrap` reaches the scheduler over
// mutual TLS as gateway/NAME, and refuses a server that is not a member
// of the cluster.
func TestBootstrapOverTLS(t *testing.T) {
	ca := pkitest.New(t)
	ca.Issue(t, pkitest.Identity(t, pki.RoleGateway, "gw1"), pki.IssueOptions{})
	sched := newTLSScheduler(t, ca)
	notMember := newImpostor(t, ca.Source(t, pki.RoleAgent, "m1"))
	foreign := newImpostor(t, pkitest.New(t).Source(t, pki.RoleMember, "m1"))
	bare := strings.TrimPrefix(sched.url, "https://")

	for _, tc := range []struct {
		name, url string
		want      string
	}{
		{"a member", sched.url, ""},
		{"a bare address is https", bare, ""},
		{"an agent certificate", notMember.srv.URL, "peer agent/m1: want role member"},
		{"another CA", foreign.srv.URL, "certificate signed by unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cf := clusterFlags{scheduler: tc.url, name: "gw1", tls: cli.TLSFlags{Dir: ca.Dir}, retryFor: -1}
			c, _, err := cf.connect(slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatalf("connect() = %v", err)
			}
			var stdout, stderr strings.Builder
			err = bootstrap(t.Context(), c, "boss@example.com", "default", &stdout, &stderr)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("bootstrap against %s = %v, want %q", tc.name, err, tc.want)
			}
		})
	}
	// The command itself, once.
	var stdout, stderr strings.Builder
	code := run([]string{"bootstrap", "--scheduler", sched.url, "--tls-dir", ca.Dir, "--name", "gw1", "--email", "boss@example.com"},
		&stdout, &stderr)
	if code != 0 || !strings.Contains(stderr.String(), "an owner exists already") {
		t.Errorf("gateway bootstrap = %d, stdout %q, stderr %q; want 0 and the owner made above", code, stdout.String(), stderr.String())
	}
	if got := sched.who(); !slices.Equal(got, []string{"gateway/gw1"}) {
		t.Errorf("the scheduler was called by %q, want only gateway/gw1", got)
	}
	if got := notMember.requests() + foreign.requests(); got != 0 {
		t.Errorf("servers that are not members got %d requests, want none", got)
	}
}

// TestServeHTTPS runs `gateway serve` with an HTTPS public listener
// against a TLS scheduler: browsers get HTTPS only, every call to the
// scheduler is made as gateway/gw1, and the gateway registers the address
// it listens on.
func TestServeHTTPS(t *testing.T) {
	ca := pkitest.New(t)
	ca.Issue(t, pkitest.Identity(t, pki.RoleGateway, "gw1"), pki.IssueOptions{})
	// The public certificate: the cluster CA's, for the host browsers use.
	public := t.TempDir()
	if _, err := ca.IssueFiles(public, pkitest.Identity(t, pki.RoleGateway, "gw1"), pki.IssueOptions{Hosts: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	pubFiles := pki.DirFiles(public, pkitest.Identity(t, pki.RoleGateway, "gw1"))
	sched := newTLSScheduler(t, ca)
	addr := freeAddr(t)

	var f serveFlags
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse([]string{"--scheduler", sched.url, "--tls-dir", ca.Dir, "--name", "gw1", "--listen", addr,
		"--data-dir", t.TempDir(), "--https-cert", pubFiles.Cert, "--https-key", pubFiles.Key}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	out := &testenv.SyncBuffer{}
	go func() { done <- serve(ctx, &f, nil, slog.New(slog.DiscardHandler), out) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve() = %v, want nil after cancel", err)
		}
	})

	if got := sched.waitRegistered(t, "gw1"); !slices.Equal(got, []string{"127.0.0.1"}) {
		t.Errorf("registered addresses %q, want [127.0.0.1]", got)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("GET https://%s/healthz = %v", addr, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil {
		t.Errorf("GET /healthz over HTTPS = %s, want 200 over TLS", resp.Status)
	}
	plain := &http.Client{Timeout: 5 * time.Second}
	if resp, err := plain.Get("http://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("GET /healthz over plain HTTP = %s, want no answer but a refusal", resp.Status)
		}
	}
	// The first owner is created through the scheduler's record store.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "one-time password") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "https://"+addr) {
		t.Errorf("serve printed %q, want the one-time password and the https site", out.String())
	}
	if got := sched.who(); !slices.Equal(got, []string{"gateway/gw1"}) {
		t.Errorf("the scheduler was called by %q, want only gateway/gw1", got)
	}
}

// freeAddr returns a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	return testenv.FreeAddr(t)
}

// TestInputVerifiesNode: terminal input goes only to the agent of the
// step's node, over TLS; nothing is sent to another.
func TestInputVerifiesNode(t *testing.T) {
	ca := pkitest.New(t)
	agents := relay.NewAgents(ca.Source(t, pki.RoleGateway, "gw1"))
	t.Cleanup(agents.CloseIdleConnections)
	var mu sync.Mutex
	var got []string
	agent := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+string(b))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	agent.TLS = ca.Source(t, pki.RoleAgent, "n1").ServerConfig(pki.AllowRoles(pki.RoleGateway))
	agent.Config.ErrorLog = log.New(io.Discard, "", 0)
	agent.StartTLS()
	t.Cleanup(agent.Close)
	plainAgent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("plain HTTP agent got %s %s", r.Method, r.URL)
	}))
	t.Cleanup(plainAgent.Close)

	for _, tc := range []struct {
		name string
		loc  api.StreamURL
		want string
	}{
		{"its node", api.StreamURL{URL: agent.URL + "/v1/steps/s1/stream", Node: "n1"}, ""},
		{"another node", api.StreamURL{URL: agent.URL + "/v1/steps/s1/stream", Node: "n2"}, "want agent/n2"},
		{"plain http", api.StreamURL{URL: plainAgent.URL + "/v1/steps/s1/stream", Node: "n1"}, "plain HTTP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdin, _ := relay.AgentInput(func(context.Context, string) (api.StreamURL, error) { return tc.loc, nil }, agents)
			err := stdin(t.Context(), "s1", []byte("ls\r"))
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("stdin() = %v, want %q", err, tc.want)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{`POST /v1/steps/s1/input {"type":"stdin","data":"ls\r"}`}; !slices.Equal(got, want) {
		t.Errorf("the agent got %q, want %q", got, want)
	}
}
