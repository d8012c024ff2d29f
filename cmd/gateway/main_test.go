package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/gateway/gatewaytest"
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
	f := serveFlags{scheduler: "x:1", dataDir: "d", listen: "0.0.0.0:7300", sessionTTL: 1}
	c, err := f.config()
	if err != nil || c.Site != "http://127.0.0.1:7300" {
		t.Errorf("config() site = %q, %v; want http://127.0.0.1:7300", c.Site, err)
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
