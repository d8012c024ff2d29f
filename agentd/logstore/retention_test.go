package logstore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

// TestSweep checks retention against a clock the test chooses.
func TestSweep(t *testing.T) {
	s := newTestStore(t, func(c *Config) { c.Retention = time.Hour })
	finished := mustCreate(t, s, "finished")
	if err := finished.Exit(exitRecord("finished", 0)); err != nil {
		t.Fatal(err)
	}
	closed := mustCreate(t, s, "closed")
	mustWrite(t, closed.Stdout(), []byte("x"))
	closed.Close()
	held := mustCreate(t, s, "held")
	mustWrite(t, held.Stdout(), []byte("x"))
	start := time.Now()

	s.sweep(start.Add(59 * time.Minute))
	for _, id := range []cluster.StepID{"finished", "closed", "held"} {
		if !exists(t, s, id) {
			t.Errorf("log %s removed before its retention", id)
		}
	}
	s.sweep(start.Add(61 * time.Minute))
	for id, want := range map[cluster.StepID]bool{"finished": false, "closed": false, "held": true} {
		if got := exists(t, s, id); got != want {
			t.Errorf("after retention: log %s exists = %v, want %v", id, got, want)
		}
	}
	// A held log's retention starts when it is finished.
	if err := held.Exit(exitRecord("held", 0)); err != nil {
		t.Fatal(err)
	}
	exited := time.Now()
	s.sweep(exited.Add(59 * time.Minute))
	if !exists(t, s, "held") {
		t.Errorf("log held removed before its retention")
	}
	s.sweep(exited.Add(61 * time.Minute))
	if exists(t, s, "held") {
		t.Errorf("log held kept after its retention")
	}
}

// exists reports whether id's log is in the store, and checks that its
// files exist exactly then.
func exists(t *testing.T, s *Store, id cluster.StepID) bool {
	t.Helper()
	r, err := s.Open(id, ReadOptions{})
	if err == nil {
		r.Close()
	} else if !errors.Is(err, ErrNotFound) {
		t.Fatalf("Open(%s) = %v", id, err)
	}
	for _, suffix := range []string{logSuffix, idxSuffix} {
		_, serr := os.Stat(filepath.Join(s.cfg.Dir, string(id)+suffix))
		if (serr == nil) != (err == nil) {
			t.Errorf("Open(%s) = %v but file %s%s: %v", id, err, id, suffix, serr)
		}
	}
	return err == nil
}

// TestRunRemovesAfterRetention runs the janitor for real: a finished log
// stays for the retention and is removed after it, and Run returns nil
// without leaving a goroutine once its context ends.
func TestRunRemovesAfterRetention(t *testing.T) {
	const retention = 500 * time.Millisecond
	s := newTestStore(t, func(c *Config) {
		c.Retention = retention
		c.SweepInterval = 10 * time.Millisecond
	})
	lg := mustCreate(t, s, "step")
	mustWrite(t, lg.Stdout(), []byte("hello\n"))
	held := mustCreate(t, s, "running")

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(ctx) }()

	if err := lg.Exit(exitRecord("step", 0)); err != nil {
		t.Fatal(err)
	}
	exited := time.Now()
	time.Sleep(retention / 5)
	if !exists(t, s, "step") && time.Since(exited) < retention {
		t.Fatalf("log removed %v after exit, before its retention of %v", time.Since(exited), retention)
	}
	for exists(t, s, "step") {
		if time.Since(exited) > retention+5*time.Second {
			t.Fatalf("log still there %v after exit, retention %v", time.Since(exited), retention)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if gone := time.Since(exited); gone < retention {
		t.Errorf("log removed %v after exit, before its retention of %v", gone, retention)
	}
	if !exists(t, s, "running") {
		t.Errorf("log of a running step removed")
	}
	mustWrite(t, held.Stdout(), []byte("still running\n"))

	cancel()
	select {
	case err := <-runErr:
		if err != nil {
			t.Errorf("Run() = %v, want nil after cancellation", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run() did not return after cancellation")
	}
	checkNoGoroutines(t)
}

// TestBudget: while the logs take more than the budget, the finished ones
// that were idle longest are removed first, and a log being written is
// never removed for it.
func TestBudget(t *testing.T) {
	s := newTestStore(t, func(c *Config) { c.Budget = 250 << 10 })
	data := make([]byte, 100<<10)
	for i := range data {
		data[i] = 'a' + byte(i%26)
	}
	live := mustCreate(t, s, "live")
	mustWrite(t, live.Stdout(), data)
	for _, id := range []cluster.StepID{"old", "mid", "new"} {
		lg := mustCreate(t, s, id)
		mustWrite(t, lg.Stdout(), data)
		if err := lg.Exit(exitRecord(id, 0)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // distinct exit times
	}
	s.sweep(time.Now())
	// 4 logs of ~100 KiB against 250 KiB: the two oldest finished go.
	for id, want := range map[cluster.StepID]bool{"live": true, "old": false, "mid": false, "new": true} {
		if got := exists(t, s, id); got != want {
			t.Errorf("over the budget: log %s exists = %v, want %v", id, got, want)
		}
	}
	if d := diskUse(t, s); d > 250<<10 {
		t.Errorf("logs take %d bytes after the sweep, want at most the budget", d)
	}
}

// TestRunSweepsWhenALogFinishes: the janitor enforces the budget as soon
// as a log finishes, not only at its interval.
func TestRunSweepsWhenALogFinishes(t *testing.T) {
	s := newTestStore(t, func(c *Config) { c.Budget = 150 << 10; c.SweepInterval = time.Hour })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for _, id := range []cluster.StepID{"first", "second"} {
		lg := mustCreate(t, s, id)
		mustWrite(t, lg.Stdout(), bytes.Repeat([]byte("x"), 100<<10))
		if err := lg.Exit(exitRecord(id, 0)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	deadline := time.Now().Add(5 * time.Second)
	for exists(t, s, "first") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if exists(t, s, "first") || !exists(t, s, "second") {
		t.Errorf("after the second log finished over the budget: first exists %v, second %v; want only the second", exists(t, s, "first"), exists(t, s, "second"))
	}
}
