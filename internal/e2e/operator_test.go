package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// schedctl runs the CLI against the fleet and returns its exit status and
// output.
func schedctl(t *testing.T, f *fleet, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin+"/schedctl", args...)
	cmd.Env = append(os.Environ(), f.schedctlEnv()...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("schedctl %q: %v", args, err)
	}
	return code, out.String(), errOut.String()
}

// TestCancelWaitOrder cancels a step that ignores SIGTERM with `schedctl
// cancel --wait`: "cancel requested" comes first, and "cancel confirmed"
// only after containerd reported the exit (after the kill grace, SIGKILL).
func TestCancelWaitOrder(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	f := &fleet{}
	startSchedulers(t, f, 1)
	startAgents(t, f, 1)
	c := newClient(t, f.urls())
	ctx := context.Background()
	if _, err := c.SubmitStep(ctx, api.StepRequest{ID: "stubborn", Image: "base", CPU: 0.2, MemoryBytes: 128 << 20,
		Args: []string{"sh", "-c", "trap '' TERM; echo up; sleep 1000"}}); err != nil {
		t.Fatal(err)
	}
	// Its output, not only its running state: "up" is echoed after the
	// trap is set, and a cancel before that ends sh by SIGTERM (143).
	// Since reports are batched, running is often recorded before sh has
	// read its script.
	waitFor(t, 60*time.Second, "the step to run and print", func() bool {
		s, err := c.Step(ctx, "stubborn")
		if err != nil || s.State != "running" {
			return false
		}
		code, out, _ := schedctl(t, f, "logs", "stubborn")
		return code == 0 && strings.Contains(out, "up")
	})
	cmd := exec.Command(bin+"/schedctl", "cancel", "stubborn", "--wait", "60s")
	cmd.Env = append(os.Environ(), f.schedctlEnv()...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	var lines []string
	var at []time.Time
	for sc.Scan() {
		lines = append(lines, sc.Text())
		at = append(at, time.Now())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("schedctl cancel --wait: %v (output %q)", err, lines)
	}
	if len(lines) != 2 || lines[0] != "cancel requested" || lines[1] != "cancel confirmed" {
		t.Fatalf("output %q, want cancel requested then cancel confirmed", lines)
	}
	s, err := c.Step(ctx, "stubborn")
	if err != nil {
		t.Fatal(err)
	}
	if s.State != "cancelled" || s.ExitCode == nil || *s.ExitCode != 137 || s.Cancel == nil || s.Cancel.ConfirmedAt.IsZero() {
		t.Fatalf("step after cancel: %+v, want cancelled with 137 and a confirmed cancel", s)
	}
	// SIGTERM was ignored, so the exit came only after the kill grace.
	if at[1].Sub(at[0]) < time.Second {
		t.Errorf("confirmed %v after requested; the step ignores SIGTERM, so the exit should wait for SIGKILL", at[1].Sub(at[0]))
	}
	if s.Cancel.ConfirmedAt.Before(s.Phases.Exited) {
		t.Errorf("cancel confirmed at %v before the exit at %v", s.Cancel.ConfirmedAt, s.Phases.Exited)
	}
	t.Logf("cancel --wait took %v", time.Since(start))
	// The agent's metrics count the cancelled step.
	resp, err := clusterHTTP(t, pki.RoleOperator, operatorName).Get("https://" + f.agentAddrs[0] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `rodon_agent_steps_total{state="cancelled",terminated_by="user"} 1`) {
		t.Errorf("agent /metrics does not count the cancelled step:\n%s", metrics)
	}
	for _, a := range f.agents {
		a.stop(30 * time.Second)
	}
}

// TestDrain drains a node with a running step: it shows draining until the
// step is gone, and receives no new steps meanwhile.
func TestDrain(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	f := &fleet{}
	startSchedulers(t, f, 1)
	startAgents(t, f, 1)
	c := newClient(t, f.urls())
	ctx := context.Background()
	if _, err := c.SubmitStep(ctx, api.StepRequest{ID: "busy", Image: "base", CPU: 0.2, MemoryBytes: 128 << 20,
		Args: []string{"sleep", "4"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the step to run", func() bool {
		s, err := c.Step(ctx, "busy")
		return err == nil && s.State == "running"
	})
	drain := exec.Command(bin+"/schedctl", "node", "drain", "a1")
	drain.Env = append(os.Environ(), f.schedctlEnv()...)
	var drainOut strings.Builder
	drain.Stdout, drain.Stderr = &drainOut, &drainOut
	if err := drain.Start(); err != nil {
		t.Fatal(err)
	}
	drained := make(chan error, 1)
	go func() { drained <- drain.Wait() }()
	waitFor(t, 10*time.Second, "the node to show draining", func() bool {
		n, err := c.Node(ctx, "a1")
		return err == nil && n.State == "draining"
	})
	if _, err := c.SubmitStep(ctx, api.StepRequest{ID: "late", Image: "base", CPU: 0.2, MemoryBytes: 128 << 20, Args: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	for done := false; !done; {
		select {
		case err := <-drained:
			if err != nil {
				t.Fatalf("schedctl node drain: %v: %s", err, drainOut.String())
			}
			done = true
		case <-time.After(300 * time.Millisecond):
			busy, _ := c.Step(ctx, "busy")
			if busy.State == "exited" && !busy.Phases.CleanedUp.IsZero() {
				continue // the drain should complete now
			}
			code, out, _ := schedctl(t, f, "nodes", "-o", "json")
			var nodes []api.Node
			if code != 0 || json.Unmarshal([]byte(out), &nodes) != nil || len(nodes) != 1 || nodes[0].State != "draining" {
				t.Fatalf("while the step runs: schedctl nodes -o json = %d, %q; want a1 draining", code, out)
			}
			if late, _ := c.Step(ctx, "late"); late.State != "queued" {
				t.Fatalf("new step %s on a draining node, want queued", late.State)
			}
		}
	}
	// The drain completed only once the step was gone and cleaned up.
	busy, _ := c.Step(ctx, "busy")
	if busy.State != "exited" || busy.Phases.CleanedUp.IsZero() {
		t.Errorf("drain completed with the step %s, cleaned up at %v; want exited and cleaned up", busy.State, busy.Phases.CleanedUp)
	}
	if !strings.Contains(drainOut.String(), "drained") {
		t.Errorf("drain output %q, want it to say the node is drained", drainOut.String())
	}
	if code, _, errOut := schedctl(t, f, "node", "undrain", "a1"); code != 0 {
		t.Fatalf("undrain: %s", errOut)
	}
	waitFor(t, 60*time.Second, "the queued step to run after undrain", func() bool {
		s, err := c.Step(ctx, "late")
		return err == nil && s.State == "exited"
	})
	for _, a := range f.agents {
		a.stop(30 * time.Second)
	}
}

// TestMembersSnapshotRemovePeer exercises the operator commands on a live
// three-member cluster.
func TestMembersSnapshotRemovePeer(t *testing.T) {
	f := &fleet{}
	startSchedulers(t, f, 3)
	c := newClient(t, f.urls())
	ctx := context.Background()
	for _, id := range []string{"snap-1", "snap-2"} {
		if _, err := c.SubmitStep(ctx, api.StepRequest{ID: id, Image: "base", CPU: 0.1, MemoryBytes: 64 << 20, Args: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := schedctl(t, f, "members", "-o", "json")
	var ms []api.Member
	if code != 0 || json.Unmarshal([]byte(out), &ms) != nil || len(ms) != 3 {
		t.Fatalf("members = %d %q %q, want 3 members", code, out, errOut)
	}
	leaders := 0
	var follower string
	for _, m := range ms {
		if m.Leader {
			leaders++
		} else if follower == "" {
			follower = m.ID
		}
	}
	if leaders != 1 {
		t.Errorf("%d leaders in %+v", leaders, ms)
	}

	snap := filepath.Join(t.TempDir(), "state.snap")
	if code, _, errOut := schedctl(t, f, "snapshot", "save", snap); code != 0 {
		t.Fatalf("snapshot save: %s", errOut)
	}
	if _, err := c.SubmitStep(ctx, api.StepRequest{ID: "after-snap", Image: "base", CPU: 0.1, MemoryBytes: 64 << 20, Args: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := schedctl(t, f, "snapshot", "restore", snap); code != 0 {
		t.Fatalf("snapshot restore: %s", errOut)
	}
	code, out, _ = schedctl(t, f, "steps", "-o", "json")
	var steps []api.Step
	if code != 0 || json.Unmarshal([]byte(out), &steps) != nil {
		t.Fatalf("steps -o json = %d %q", code, out)
	}
	var ids []string
	for _, s := range steps {
		ids = append(ids, s.ID)
	}
	if strings.Join(ids, ",") != "snap-1,snap-2" {
		t.Errorf("steps after restore = %v, want the snapshot's snap-1,snap-2", ids)
	}

	if code, _, errOut := schedctl(t, f, "raft", "remove-peer", follower); code != 0 {
		t.Fatalf("remove-peer %s: %s", follower, errOut)
	}
	waitFor(t, 10*time.Second, "two members", func() bool {
		ms, err := c.Members(ctx)
		return err == nil && len(ms) == 2
	})
	if code, _, errOut := schedctl(t, f, "raft", "remove-peer", "nosuch"); code != 1 || !strings.Contains(errOut, "nosuch") {
		t.Errorf("remove-peer of an unknown member = %d, %q; want 1 naming it", code, errOut)
	}
}
