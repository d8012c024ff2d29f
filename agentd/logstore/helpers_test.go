package logstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/testenv"
)

func testLogger(t testing.TB) *slog.Logger {
	return testenv.Logger(t)
}

// newTestStore returns a store in a directory of the test's own. Unless
// edit says otherwise, every write is a frame of its own (no coalescing)
// and the output cap is far beyond what any test writes, so that tests of
// framing see exactly the frames they wrote.
func newTestStore(t testing.TB, edit func(*Config)) *Store {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.FlushDelay = 0
	cfg.OutputBytes = 1 << 40
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return s
}

func mustCreate(t testing.TB, s *Store, id cluster.StepID) *Log {
	t.Helper()
	lg, err := s.Create(id)
	if err != nil {
		t.Fatalf("Create(%s) = %v", id, err)
	}
	t.Cleanup(func() { lg.Close() })
	return lg
}

func mustOpen(t testing.TB, s *Store, id cluster.StepID, opts ReadOptions) *Reader {
	t.Helper()
	r, err := s.Open(id, opts)
	if err != nil {
		t.Fatalf("Open(%s, %+v) = %v", id, opts, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func mustWrite(t testing.TB, w io.Writer, p []byte) {
	t.Helper()
	if n, err := w.Write(p); n != len(p) || err != nil {
		t.Fatalf("Write(%d bytes) = %d, %v", len(p), n, err)
	}
}

func exitRecord(id cluster.StepID, code int) cluster.ExitRecord {
	return cluster.ExitRecord{Step: id, State: cluster.StateExited, ExitCode: code, TerminatedBy: cluster.ByExit}
}

// readAll reads r until io.EOF, failing the test on any other error.
func readAll(t testing.TB, ctx context.Context, r *Reader) []api.Frame {
	t.Helper()
	var out []api.Frame
	for {
		f, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Next() after %d frames = %v", len(out), err)
		}
		out = append(out, f)
	}
}

// output concatenates the output of the frames of one kind.
func output(t testing.TB, frames []api.Frame, kind api.FrameKind) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, f := range frames {
		if f.Kind != kind {
			continue
		}
		p, err := f.Output()
		if err != nil {
			t.Fatalf("Output() of frame %d = %v", f.Seq, err)
		}
		b.Write(p)
	}
	return b.Bytes()
}

// diffFrames is cmp.Diff(want, got), with a fast path for equal frames
// (cmp is slow on thousands of frames under the race detector).
func diffFrames(want, got []api.Frame) string {
	if slices.EqualFunc(want, got, api.Frame.Same) {
		return ""
	}
	return cmp.Diff(want, got, cmpopts.EquateEmpty())
}

// checkSeqs fails t unless frames are numbered from+1, from+2, ... and
// only the last is the exit frame.
func checkSeqs(t testing.TB, frames []api.Frame, from int64) {
	t.Helper()
	for i, f := range frames {
		if want := from + int64(i) + 1; f.Seq != want {
			t.Fatalf("frame %d has seq %d, want %d", i, f.Seq, want)
		}
		if last := i == len(frames)-1; (f.Kind == api.KindExit) != last {
			t.Fatalf("frame %d (seq %d, last %v) has kind %s", i, f.Seq, last, f.Kind)
		}
	}
}

// checkNoGoroutines fails t if a goroutine running code of this package is
// still alive after a short grace period.
func checkNoGoroutines(t testing.TB) {
	t.Helper()
	testenv.NoGoroutines(t, 5*time.Second, "rodon/agentd/logstore.")
}
