package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rodon-compute/rodon/internal/cli"
	"github.com/rodon-compute/rodon/internal/envseal"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/pki/pkitest"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/scheduler"
)

// TestMain lets a test run this binary as the scheduler itself: with
// SCHEDULER_TEST_MAIN set, it is main.
func TestMain(m *testing.M) {
	if os.Getenv("SCHEDULER_TEST_MAIN") != "" {
		main()
	}
	os.Exit(m.Run())
}

func TestServeFlagErrors(t *testing.T) {
	dir := t.TempDir()
	// A TLS dir with the CA and another member's certificate only.
	ca := pkitest.New(t)
	ca.Issue(t, pkitest.Identity(t, pki.RoleMember, "m2"), pki.IssueOptions{})
	base := []string{"serve", "--node-id", "m1", "--data-dir", dir, "--raft-addr", "127.0.0.1:7101", "--http-addr", "127.0.0.1:7100"}
	with := func(extra ...string) []string { return append(append([]string{}, base...), extra...) }
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "usage"},
		{"unknown command", []string{"bogus"}, `unknown command "bogus"`},
		{"unknown flag", with("--bogus"), "-bogus"},
		{"missing node id", []string{"serve", "--data-dir", dir}, "--node-id is required"},
		{"missing data dir", []string{"serve", "--node-id", "m1"}, "--data-dir is required"},
		{"bad raft addr", with("--raft-addr", "nowhere"), `--raft-addr "nowhere"`},
		{"wildcard http addr", with("--http-addr", "0.0.0.0:7100"), `--http-addr "0.0.0.0:7100"`},
		{"bad ttl", with("--node-ttl", "soon"), "-node-ttl"},
		{"negative ttl", with("--node-ttl", "-1s"), "--node-ttl -1s"},
		{"queue timeout over its maximum", with("--queue-timeout", "200h"), "--queue-timeout 200h0m0s: want 1s to 168h0m0s"},
		{"zero start timeout", with("--start-timeout", "0s"), "--start-timeout 0s: want 100ms to 1h0m0s"},
		{"gc percent under -1", with("--gc-percent", "-2"), "--gc-percent -2: want -1 (off) or more"},
		{"gc off without a memory limit", with("--gc-percent", "-1"), "set --memory-limit too"},
		{"bad memory limit", with("--memory-limit", "lots"), "-memory-limit"},
		{"create timeout over its maximum", with("--create-timeout", "25h"), "--create-timeout 25h0m0s: want 100ms to 24h0m0s"},
		{"create timeout under the start timeout", with("--start-timeout", "5m", "--create-timeout", "1m"), "--create-timeout 1m0s: must be at least --start-timeout 5m0s"},
		{"step retention over its maximum", with("--step-retention", "2200h"), "--step-retention 2200h0m0s: want 1s to 2160h0m0s"},
		{"step retention under its minimum", with("--step-retention", "10ms"), "--step-retention 10ms: want 1s"},
		{"http timeout over its maximum", with("--http-timeout", "2h"), "--http-timeout 2h0m0s: want 100ms to 1h0m0s"},
		{"zero header timeout", with("--http-header-timeout", "0s"), "--http-header-timeout 0s"},
		{"zero snapshot timeout", with("--snapshot-timeout", "0s"), "--snapshot-timeout 0s"},
		{"zero idle timeout", with("--http-idle-timeout", "0s"), "--http-idle-timeout 0s"},
		{"bootstrap and join", with("--bootstrap", "--join", "127.0.0.1:7000"), "--bootstrap and --join are exclusive"},
		{"bad join", with("--join", "x"), `--join "x"`},
		{"bad log level", with("--log-level", "loud"), "--log-level"},
		{"argument", with("extra"), `unexpected argument "extra"`},
		{"plaintext on a public http addr", with("--plaintext", "--http-addr", "192.0.2.1:7100"), `--http-addr "192.0.2.1:7100" is not a loopback address`},
		{"plaintext on a public raft addr", with("--plaintext", "--raft-addr", "192.0.2.1:7101"), `--raft-addr "192.0.2.1:7101" is not a loopback address`},
		{"plaintext joining a public member", with("--plaintext", "--join", "192.0.2.1:7100"), `--join "192.0.2.1:7100" is not a loopback address`},
		{"plaintext joining over https", with("--plaintext", "--join", "https://127.0.0.1:7100"), "--plaintext members speak http://"},
		{"http join with TLS", with("--tls-dir", ca.Dir, "--join", "http://127.0.0.1:7000"), "members speak TLS"},
		{"no TLS files", with("--tls-dir", t.TempDir()), "--tls-dir"},
		{"another member's certificate", with("--tls-dir", ca.Dir), "scheduler tls issue --role member --name m1"},
		{"node id not a certificate name", with("--tls-dir", ca.Dir, "--node-id", "M 1"), "--node-id"},
		{"plaintext and a certificate", with("--plaintext", "--tls-cert", "x.crt"), "exclusive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != cli.ExitUsage || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("run(%q) = %d, stderr %q; want %d naming %q", tc.args, code, stderr.String(), cli.ExitUsage, tc.want)
			}
		})
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	return testenv.FreeAddr(t)
}

// member is `scheduler serve --bootstrap` run as a process.
type member struct {
	cmd      *exec.Cmd
	stderr   *testenv.SyncBuffer
	httpAddr string
}

// startMember runs `scheduler serve --node-id m1 --bootstrap` with extra
// flags, and waits until it leads, asking scheme://HTTPADDR/healthz
// through hc.
func startMember(t *testing.T, scheme string, hc *http.Client, extra ...string) *member {
	t.Helper()
	m := &member{stderr: &testenv.SyncBuffer{}, httpAddr: freePort(t)}
	args := append([]string{"serve", "--node-id", "m1", "--data-dir", t.TempDir(),
		"--raft-addr", freePort(t), "--http-addr", m.httpAddr, "--bootstrap"}, extra...)
	m.cmd = exec.Command(os.Args[0], args...)
	m.cmd.Env = append(os.Environ(), "SCHEDULER_TEST_MAIN=1")
	m.cmd.Stderr = m.stderr
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.cmd.Process.Kill() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		var h struct {
			RaftState string `json:"raft_state"`
		}
		resp, err := hc.Get(scheme + "://" + m.httpAddr + "/healthz")
		if err == nil {
			json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
			if h.RaftState == "leader" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the scheduler did not lead in 10s; stderr:\n%s", m.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return m
}

// TestServeStopsOnSIGTERM runs `scheduler serve --bootstrap --plaintext`
// as a process, waits for it to lead, and stops it with SIGTERM: it exits
// 0 and its stderr is JSON logs.
func TestServeStopsOnSIGTERM(t *testing.T) {
	m := startMember(t, "http", http.DefaultClient, "--plaintext")
	m.stop(t)
}

// stop sends SIGTERM and checks the member exits 0 and logged JSON.
func (m *member) stop(t *testing.T) {
	t.Helper()
	cmd, stderr := m.cmd, m.stderr
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("scheduler after SIGTERM: %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("scheduler still running 10s after SIGTERM")
	}
	logs := stderr.String()
	sc := bufio.NewScanner(strings.NewReader(logs))
	lines := 0
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec["msg"] == nil {
			t.Errorf("stderr line %q is not a JSON log record", sc.Text())
		}
		lines++
	}
	if lines == 0 || !strings.Contains(logs, "scheduler member stopped") {
		t.Errorf("stderr has %d lines, want the JSON logs of a start and a stop", lines)
	}
}

// TestServeTLS runs a member with its certificate: it serves mutual TLS
// only, and after its certificate is re-issued and it gets a SIGHUP it
// presents the new one, without a restart.
func TestServeTLS(t *testing.T) {
	ca := pkitest.New(t)
	ca.Issue(t, pkitest.Identity(t, pki.RoleMember, "m1"), pki.IssueOptions{})
	if err := envseal.Create(filepath.Join(ca.Dir, envseal.KeyFile)); err != nil {
		t.Fatal(err)
	}
	ops := ca.Source(t, pki.RoleOperator, "ops")
	tr := ops.Transport(pki.AllowRoles(pki.RoleMember))
	tr.DisableKeepAlives = true
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	m := startMember(t, "https", hc, "--tls-dir", ca.Dir)

	// Plain HTTP gets no answer of the API.
	if resp, err := http.Get("http://" + m.httpAddr + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP GET /healthz = %s, want it refused", resp.Status)
		}
	}
	notAfter := func() time.Time {
		t.Helper()
		resp, err := hc.Get("https://" + m.httpAddr + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].NotAfter
	}
	first := notAfter()
	if _, err := ca.IssueFiles(ca.Dir, pkitest.Identity(t, pki.RoleMember, "m1"), pki.IssueOptions{ValidFor: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(m.stderr.String(), "SIGHUP: tls files reloaded") {
		if time.Now().After(deadline) {
			t.Fatalf("no reload logged 5s after SIGHUP; stderr:\n%s", m.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := notAfter(); !got.Before(first) {
		t.Errorf("certificate after SIGHUP expires %v, want the re-issued one (before %v)", got, first)
	}
	m.stop(t)
}

// TestJoinFetchesEnvKey: a member that joins with its certificate but no
// env key fetches the cluster's from the member it joins, keeps it
// owner-only beside its certificate, and becomes a voter; the key it got
// is the first member's.
func TestJoinFetchesEnvKey(t *testing.T) {
	ca := pkitest.New(t)
	ca.Issue(t, pkitest.Identity(t, pki.RoleMember, "m1"), pki.IssueOptions{})
	keyPath := filepath.Join(ca.Dir, envseal.KeyFile)
	if err := envseal.Create(keyPath); err != nil {
		t.Fatal(err)
	}
	ops := ca.Source(t, pki.RoleOperator, "ops")
	tr := ops.Transport(pki.AllowRoles(pki.RoleMember))
	tr.DisableKeepAlives = true
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	m1 := startMember(t, "https", hc, "--tls-dir", ca.Dir)

	// m2's directory: the CA certificate and its own pair only.
	dir2 := t.TempDir()
	if _, err := ca.IssueFiles(dir2, pkitest.Identity(t, pki.RoleMember, "m2"), pki.IssueOptions{}); err != nil {
		t.Fatal(err)
	}
	stderr := &testenv.SyncBuffer{}
	cmd := exec.Command(os.Args[0], "serve", "--node-id", "m2", "--data-dir", t.TempDir(), "--raft-addr", freePort(t),
		"--http-addr", freePort(t), "--tls-dir", dir2, "--join", m1.httpAddr)
	cmd.Env = append(os.Environ(), "SCHEDULER_TEST_MAIN=1")
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := hc.Get("https://" + m1.httpAddr + "/v1/members")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), `"m2"`) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("m2 did not join in 20s; its stderr:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	want, err := envseal.Load(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	got, err := envseal.Load(filepath.Join(dir2, envseal.KeyFile))
	if err != nil {
		t.Fatalf("m2 kept no env key: %v; stderr:\n%s", err, stderr.String())
	}
	sealed, err := want.Seal(envseal.ForStep, "s1", "A", "v")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := got.Open(envseal.ForStep, "s1", "A", sealed); err != nil || v != "v" {
		t.Errorf("m2's key opens m1's value as %q, %v; want the cluster's key", v, err)
	}
	if fi, _ := os.Stat(filepath.Join(dir2, envseal.KeyFile)); fi == nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("m2's env key file mode = %v, want 0600", fi)
	}
	// An operator's certificate gets no key.
	resp, err := hc.Get("https://" + m1.httpAddr + "/v1/members/env-key")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /v1/members/env-key as an operator = %s, want 403", resp.Status)
	}
	m1.stop(t)
}

// TestServeBounds checks the defaults of the bound flags and that each
// reaches the member's configuration.
func TestServeBounds(t *testing.T) {
	parse := func(args ...string) scheduler.Config {
		t.Helper()
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		var f serveFlags
		f.register(fs)
		base := []string{"--node-id", "m1", "--data-dir", t.TempDir(), "--raft-addr", "127.0.0.1:7101", "--http-addr", "127.0.0.1:7100", "--plaintext"}
		if err := fs.Parse(append(base, args...)); err != nil {
			t.Fatal(err)
		}
		c, err := f.config()
		if err != nil {
			t.Fatalf("config(%q) = %v", args, err)
		}
		return c
	}
	d := parse()
	want := scheduler.Config{QueueTimeout: time.Hour, StartTimeout: 2 * time.Minute, CreateTimeout: 10 * time.Minute,
		StepRetention: 7 * 24 * time.Hour, HTTP: scheduler.HTTPTimeouts{Header: 10 * time.Second, Request: 30 * time.Second,
			Snapshot: 5 * time.Minute, Idle: 2 * time.Minute}}
	got := scheduler.Config{QueueTimeout: d.QueueTimeout, StartTimeout: d.StartTimeout, CreateTimeout: d.CreateTimeout,
		StepRetention: d.StepRetention, HTTP: d.HTTP}
	if !cmp.Equal(got, want, cmpopts.IgnoreUnexported(scheduler.Config{})) {
		t.Errorf("default bounds = %+v, want %+v", got, want)
	}
	c := parse("--queue-timeout", "5m", "--start-timeout", "30s", "--create-timeout", "1m", "--step-retention", "3s",
		"--http-header-timeout", "1s", "--http-timeout", "2s", "--snapshot-timeout", "3s", "--http-idle-timeout", "4s")
	got = scheduler.Config{QueueTimeout: c.QueueTimeout, StartTimeout: c.StartTimeout, CreateTimeout: c.CreateTimeout,
		StepRetention: c.StepRetention, HTTP: c.HTTP}
	want = scheduler.Config{QueueTimeout: 5 * time.Minute, StartTimeout: 30 * time.Second, CreateTimeout: time.Minute,
		StepRetention: 3 * time.Second, HTTP: scheduler.HTTPTimeouts{Header: time.Second, Request: 2 * time.Second,
			Snapshot: 3 * time.Second, Idle: 4 * time.Second}}
	if !cmp.Equal(got, want, cmpopts.IgnoreUnexported(scheduler.Config{})) {
		t.Errorf("bounds from flags = %+v, want %+v", got, want)
	}
}
