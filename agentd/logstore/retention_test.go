package logstore

import (
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
