package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// agentdBin is the agentd binary built for these tests.
var agentdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "agentd-test")
	if err != nil {
		panic(err)
	}
	agentdBin = filepath.Join(dir, "agentd")
	if out, err := exec.Command("go", "build", "-o", agentdBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build agentd: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func runAgentd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	// These tests are not about networking: sandboxes get loopback only,
	// and nothing on the machine's own network changes.
	if len(args) > 0 && args[0] != "-h" {
		args = append([]string{args[0], "--network", "none"}, args[1:]...)
	}
	cmd := exec.Command(agentdBin, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), o.String(), e.String()
	} else if err != nil {
		t.Fatalf("agentd %q: %v", args, err)
	}
	return 0, o.String(), e.String()
}

func TestUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "usage"},
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"run"}, "no command given"},
		{[]string{"run", "--memory", "lots", "--", "true"}, "--memory"},
		{[]string{"run", "--cpu", "-1", "--", "true"}, "cpu limit"},
		{[]string{"run", "--timeout", "soon", "--", "true"}, "-timeout"},
		{[]string{"run", "--env", "NOEQUALS", "--", "true"}, "-env"},
		{[]string{"run", "--workspace", "/no/such/dir", "--", "true"}, "--workspace"},
		{[]string{"run", "--id", "Bad ID", "--", "true"}, "step id"},
		{[]string{"run", "--log-level", "loud", "--", "true"}, "--log-level"},
		{[]string{"probe", "-o", "yaml"}, "-o"},
	} {
		code, _, stderr := runAgentd(t, tt.args...)
		if code != exitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("agentd %q = exit %d, stderr %q; want exit 2 naming %q", tt.args, code, stderr, tt.want)
		}
	}
}

// TestExitCodesRepeated is the acceptance check: fast commands
// report their exit code 20 times out of 20.
func TestExitCodesRepeated(t *testing.T) {
	testenv.RequireContainerd(t)
	data := t.TempDir()
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	for _, tt := range []struct {
		args []string
		want int
	}{
		{[]string{"sh", "-c", "exit 7"}, 7},
		{[]string{"true"}, 0},
		{[]string{"sh", "-c", "exit 200"}, 200},
	} {
		for i := 0; i < 20; i++ {
			code, _, stderr := runAgentd(t, append([]string{"run", "--data-dir", data, "--"}, tt.args...)...)
			if code != tt.want {
				t.Errorf("run %d of agentd run -- %q = exit %d, want %d (stderr %q)", i, tt.args, code, tt.want, stderr)
			}
		}
	}
}

func TestRunGVisorBanner(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	code, stdout, stderr := runAgentd(t, "run", "--data-dir", t.TempDir(), "--", "sh", "-c", "uname -r; dmesg | head -n 2")
	if code != 0 || !strings.Contains(stdout, "gVisor") {
		t.Errorf("agentd run uname/dmesg = exit %d, stdout %q, stderr %q; want gVisor's banner", code, stdout, stderr)
	}
}

func TestRunNotFound(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	code, _, stderr := runAgentd(t, "run", "--data-dir", t.TempDir(), "--", "nosuchcommand")
	if code != exitNotFound || !strings.Contains(stderr, "nosuchcommand") {
		t.Errorf("agentd run -- nosuchcommand = exit %d, stderr %q; want 127 naming the command", code, stderr)
	}
}

func TestRunTimeoutRecord(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	rec := filepath.Join(t.TempDir(), "rec.json")
	start := time.Now()
	code, _, stderr := runAgentd(t, "run", "--data-dir", t.TempDir(), "--timeout", "2s", "--record", rec, "--", "sleep", "100")
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
	var r cluster.ExitRecord
	b, err := os.ReadFile(rec)
	if err != nil || json.Unmarshal(b, &r) != nil {
		t.Fatalf("read record: %v %s", err, b)
	}
	if r.TerminatedBy != cluster.ByTimeout || code != r.ExitCode || code < 128 || !strings.Contains(stderr, "timeout") {
		t.Errorf("exit %d, record %+v, stderr %q; want a timeout with 128+signal", code, r, stderr)
	}
}

// TestAdoptAfterAgentKill kills agentd with SIGKILL during a running step;
// the next agentd finds the step's sandbox again and cleans it up.
func TestAdoptAfterAgentKill(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	data := t.TempDir()
	cmd := exec.Command(agentdBin, "run", "--network", "none", "--data-dir", data, "--id", "orphan-1", "--", "sh", "-c", "echo started; sleep 100")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if n, err := out.Read(buf); err != nil || string(buf[:n]) != "started\n" {
		t.Fatalf("step did not start: %q %v", buf[:n], err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	// The sandbox outlives its agent.
	if left := testenv.Leftovers(t.Context(), "rodon", "/rodon"); !strings.Contains(strings.Join(left, "\n"), "orphan-1") {
		t.Fatalf("sandbox of the killed agent not found in containerd: %q", left)
	}
	code, _, stderr := runAgentd(t, "run", "--data-dir", data, "--log-level", "info", "--", "true")
	if code != 0 || !strings.Contains(stderr, "found sandbox of a dead agent") || !strings.Contains(stderr, "orphan-1") {
		t.Errorf("restarted agentd = exit %d, stderr %q; want it to find and destroy orphan-1", code, stderr)
	}
	if ents, _ := os.ReadDir(filepath.Join(data, "workspaces")); len(ents) != 0 {
		t.Errorf("workspace copies left: %v", ents)
	}
}
