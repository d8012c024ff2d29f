package pki_test

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/pki/pkitest"
)

func TestIdentityURI(t *testing.T) {
	id := pkitest.Identity(t, pki.RoleAgent, "n1")
	if got, want := id.URI().String(), "spiffe://rodon/agent/n1"; got != want {
		t.Errorf("URI() = %q, want %q", got, want)
	}
	for _, bad := range []string{"agent", "boss/n1", "agent/", "agent/N1", "agent/a/b", "agent/" + strings.Repeat("a", 64)} {
		if _, err := pki.ParseIdentity(bad); err == nil {
			t.Errorf("ParseIdentity(%q) = nil error, want one", bad)
		}
	}
}

func TestInitCARefusesToReplace(t *testing.T) {
	ca := pkitest.New(t)
	if err := pki.InitCA(ca.Dir, 0); !errors.Is(err, pki.ErrExists) {
		t.Fatalf("InitCA over an existing CA = %v, want ErrExists", err)
	}
	fi, err := os.Stat(ca.Dir + "/" + pki.CAKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("ca.key mode = %v, want 0600", fi.Mode().Perm())
	}
}

func TestLoadChecksIdentityAndValidity(t *testing.T) {
	ca := pkitest.New(t)
	id := pkitest.Identity(t, pki.RoleAgent, "n1")
	files := ca.Issue(t, id, pki.IssueOptions{})
	if _, err := pki.Load(files, pkitest.Identity(t, pki.RoleAgent, "n2"), slog.New(slog.DiscardHandler)); err == nil {
		t.Error("Load of agent/n1's pair as agent/n2 = nil error, want a refusal")
	}
	if _, err := pki.Load(ca.Expired(t, pki.RoleAgent, "old"), pki.Identity{}, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("Load of an expired pair = nil error, want a refusal")
	}
	other := pkitest.New(t)
	files.CA = other.Dir + "/" + pki.CACertFile
	if _, err := pki.Load(files, id, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("Load of a pair under another CA = nil error, want a refusal")
	}
}

// serve starts an HTTPS server with src's ServerConfig that answers the
// caller's identity.
func serve(t *testing.T, src *pki.Source, authorize pki.Authorizer) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := pki.PeerIdentity(r.TLS)
		if !ok {
			http.Error(w, "no identity", http.StatusForbidden)
			return
		}
		io.WriteString(w, id.String())
	}))
	srv.TLS = src.ServerConfig(authorize)
	srv.Config.ErrorLog = nil
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, cfg *tls.Config, url string) (string, error) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.TLS == nil || resp.TLS.Version != tls.VersionTLS13 {
		t.Errorf("connection is not TLS 1.3: %+v", resp.TLS)
	}
	return string(b), nil
}

func TestMutualTLS(t *testing.T) {
	ca := pkitest.New(t)
	member := ca.Source(t, pki.RoleMember, "m1")
	srv := serve(t, member, pki.AnyIdentity)

	agent := ca.Source(t, pki.RoleAgent, "n1")
	got, err := get(t, agent.ClientConfig(pki.AllowRoles(pki.RoleMember)), srv.URL)
	if err != nil || got != "agent/n1" {
		t.Fatalf("GET as agent/n1 = %q, %v; want the server to see agent/n1", got, err)
	}

	// The client refuses a server of the wrong role.
	if _, err := get(t, agent.ClientConfig(pki.AllowRoles(pki.RoleGateway)), srv.URL); err == nil || !strings.Contains(err.Error(), "member/m1") {
		t.Errorf("GET from a member while wanting a gateway = %v, want a refusal naming member/m1", err)
	}

	attacks := map[string]*tls.Config{
		"no client certificate": {InsecureSkipVerify: true, MinVersion: tls.VersionTLS13},
		"another CA":            pkitest.New(t).Source(t, pki.RoleOperator, "eve").ClientConfig(pki.AnyIdentity),
		"expired":               clientWithPair(t, ca.Expired(t, pki.RoleOperator, "old")),
		"TLS 1.2": func() *tls.Config {
			c := agent.ClientConfig(pki.AnyIdentity)
			c.MinVersion, c.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
			return c
		}(),
	}
	for name, cfg := range attacks {
		t.Run(name, func(t *testing.T) {
			if got, err := get(t, cfg, srv.URL); err == nil {
				t.Errorf("GET = %q, nil error; want a failed handshake", got)
			}
		})
	}
}

func clientWithPair(t *testing.T, files pki.Files) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair}}
}

func TestServerAuthorizerRefusesHandshake(t *testing.T) {
	ca := pkitest.New(t)
	srv := serve(t, ca.Source(t, pki.RoleMember, "m1"), pki.AllowRoles(pki.RoleMember))
	gw := ca.Source(t, pki.RoleGateway, "g1")
	if _, err := get(t, gw.ClientConfig(pki.AnyIdentity), srv.URL); err == nil {
		t.Fatal("a gateway reached a members-only listener")
	}
	m2 := ca.Source(t, pki.RoleMember, "m2")
	if got, err := get(t, m2.ClientConfig(pki.AnyIdentity), srv.URL); err != nil || got != "member/m2" {
		t.Fatalf("GET as member/m2 = %q, %v", got, err)
	}
}

func TestRotationWithoutRestart(t *testing.T) {
	ca := pkitest.New(t)
	src := ca.Source(t, pki.RoleMember, "m1")
	srv := serve(t, src, pki.AnyIdentity)
	client := ca.Source(t, pki.RoleOperator, "ops")
	first := src.NotAfter()

	// Re-issue on disk; the next handshake after checkEvery uses it.
	time.Sleep(1100 * time.Millisecond)
	if _, err := ca.IssueFiles(ca.Dir, src.Identity(), pki.IssueOptions{ValidFor: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: client.ClientConfig(pki.AnyIdentity), DisableKeepAlives: true}}
	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.TLS.PeerCertificates[0].NotAfter; !got.Before(first) {
		t.Errorf("server certificate after rotation expires %v, want the new one (before %v)", got, first)
	}

	// A broken file keeps the previous certificate in service.
	time.Sleep(1100 * time.Millisecond)
	if err := os.WriteFile(src.Files().Cert, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := get(t, client.ClientConfig(pki.AnyIdentity), srv.URL); err != nil {
		t.Fatalf("GET after a broken rotation = %v, want the old certificate still served", err)
	}
	if err := src.Reload(); err == nil {
		t.Error("Reload of a garbage certificate = nil error")
	}
}

func TestListenRefusesRawTCP(t *testing.T) {
	ca := pkitest.New(t)
	src := ca.Source(t, pki.RoleMember, "m1")
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := src.Listen(raw, pki.AllowRoles(pki.RoleMember))
	defer ln.Close()
	// readOne accepts a connection and reads n bytes of it into got.
	got := make(chan error, 1)
	readOne := func(n int) {
		c, err := ln.Accept()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		_, err = io.ReadFull(c, make([]byte, n))
		got <- err
	}
	go readOne(1)
	c, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("\x00plain bytes, not a TLS hello\r\n"))
	if err := <-got; err == nil {
		t.Fatal("server read plain bytes from a raw TCP client")
	}
	c.Close()

	peer := ca.Source(t, pki.RoleMember, "m2")
	go readOne(2)
	tc, err := peer.Dial(t.Context(), raw.Addr().String(), 5*time.Second, pki.AllowRoles(pki.RoleMember))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	tc.Write([]byte("ok"))
	if err := <-got; err != nil {
		t.Fatalf("member to member over Listen/Dial: %v", err)
	}
}

func TestHandshakeCounts(t *testing.T) {
	ca := pkitest.New(t)
	member := ca.Source(t, pki.RoleMember, "m1")
	srv := serve(t, member, pki.AllowRoles(pki.RoleAgent))
	agent := ca.Source(t, pki.RoleAgent, "n1")
	if _, err := get(t, agent.ClientConfig(pki.AllowRoles(pki.RoleMember)), srv.URL); err != nil {
		t.Fatal(err)
	}
	gw := ca.Source(t, pki.RoleGateway, "g1")
	get(t, gw.ClientConfig(pki.AnyIdentity), srv.URL)
	get(t, agent.ClientConfig(pki.AllowRoles(pki.RoleOperator)), srv.URL)
	for _, tc := range []struct {
		src  *pki.Source
		key  pki.HandshakeKey
		want uint64
	}{
		// The third: the agent refused the server before sending its own
		// certificate, so the server never saw it.
		{member, pki.HandshakeKey{Side: pki.SideServer, PeerRole: "agent", Result: pki.ResultOK}, 1},
		{member, pki.HandshakeKey{Side: pki.SideServer, PeerRole: "gateway", Result: pki.ResultRefused}, 1},
		{agent, pki.HandshakeKey{Side: pki.SideClient, PeerRole: "member", Result: pki.ResultOK}, 1},
		{agent, pki.HandshakeKey{Side: pki.SideClient, PeerRole: "member", Result: pki.ResultRefused}, 1},
		{gw, pki.HandshakeKey{Side: pki.SideClient, PeerRole: "member", Result: pki.ResultOK}, 1},
	} {
		if got := tc.src.Handshakes()[tc.key]; got != tc.want {
			t.Errorf("%s Handshakes()[%+v] = %d, want %d (all: %v)", tc.src.Identity(), tc.key, got, tc.want, tc.src.Handshakes())
		}
	}
}
