package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
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
		{"bootstrap and join", with("--bootstrap", "--join", "127.0.0.1:7000"), "--bootstrap and --join are exclusive"},
		{"bad join", with("--join", "x"), `--join "x"`},
		{"bad log level", with("--log-level", "loud"), "--log-level"},
		{"argument", with("extra"), `unexpected argument "extra"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("run(%q) = %d, stderr %q; want %d naming %q", tc.args, code, stderr.String(), exitUsage, tc.want)
			}
		})
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestServeStopsOnSIGTERM runs `scheduler serve --bootstrap` as a process,
// waits for it to lead, and stops it with SIGTERM: it exits 0 and its
// stderr is JSON logs.
func TestServeStopsOnSIGTERM(t *testing.T) {
	httpAddr := freePort(t)
	cmd := exec.Command(os.Args[0], "serve", "--node-id", "m1", "--data-dir", t.TempDir(),
		"--raft-addr", freePort(t), "--http-addr", httpAddr, "--bootstrap")
	cmd.Env = append(os.Environ(), "SCHEDULER_TEST_MAIN=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	deadline := time.Now().Add(10 * time.Second)
	for {
		var h struct {
			RaftState string `json:"raft_state"`
		}
		resp, err := http.Get("http://" + httpAddr + "/healthz")
		if err == nil {
			json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
			if h.RaftState == "leader" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the scheduler did not lead in 10s; stderr:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
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
