package main

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/pki"
)

// TestAddresses: the scheduler's address and its scheme in both modes.
func TestAddresses(t *testing.T) {
	for _, tc := range []struct {
		addr      string
		plaintext bool
		want      []string
		err       string
	}{
		{"", false, []string{"https://127.0.0.1:7100"}, ""},
		{"", true, []string{"http://127.0.0.1:7100"}, ""},
		{"10.0.0.1:7100, 10.0.0.2:7100", false, []string{"https://10.0.0.1:7100", "https://10.0.0.2:7100"}, ""},
		{"127.0.0.1:7100", true, []string{"http://127.0.0.1:7100"}, ""},
		{"https://sched.example:7100/", false, []string{"https://sched.example:7100/"}, ""},
		{"http://127.0.0.1:7100", false, nil, "is plain HTTP: write https://127.0.0.1:7100"},
		{"https://127.0.0.1:7100", true, nil, "drop --plaintext"},
		{"http://192.0.2.1:7100", true, nil, "not a loopback address"},
		{"ftp://x", false, nil, "--addr"},
	} {
		c := &cli{env: func(k string) string {
			if k == "RODON_TLS_DIR" {
				return testPKI().operatorDir
			}
			return ""
		}}
		c.g.addr, c.g.tls.Plaintext = tc.addr, tc.plaintext
		cn, err := c.connect()
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("connect(--addr %q, plaintext %v) = %v, want an error naming %q", tc.addr, tc.plaintext, err, tc.err)
		case tc.err == "" && (err != nil || !slices.Equal(cn.addrs, tc.want)):
			t.Errorf("connect(--addr %q, plaintext %v) = %v, %v; want %q", tc.addr, tc.plaintext, cn, err, tc.want)
		}
	}
}

// TestPlaintext: --plaintext speaks plain HTTP to a scheduler and an
// agent started with --plaintext.
func TestPlaintext(t *testing.T) {
	sched := newPlainScheduler(t)
	agent := newFakeAgentOn(t, nil)
	sched.Restore([]cluster.Node{node("n1", addrOf(t, agent.srv.URL))}, []cluster.Step{liveStep("s1", cluster.StateRunning, "n1")})
	agent.add("s1", framesOf([]chunk{{api.KindStdout, "plain\n"}}, nil)...)
	if r := schedctl(t, sched.url, nil, "--plaintext", "nodes"); r.code != 0 || !strings.Contains(r.stdout, "n1") {
		t.Errorf("--plaintext nodes = %v, want the node", r)
	}
	if r := schedctl(t, sched.url, nil, "logs", "s1", "--plaintext"); r.code != 0 || r.stdout != "plain\n" {
		t.Errorf("logs --plaintext = %v, want the output", r)
	}
	// Without --plaintext, schedctl does not send a request in the clear.
	if r := schedctl(t, sched.url, nil, "nodes"); r.code != exitUsage || !strings.Contains(r.stderr, "--plaintext") {
		t.Errorf("nodes against a plain scheduler without --plaintext = %v, want exit 2 naming --plaintext", r)
	}
}

// TestNoCertificate: without an operator certificate schedctl says what to
// run to get one.
func TestNoCertificate(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		user, want string
	}{
		{"alice", "scheduler tls issue --role operator --name alice --out " + dir},
		{"Bob Smith!", "scheduler tls issue --role operator --name bobsmith --out " + dir},
		{"", "scheduler tls issue --role operator --name admin --out " + dir},
	} {
		r := schedctlEnv(t, map[string]string{"RODON_TLS_DIR": dir, "USER": tc.user}, nil, newSyncBuffer(), newSyncBuffer(), "nodes")
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "--tls-dir") {
			t.Errorf("nodes without a certificate (USER=%q) = %v; want exit 2 and %q", tc.user, r, tc.want)
		}
	}
	// Two operator certificates: which one is for the user to say.
	two := t.TempDir()
	for _, name := range []string{"alice", "bob"} {
		if _, err := testPKI().ca.IssueFiles(two, pki.Identity{Role: pki.RoleOperator, Name: name}, pki.IssueOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r := schedctlEnv(t, map[string]string{"RODON_TLS_DIR": two}, nil, newSyncBuffer(), newSyncBuffer(), "nodes")
	if r.code != exitUsage || !strings.Contains(r.stderr, "2 operator certificates") {
		t.Errorf("nodes with two operator certificates = %v; want exit 2 asking which", r)
	}
}

// TestCertFlags: --tls-cert (its key beside it) and --tls-ca instead of a
// directory.
func TestCertFlags(t *testing.T) {
	sched := newScheduler(t, 1, nil)
	sched.Restore([]cluster.Node{node("n1", netip.MustParseAddrPort("127.0.0.1:7300"))}, nil)
	// A copy elsewhere, so that --tls-dir cannot be what is used.
	dir := t.TempDir()
	for _, name := range []string{"operator-tester.crt", "operator-tester.key", "ca.crt"} {
		b, err := os.ReadFile(filepath.Join(testPKI().operatorDir, name))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "my-"+name), b, 0o600)
	}
	r := schedctlEnv(t, map[string]string{"RODON_SCHEDULER": sched.url, "RODON_TLS_DIR": t.TempDir()}, nil, newSyncBuffer(), newSyncBuffer(),
		"nodes", "--tls-cert", filepath.Join(dir, "my-operator-tester.crt"), "--tls-ca", filepath.Join(dir, "my-ca.crt"))
	if r.code != 0 || !strings.Contains(r.stdout, "n1") {
		t.Errorf("nodes --tls-cert --tls-ca = %v, want the node", r)
	}
	if r := schedctl(t, sched.url, nil, "--plaintext", "--tls-cert", "x.crt", "nodes"); r.code != exitUsage || !strings.Contains(r.stderr, "exclusive") {
		t.Errorf("--plaintext --tls-cert = %v, want exit 2", r)
	}
}

// TestSchedulerIdentity: schedctl talks only to scheduler members of its
// cluster's CA.
func TestSchedulerIdentity(t *testing.T) {
	// A server with an agent's certificate: the handshake fails before
	// any request.
	notMember := startFake(t, http.NotFoundHandler(), testPKI().agent, pki.RoleOperator)
	r := schedctl(t, notMember.URL, nil, "nodes")
	if r.code != exitError || !strings.Contains(r.stderr, "peer agent/n1: want role member") || !strings.Contains(r.stderr, "--tls-dir") {
		t.Errorf("nodes against an agent's certificate = %v; want exit 1, the identity and a hint", r)
	}
}

// TestAgentIdentity: a step's output is read only from the agent of the
// node the scheduler names, over TLS.
func TestAgentIdentity(t *testing.T) {
	sched, agent := newScheduler(t, 1, nil), newFakeAgent(t)
	plainAgent := newFakeAgentOn(t, nil)
	// Node n2 is at the address of the agent of n1.
	sched.Restore([]cluster.Node{node("n2", addrOf(t, agent.srv.URL))}, []cluster.Step{liveStep("s1", cluster.StateRunning, "n2")})
	agent.add("s1", framesOf([]chunk{{api.KindStdout, "secret\n"}}, nil)...)
	plainAgent.add("s1", framesOf([]chunk{{api.KindStdout, "secret\n"}}, nil)...)

	r := schedctl(t, sched.url, nil, "logs", "s1")
	if r.code != exitError || !strings.Contains(r.stderr, "want agent/n2") || strings.Contains(r.stdout, "secret") {
		t.Errorf("logs of a step on n2 served by agent/n1 = %v; want exit 1 naming agent/n2", r)
	}
	if c := agent.connections(); len(c) != 0 {
		t.Errorf("the agent of n1 got %d stream requests, want none", len(c))
	}
	// A scheduler that hands out an http:// stream address (which the
	// real one never does with TLS) for node n1, at the plain agent.
	sched.Restore([]cluster.Node{node("n1", addrOf(t, plainAgent.srv.URL))}, []cluster.Step{liveStep("s1", cluster.StateRunning, "n1")})
	sched.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasSuffix(r.URL.Path, "/stream-url") {
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(api.StreamURL{URL: plainAgent.srv.URL + "/v1/steps/s1/stream", Node: "n1"})
		})
	})
	for _, args := range [][]string{{"logs", "s1"}, {"logs", "-f", "s1"}} {
		r = schedctl(t, sched.url, nil, args...)
		if r.code != exitError || !strings.Contains(r.stderr, "plain HTTP") || strings.Contains(r.stdout, "secret") {
			t.Errorf("%q from an http:// stream address = %v; want exit 1, refused", args, r)
		}
	}
	if c := plainAgent.connections(); len(c) != 0 {
		t.Errorf("the plain agent got %d stream requests, want none", len(c))
	}
}
