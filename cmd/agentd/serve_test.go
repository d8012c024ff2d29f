package main

import (
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/internal/cli"
)

// TestServeRefusesPlaintext checks that agentd serve does not start
// without TLS off loopback, naming the flag to change.
func TestServeRefusesPlaintext(t *testing.T) {
	base := []string{"serve", "--node-id", "n1", "--data-dir", t.TempDir()}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--plaintext", "--listen", "11.0.0.1:7200", "--scheduler", "http://127.0.0.1:7100"}, "--plaintext: 11.0.0.1:7200 is not a loopback address"},
		{[]string{"--plaintext", "--listen", "127.0.0.1:7200", "--scheduler", "http://11.0.0.1:7100"}, "--plaintext: http://11.0.0.1:7100 is not a loopback address"},
		{[]string{"--plaintext", "--listen", "127.0.0.1:7200", "--scheduler", "https://127.0.0.1:7100"}, "drop --plaintext"},
		{[]string{"--tls-dir", t.TempDir(), "--listen", "11.0.0.1:7200", "--scheduler", "https://11.0.0.1:7100"}, "--tls-dir"},
	} {
		code, _, stderr := runAgentd(t, append(base, tt.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("agentd %q = exit %d, stderr %q; want exit 2 naming %q", tt.args, code, stderr, tt.want)
		}
	}
}

func TestSchedulerURLs(t *testing.T) {
	for _, tc := range []struct {
		urls    []string
		tls     bool
		want    string
		wantErr string
	}{
		{[]string{"a:1", "https://b:2"}, true, "https://a:1,https://b:2", ""},
		{[]string{"a:1", "http://b:2"}, false, "http://a:1,http://b:2", ""},
		{[]string{"http://a:1"}, true, "", "write https://a:1"},
		{[]string{"https://a:1"}, false, "", "drop --plaintext"},
		{[]string{"https://"}, true, "", "want https://HOST:PORT"},
	} {
		got, err := cli.SchedulerURLs(strings.Join(tc.urls, ","), "--scheduler", "agentd", tc.tls)
		if strings.Join(got, ",") != tc.want || tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("schedulerURLs(%q, tls %v) = %v, %v; want %q, error %q", tc.urls, tc.tls, got, err, tc.want, tc.wantErr)
		}
	}
}
