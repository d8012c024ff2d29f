package scheduler

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	return testenv.FreeAddr(t)
}

// startMember runs a single-member scheduler on TCP and BoltDB in dir, and
// returns it once it leads, with a function that stops it.
func startMember(t *testing.T, dir, addr string) (*Raft, *FSM, func()) {
	t.Helper()
	cfg := testConfig("solo")
	cfg.DataDir, cfg.Addr, cfg.Bootstrap = dir, addr, true
	// Snapshot early and keep one entry, so a restart restores a snapshot.
	cfg.SnapshotInterval, cfg.SnapshotThreshold, cfg.TrailingLogs = 20*time.Millisecond, 2, 1
	fsm := NewFSM(testLogger(t))
	r, err := NewRaft(cfg, fsm, testLogger(t), RaftDeps{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for !r.IsLeader() {
		if time.Now().After(deadline) {
			stop()
			t.Fatal("single member did not become leader in 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return r, fsm, stop
}

func TestRaftPersistsAcrossRestart(t *testing.T) {
	checkNoRaftGoroutines(t)
	dir, addr := t.TempDir(), freeAddr(t)
	r, _, stop := startMember(t, dir, addr)
	for _, c := range running("s1", false) {
		if _, err := r.Apply(t.Context(), c); err != nil {
			t.Fatalf("Apply(%s) = %v", c.CommandType(), err)
		}
	}
	if err := r.Barrier(t.Context()); err != nil {
		t.Fatalf("Barrier() = %v", err)
	}
	waitSnapshot(t, dir)
	stop()
	if _, err := r.Apply(t.Context(), submit("s2", false)); !errors.Is(err, ErrStopped) {
		t.Errorf("Apply() after Run returned = %v, want %v", err, ErrStopped)
	}

	// A restart replays the log into a fresh FSM; bootstrapping again is a
	// no-op.
	r, fsm, stop := startMember(t, dir, addr)
	defer stop()
	if err := r.Barrier(t.Context()); err != nil {
		t.Fatalf("Barrier() = %v", err)
	}
	if s, ok := fsm.State().Step("s1"); !ok || s.State != cluster.StateRunning {
		t.Errorf("after restart Step(s1) = %+v, %v; want running", s, ok)
	}
	if _, err := r.Apply(t.Context(), submit("s2", false)); err != nil {
		t.Errorf("Apply() after restart = %v", err)
	}
}

// waitSnapshot waits until the file snapshot store in dir holds a snapshot.
func waitSnapshot(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "state.bin"))
		if len(m) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no snapshot taken in 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRaftApplyWaitsForRun(t *testing.T) {
	r, err := NewRaft(testConfig("solo"), NewFSM(testLogger(t)), testLogger(t), RaftDeps{})
	if err == nil {
		t.Fatalf("NewRaft() without a data dir or address = %v, want an error", r)
	}
	cfg := testConfig("solo")
	cfg.DataDir, cfg.Addr = t.TempDir(), freeAddr(t)
	r, err = NewRaft(cfg, NewFSM(testLogger(t)), testLogger(t), RaftDeps{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := r.Apply(ctx, submit("s1", false)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Apply() before Run = %v, want %v", err, context.DeadlineExceeded)
	}
}
