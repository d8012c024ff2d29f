package main

import (
	"bytes"
	"errors"
	"flag"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/gateway"

	"github.com/rodon-compute/rodon/internal/cli"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/pki/pkitest"
	"github.com/rodon-compute/rodon/scheduler/schedulertest"
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
		{"quota over its maximum", with("--quota-live-runs-per-workspace", "1001"), "--quota-live-runs-per-workspace 1001: want 1 to 1000"},
		{"quota zero", with("--quota-queued-steps-per-principal", "0"), "--quota-queued-steps-per-principal 0"},
		{"sign-in burst", with("--signin-per-address-burst", "0"), "--signin-per-address-burst 0"},
		{"sign-in refill", with("--signin-per-email-every", "1ms"), "--signin-per-email-every 1ms"},
		{"hashing", with("--signin-hashing", "65"), "--signin-hashing 65"},
		{"read timeout", with("--http-read-timeout", "0s"), "--http-read-timeout 0s"},
		{"max file size zero", with("--max-file-size", "0"), "--max-file-size 0"},
		{"max file size over", with("--max-file-size", "65Gi"), "--max-file-size 65GiB: want 1 byte to 64GiB"},
		{"max file size grammar", with("--max-file-size", "1 gigabyte"), "flag -max-file-size: size \"1 gigabyte\""},
		{"idle timeout", with("--http-idle-timeout", "2h"), "--http-idle-timeout 2h0m0s"},
		{"retention", with("--run-retention", "100ms"), "--run-retention 100ms"},
		{"maintenance", with("--maintenance-interval", "48h"), "--maintenance-interval 48h0m0s"},
		{"approval ttl", with("--approval-ttl", "1s"), "--approval-ttl 1s: want 10s to 24h0m0s"},
		{"stream recheck", with("--stream-recheck", "31s"), "--stream-recheck 31s: want more than 0 and at most 30s"},
		{"root key in the data dir", with("--root-key-file", dir+"/keys/root-key.json"), "--root-key-file " + dir + "/keys/root-key.json is inside --data-dir"},
		{"keys without command", []string{"keys"}, "want init-root or rotate-root"},
		{"keys unknown command", []string{"keys", "rotate"}, `unknown keys command "rotate"`},
		{"rotate-root without scheduler", []string{"keys", "rotate-root", "--root-key-file", dir + "/rk.json"}, "--scheduler is required"},
		{"rotate-root without file", []string{"keys", "rotate-root", "--scheduler", "http://127.0.0.1:7100", "--plaintext", "--root-key-file", dir + "/none.json"},
			"--root-key-file: stat " + dir + "/none.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != cli.ExitUsage || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("run(%q) = %d, stderr %q; want %d naming %q", tc.args, code, stderr.String(), cli.ExitUsage, tc.want)
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
			clusterListen: "127.0.0.1:7301", clusterURL: "https://127.0.0.1:7301",
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
	store := schedulertest.New(t, schedulertest.Options{}).Client()
	var out, errw bytes.Buffer
	if err := bootstrap(t.Context(), store, "boss@example.com", "default", &out, &errw); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "password: ") || !strings.Contains(out.String(), "boss@example.com") {
		t.Errorf("stdout = %q, want the owner and its password", out.String())
	}
	out.Reset()
	if err := bootstrap(t.Context(), store, "boss@example.com", "default", &out, &errw); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 || !strings.Contains(errw.String(), "exists already") {
		t.Errorf("second bootstrap: stdout %q stderr %q, want nothing printed and a note", out.String(), errw.String())
	}
	if err := bootstrap(t.Context(), store, "not-an-email", "default", &out, &errw); err == nil || !strings.Contains(err.Error(), "--email") {
		t.Errorf("bootstrap(bad email) = %v, want an error naming --email", err)
	}
}

// TestServeHelp: `gateway serve -h` names every bound with its default
// and range.
func TestServeHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	run([]string{"serve", "-h"}, &stdout, &stderr)
	for _, want := range []string{
		"-quota-live-runs-per-workspace int\n", "(1-1000); a run past it is refused with 429 quota_exceeded (default 50)",
		"-quota-live-runs-per-principal int\n", "(1-1000) (default 20)",
		"-quota-queued-steps-per-workspace int\n", "(1-1000) (default 20)",
		"-quota-queued-steps-per-principal int\n", "(1-1000) (default 10)",
		"-signin-per-address-burst int\n", "(1-1000) (default 20)",
		"-signin-per-address-every duration\n", "(10ms-1h0m0s) (default 5s)",
		"-signin-per-email-burst int\n", "(1-100) (default 5)",
		"-signin-per-email-every duration\n", "(10ms-1h0m0s) (default 30s)",
		"-signin-hashing int\n", "(1-64); past it a sign-in waits up to 2s, then 503 (default 4)",
		"-http-read-header-timeout duration\n", "(at most 1m0s) (default 10s)",
		"-http-read-timeout duration\n", "between two reads (at most 10m0s) (default 30s)",
		"-http-write-timeout duration\n", "between two writes (at most 10m0s) (default 1m0s)",
		"-http-idle-timeout duration\n", "(at most 1h0m0s) (default 2m0s)",
		"-run-retention duration\n", "(1s-87600h0m0s; a run not settled is kept until it is) (default 2160h0m0s)",
		"-maintenance-interval duration\n", "(1s-24h0m0s) (default 1m0s)",
		"-approval-ttl duration\n", "apply it (10s-24h0m0s) (default 15m0s)",
		"-stream-recheck duration\n", "(at most 30s) (default 30s)",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("gateway serve -h does not say %q", want)
		}
	}
}

// TestSettingsReachTheGateway: the settings' flags set the gateway's
// configuration; their defaults are the gateway's.
func TestSettingsReachTheGateway(t *testing.T) {
	parse := func(args ...string) serveFlags {
		var f serveFlags
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		f.register(fs)
		if err := fs.Parse(append([]string{"--scheduler", "x:1", "--data-dir", "d"}, args...)); err != nil {
			t.Fatal(err)
		}
		return f
	}
	f := parse()
	c, _, err := f.config(slog.New(slog.DiscardHandler))
	d := gateway.DefaultConfig()
	if err != nil || c.Quotas != d.Quotas || c.SignIn != d.SignIn || c.Timeouts != d.Timeouts || c.RunRetention != d.RunRetention ||
		c.MaintenanceInterval != d.MaintenanceInterval || c.ApprovalTTL != d.ApprovalTTL || f.settings.streamRecheck != 30*time.Second {
		t.Errorf("defaults: %+v, %v; want the gateway's", c, err)
	}
	f = parse("--quota-live-runs-per-workspace", "7", "--signin-hashing", "2", "--http-write-timeout", "5s",
		"--run-retention", "48h", "--maintenance-interval", "10s", "--stream-recheck", "5s", "--approval-ttl", "1h")
	c, _, err = f.config(slog.New(slog.DiscardHandler))
	if err != nil || c.Quotas.LiveRunsPerWorkspace != 7 || c.SignIn.Hashing != 2 || c.Timeouts.Write != 5*time.Second ||
		c.RunRetention != 48*time.Hour || c.MaintenanceInterval != 10*time.Second || c.ApprovalTTL != time.Hour || f.settings.streamRecheck != 5*time.Second {
		t.Errorf("set: %+v (recheck %v), %v; want the flags' values", c, f.settings.streamRecheck, err)
	}
	if c.ClusterListen != d.ClusterListen || c.ClusterURL != d.ClusterURL {
		t.Errorf("cluster listener %s %s, want the defaults %s %s", c.ClusterListen, c.ClusterURL, d.ClusterListen, d.ClusterURL)
	}
	f = parse("--cluster-listen", "0.0.0.0:7401", "--cluster-url", "https://gw.example.com:7401")
	if c, _, err = f.config(slog.New(slog.DiscardHandler)); err != nil || c.ClusterListen != "0.0.0.0:7401" || c.ClusterURL != "https://gw.example.com:7401" {
		t.Errorf("cluster listener %s %s, %v; want the flags' values", c.ClusterListen, c.ClusterURL, err)
	}
	for _, args := range [][]string{
		{"--cluster-url", "http://gw.example.com:7401"},
		{"--cluster-listen", "7401"},
		{"--cluster-listen", "127.0.0.1:7300"}, // --listen's
	} {
		f = parse(args...)
		if _, _, err := f.config(slog.New(slog.DiscardHandler)); !errors.Is(err, cli.ErrUsage) || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("config(%q) = %v, want a usage error naming %s", args, err, args[0])
		}
	}
}

// TestAccountCreateAndList: `gateway account create` makes an account
// with a new owner (password shown once) or an existing person (none),
// and `gateway account list` shows them.
func TestAccountCreateAndList(t *testing.T) {
	store := schedulertest.New(t, schedulertest.Options{}).Client()
	var out, errw bytes.Buffer
	if err := accountCreate(t.Context(), store, "Acme", "ada@example.com", false, &out, &errw); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Acme") || !strings.Contains(out.String(), "password: ") {
		t.Errorf("create stdout = %q, want the account and a password", out.String())
	}
	out.Reset()
	if err := accountCreate(t.Context(), store, "Beta", "ada@example.com", true, &out, &errw); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "owner_password") {
		t.Errorf("create for an existing person = %s, want no password", out.String())
	}
	out.Reset()
	if err := accountList(t.Context(), store, false, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Acme") || !strings.Contains(out.String(), "Beta") {
		t.Errorf("list = %q, want both accounts", out.String())
	}
}

// TestAccountFlags: `gateway account create` takes its flags beside the
// cluster's (its name flag does not collide with --name, the gateway's
// identity) and refuses a missing one by name.
func TestAccountFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	err := accountCmd([]string{"create", "--owner-email", "e@example.com", "--scheduler", "https://127.0.0.1:1"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "--account-name") {
		t.Errorf("account create without --account-name = %v, want an error naming --account-name", err)
	}
	err = accountCmd([]string{"create", "--account-name", "acme", "--owner-email", "e@example.com", "--name", "gw1"}, &out, &errOut)
	if err != nil && strings.Contains(err.Error(), "flag provided but not defined") {
		t.Errorf("account create with --account-name and --name = %v, want both flags taken", err)
	}
}
