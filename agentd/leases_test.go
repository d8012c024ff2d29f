package agentd

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/defaults"
	"github.com/containerd/errdefs"
)

// TestSweepLeavesLiveAgentsSnapshots is the race CI met with two agents
// sharing one containerd namespace: one agent's start-up sweep removed the
// snapshot of the other's canary between its prepare and its container,
// and that agent stayed degraded. A snapshot whose owner still runs must
// survive the sweep; one whose owner is gone must not.
func TestSweepLeavesLiveAgentsSnapshots(t *testing.T) {
	rt := newTestRuntime(t)
	ctx := rt.nsCtx(t.Context())
	sn := rt.client.SnapshotService(defaults.DefaultSnapshotter)

	// Another live agent: a process of its own, so its owner is not ours.
	other := exec.Command("sleep", "120")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })
	liveOwner, err := ownerOf(other.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	deadOwner := fmt.Sprintf("%d:0", gone.Process.Pid)
	if ownerAlive(deadOwner) {
		t.Fatalf("owner %s of an exited process counts as alive", deadOwner)
	}

	seq := time.Now().UnixNano()
	live := fmt.Sprintf("sweep-live-%d", seq)
	dead := fmt.Sprintf("sweep-dead-%d", seq)
	fresh := fmt.Sprintf("sweep-fresh-%d", seq)
	// In the race, a lease listed before it held the snapshot keeps
	// containerd's garbage collector off it; here a gc.root label does,
	// which the sweep does not read, so only the sweep can remove them.
	const gcRoot = "containerd.io/gc.root"
	for key, labels := range map[string]map[string]string{
		live:  {LabelOwner: liveOwner, gcRoot: "test"},
		dead:  {LabelOwner: deadOwner, gcRoot: "test"},
		fresh: {gcRoot: "test"}, // no owner, just made: not a leftover yet
	} {
		if _, err := sn.Prepare(ctx, key, "", snapshots.WithLabels(labels)); err != nil {
			t.Fatalf("prepare %s: %v", key, err)
		}
		t.Cleanup(func() { sn.Remove(context.WithoutCancel(ctx), key) })
	}

	if _, err := rt.SweepLeases(t.Context()); err != nil {
		t.Fatalf("SweepLeases() = %v", err)
	}
	for _, key := range []string{live, fresh} {
		if _, err := sn.Stat(ctx, key); err != nil {
			t.Errorf("snapshot %s after the sweep: %v; want it kept", key, err)
		}
	}
	if _, err := sn.Stat(ctx, dead); !errdefs.IsNotFound(err) {
		t.Errorf("snapshot %s of a dead agent after the sweep: %v; want it removed", dead, err)
	}

	// And what Create prepares carries this agent's owner, which is what
	// another agent's sweep reads.
	sb, err := rt.Create(t.Context(), newStep(t, "true"))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	info, err := sn.Stat(ctx, sb.container.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Labels[LabelOwner]; got != rt.owner {
		t.Errorf("sandbox snapshot owner label = %q, want %q", got, rt.owner)
	}
}

func TestMaybeInFlight(t *testing.T) {
	rt := &Runtime{owner: "1:1"}
	now := time.Now()
	for _, tc := range []struct {
		name string
		info snapshots.Info
		want bool
	}{
		{"ours", snapshots.Info{Labels: map[string]string{LabelOwner: "1:1"}, Created: now.Add(-time.Hour)}, true},
		{"dead owner", snapshots.Info{Labels: map[string]string{LabelOwner: "0:5"}, Created: now}, false},
		{"malformed owner", snapshots.Info{Labels: map[string]string{LabelOwner: "x"}, Created: now}, false},
		{"no owner, new", snapshots.Info{Created: now.Add(-time.Second)}, true},
		{"no owner, old", snapshots.Info{Created: now.Add(-2 * unlabelledSnapshotGrace)}, false},
	} {
		if got := rt.maybeInFlight(tc.info, now); got != tc.want {
			t.Errorf("%s: maybeInFlight = %v, want %v", tc.name, got, tc.want)
		}
	}
}
