package stepfollow

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/testenv"
)

const pkg = "github.com/rodon-compute/rodon/internal/stepfollow"

func exited(code int) *api.Exit {
	return &api.Exit{State: "exited", ExitCode: &code, TerminatedBy: "exit"}
}

// TestDump writes what the stream holds, stdout and stderr byte for byte,
// or the frames themselves, and returns the exit frame's data.
func TestDump(t *testing.T) {
	a := newTestAgent(t, output(exited(3), "out 1\n", "err\n", "out 2"), 0, false)
	var stdout, stderr, w warnings
	cfg := Config{Agents: NewAgents(nil, time.Second), Stdout: &stdout, Stderr: &stderr, Warn: w.warn}
	exit, err := Dump(t.Context(), cfg, "s1", a.streamURL("s1"))
	if err != nil || exit == nil || *exit.ExitCode != 3 {
		t.Fatalf("Dump = %+v, %v; want exit code 3", exit, err)
	}
	if stdout.String() != "out 1\nout 2" || stderr.String() != "err\n" || w.String() != "" {
		t.Errorf("Dump wrote stdout %q, stderr %q, warnings %q; want the output as written, no warning", stdout.String(), stderr.String(), w.String())
	}
	if got := a.requests(); !cmp.Equal(got, []int64{0}) {
		t.Errorf("Dump requested from %v, want [0]", got)
	}

	var frames testenv.SyncBuffer
	cfg.Frames = &frames
	if _, err := Dump(t.Context(), cfg, "s1", a.streamURL("s1")); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(frames.String(), "\n"); n != 4 || !strings.Contains(frames.String(), `"kind":"exit"`) {
		t.Errorf("Dump with Frames wrote %q, want the 4 frames, one a line", frames.String())
	}
}

// TestFollowResumes: connections cut in the middle of a frame are resumed
// after the last frame written, so nothing is lost or repeated.
func TestFollowResumes(t *testing.T) {
	chunks := []string{"a", "b", "c", "d", "e"}
	a := newTestAgent(t, output(exited(0), chunks...), 2, false)
	c := startCluster(t, a, cluster.StateRunning)
	var stdout, stderr, w warnings
	cfg := Config{Client: c.Client(), Agents: NewAgents(nil, time.Second), Stdout: &stdout, Stderr: &stderr, Warn: w.warn}
	sess, ctx := Start(t.Context(), cfg, api.Step{ID: "s1", State: "running", Node: "n1", Attempts: 1})
	exit, err := sess.Follow(ctx)
	sess.Close()
	testenv.NoGoroutines(t, 2*time.Second, pkg)
	if err != nil || exit == nil {
		t.Fatalf("Follow = %+v, %v; want the exit frame", exit, err)
	}
	if stdout.String() != "ace" || stderr.String() != "bd" {
		t.Errorf("Follow wrote stdout %q, stderr %q; want %q, %q", stdout.String(), stderr.String(), "ace", "bd")
	}
	if got, want := a.requests(), []int64{0, 1, 2}; !cmp.Equal(got, want) {
		t.Errorf("Follow requested from %v, want %v", got, want)
	}
}

// TestFollowStall: the step's record is terminal and its node stops
// sending before the exit frame; Follow gives up after StallGrace with
// ErrNoStream.
func TestFollowStall(t *testing.T) {
	a := newTestAgent(t, output(nil, "partial\n"), 0, true)
	c := startCluster(t, a, cluster.StateExited)
	var stdout, stderr, w warnings
	cfg := Config{Client: c.Client(), Agents: NewAgents(nil, time.Second), Stdout: &stdout, Stderr: &stderr, Warn: w.warn,
		StallGrace: 200 * time.Millisecond}
	st, err := c.Client().Step(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	sess, ctx := Start(t.Context(), cfg, st)
	start := time.Now()
	exit, err := sess.Follow(ctx)
	took := time.Since(start)
	sess.Close()
	testenv.NoGoroutines(t, 2*time.Second, pkg)
	if !errors.Is(err, ErrNoStream) || exit != nil || stdout.String() != "partial\n" {
		t.Errorf("Follow = %+v, %v, stdout %q; want ErrNoStream after the output so far", exit, err, stdout.String())
	}
	if took > 5*time.Second {
		t.Errorf("Follow gave up after %v, want about the StallGrace of 200ms", took)
	}
}

// TestHandleInterrupts: the first interrupt runs the function given, the
// second detaches the session: its context ends.
func TestHandleInterrupts(t *testing.T) {
	a := newTestAgent(t, output(nil), 0, true)
	c := startCluster(t, a, cluster.StateRunning)
	st, err := c.Client().Step(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	sess, ctx := Start(t.Context(), Config{Client: c.Client(), Warn: t.Logf}, st)
	defer sess.Close()
	intr := make(chan os.Signal)
	firsts := make(chan struct{}, 2)
	sess.HandleInterrupts(ctx, intr, func(ctx context.Context) { firsts <- struct{}{} })
	intr <- syscall.SIGINT
	select {
	case <-firsts:
	case <-time.After(5 * time.Second):
		t.Fatal("the first interrupt did not run its function")
	}
	if sess.Detached() || ctx.Err() != nil {
		t.Errorf("after one interrupt: Detached() = %v, ctx.Err() = %v; want false, nil", sess.Detached(), ctx.Err())
	}
	intr <- syscall.SIGINT
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the second interrupt did not end the session's context")
	}
	if !sess.Detached() || len(firsts) != 0 {
		t.Errorf("after two interrupts: Detached() = %v, first ran again: %v; want true, false", sess.Detached(), len(firsts) != 0)
	}
	sess.Close()
	testenv.NoGoroutines(t, 2*time.Second, pkg)
}
