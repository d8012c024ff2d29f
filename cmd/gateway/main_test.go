package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/gateway/gatewaytest"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/pki/pkitest"
)

func TestFlagErrors(t *testing.T) {
	dir := t.TempDir()
	base := []string{"serve", "--scheduler", "http://127.0.0.1:7100", "--data-dir", dir}
	with := func(extra ...string) []string { return append(append([]string{}, base...), extra...) }
	t.Setenv("RODON_SCHEDULER", "")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "usage"},
		{"unknown command", []string{"bogus"}, `unknown command "bogus"`},
		{"unknown flag", with("--bogus"), "-bogus"},
		{"missing scheduler", []string{"serve", "--data-dir", dir}, "--scheduler is required"},
		{"missing data dir", []string{"serve", "--scheduler", "x:1"}, "--data-dir is required"},
		{"bad listen", with("--listen", "nowhere"), `--listen "nowhere"`},
		{"bad ttl", with("--session-ttl", "-1s"), "--session-ttl"},
		{"bad log level", with("--log-level", "loud"), "--log-level"},
		{"argument", with("extra"), `unexpected argument "extra"`},
		{"bad scheduler", []string{"serve", "--scheduler", "ftp://x", "--data-dir", dir}, "--scheduler"},
		{"bootstrap without email", []string{"bootstrap", "--scheduler", "x:1"}, "--email is required"},
		{"bootstrap without scheduler", []string{"bootstrap", "--email", "a@b.c"}, "--scheduler is required"},
		{"public listen without https", with("--listen", "0.0.0.0:7300"), "--listen 0.0.0.0:7300 is not a loopback address"},
		{"all interfaces without https", with("--listen", ":7300"), "--https-cert FILE --https-key FILE"},
		{"https cert without key", with("--https-cert", "c.pem"), "--https-key is required"},
		{"https key without cert", with("--https-key", "k.pem"), "--https-cert is required"},
		{"https cert missing", with("--https-cert", dir+"/none.crt", "--https-key", dir+"/none.key"), "--https-cert"},
		{"bad name", with("--name", "Gate Way"), "--name"},
		{"plain scheduler with tls", []string{"serve", "--scheduler", "http://127.0.0.1:7100", "--data-dir", dir},
			"--scheduler http://127.0.0.1:7100 is plain HTTP"},
		{"https scheduler with plaintext", with("--plaintext", "--scheduler", "https://127.0.0.1:7100"), "--plaintext"},
		{"plaintext off loopback", with("--plaintext", "--scheduler", "http://192.0.2.1:7100"), "not a loopback address"},
		{"no certificate", []string{"serve", "--scheduler", "127.0.0.1:7100", "--data-dir", dir, "--tls-dir", dir, "--name", "gw9"},
			"scheduler tls issue --role gateway --name gw9 --dir " + dir},
		{"bootstrap without certificate", []string{"bootstrap", "--scheduler", "127.0.0.1:7100", "--tls-dir", dir, "--email", "a@b.c"},
			"scheduler tls issue --role gateway --name gateway"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("run(%q) = %d, stderr %q; want %d naming %q", tc.args, code, stderr.String(), exitUsage, tc.want)
			}
		})
	}
}

func TestSiteDefault(t *testing.T) {
	ca := pkitest.New(t)
	pair := ca.Issue(t, pkitest.Identity(t, pki.RoleGateway, "gw1"), pki.IssueOptions{Hosts: []string{"gw.example.com", "192.0.2.7"}})
	ipOnly := ca.Issue(t, pkitest.Identity(t, pki.RoleGateway, "gw2"), pki.IssueOptions{Hosts: []string{"192.0.2.7"}})
	for _, tc := range []struct {
		listen    string
		cert, key string
		site      string
		want      string
	}{
		{"127.0.0.1:7300", "", "", "", "http://127.0.0.1:7300"},
		{"localhost:7300", "", "", "", "http://localhost:7300"},
		{"0.0.0.0:443", pair.Cert, pair.Key, "", "https://gw.example.com:443"},
		{":443", ipOnly.Cert, ipOnly.Key, "", "https://192.0.2.7:443"},
		{"192.0.2.7:8443", pair.Cert, pair.Key, "", "https://192.0.2.7:8443"},
		{"127.0.0.1:7300", pair.Cert, pair.Key, "", "https://127.0.0.1:7300"},
		{"0.0.0.0:443", pair.Cert, pair.Key, "https://rodon.example.com/", "https://rodon.example.com"},
	} {
		f := serveFlags{cluster: clusterFlags{scheduler: "x:1", name: "gw1"}, dataDir: "d", listen: tc.listen,
			httpsCert: tc.cert, httpsKey: tc.key, site: tc.site, sessionTTL: 1, settings: defaultSettings()}
		c, _, err := f.config(slog.New(slog.DiscardHandler))
		if err != nil || c.Site != tc.want || (c.TLS != nil) != (tc.cert != "") {
			t.Errorf("config(--listen %s, cert %v) site = %q, TLS %v, %v; want %s", tc.listen, tc.cert != "", c.Site, c.TLS != nil, err, tc.want)
		}
	}
}

// TestBootstrapPrintsOnce: the password goes to stdout once; a second
// bootstrap does nothing.
func TestBootstrapPrintsOnce(t *testing.T) {
	store := gatewaytest.NewMemStore()
	var out, errw bytes.Buffer
	if err := bootstrap(t.Context(), store, "boss@example.com", &out, &errw); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "password: ") || !strings.Contains(out.String(), "boss@example.com") {
		t.Errorf("stdout = %q, want the owner and its password", out.String())
	}
	out.Reset()
	if err := bootstrap(t.Context(), store, "boss@example.com", &out, &errw); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 || !strings.Contains(errw.String(), "exists already") {
		t.Errorf("second bootstrap: stdout %q stderr %q, want nothing printed and a note", out.String(), errw.String())
	}
	if err := bootstrap(t.Context(), store, "not-an-email", &out, &errw); err == nil || !strings.Contains(err.Error(), "--email") {
		t.Errorf("bootstrap(bad email) = %v, want an error naming --email", err)
	}
}
