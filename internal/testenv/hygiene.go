package testenv

import (
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// Logger is the logger of every test: text records at debug level, written
// through t.Log so that they show with the test that made them (and only
// when it fails or runs with -v), and dropped once the test has ended
// (goroutines of raft, say, may still log; t.Log would then panic).
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(LogWriter(t), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// LogWriter is an io.Writer that passes each write to t.Log until t ends,
// for the output of code that takes a writer rather than a logger.
func LogWriter(t testing.TB) io.Writer {
	w := &logWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

type logWriter struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// Eventually calls cond until it returns nil (at 10 ms, then at doubling
// intervals of at most 100 ms), and fails t with
// cond's last error if that has not happened within timeout. It is what
// tests use instead of sleeping: they wait exactly as long as needed.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := Wait(timeout, cond); err != nil {
		t.Fatalf("not within %v: %v", timeout, err)
	}
}

// Wait is Eventually without a test: it returns cond's last error if cond
// did not return nil within timeout.
func Wait(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(pause)
	}
}

// NoGoroutines fails t if, after up to grace, goroutines whose stacks
// mention any of patterns (package paths such as "rodon/agentd/stream." or
// functions such as "net/http.(*conn).serve") are still running. Tests'
// own goroutines (testing.tRunner) do not count.
func NoGoroutines(t testing.TB, grace time.Duration, patterns ...string) {
	t.Helper()
	if left := Goroutines(grace, patterns...); len(left) > 0 {
		t.Errorf("%d goroutines left running:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// NoGoroutinesAtCleanup is NoGoroutines run once t's other cleanups
// (registered after this call) are done.
func NoGoroutinesAtCleanup(t testing.TB, grace time.Duration, patterns ...string) {
	t.Helper()
	t.Cleanup(func() { NoGoroutines(t, grace, patterns...) })
}

// Goroutines waits up to grace for the goroutines matching patterns to end
// and returns the stacks of those still running.
func Goroutines(grace time.Duration, patterns ...string) []string {
	var left []string
	for deadline := time.Now().Add(grace); ; time.Sleep(10 * time.Millisecond) {
		left = left[:0]
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for g := range strings.SplitSeq(string(buf), "\n\n") {
			if strings.Contains(g, "testing.tRunner") || strings.Contains(g, "testing.(*F)") ||
				strings.Contains(g, "testenv.Goroutines") {
				continue
			}
			for _, p := range patterns {
				if strings.Contains(g, p) {
					left = append(left, g)
					break
				}
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
	}
}
