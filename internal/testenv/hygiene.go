package testenv

import (
	"bytes"
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

// NoGoroutines fails t if, after up to grace, goroutines running code
// named by patterns are still alive. A pattern is a package path
// ("github.com/rodon-compute/rodon/agentd", its sub-packages included, or
// "hashicorp/raft") or a function ("net/http.(*conn).serve",
// "scheduler.(*Raft)"). A goroutine counts if a frame of its stack from a
// file that is not a test runs such code; who created it does not count,
// nor do the tests' own goroutines (testing.tRunner). Call it after the
// component under test stopped, or use NoGoroutinesAtCleanup.
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

// Goroutines waits up to grace for the goroutines running code of
// patterns (as NoGoroutines) to end and returns the stacks of those still
// running.
func Goroutines(grace time.Duration, patterns ...string) []string {
	for deadline := time.Now().Add(grace); ; time.Sleep(10 * time.Millisecond) {
		left := goroutinesOf(patterns)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
	}
}

// goroutinesOf returns the stacks of the goroutines running code of
// patterns.
func goroutinesOf(patterns []string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "testing.tRunner") || strings.Contains(g, "testing.(*F)") {
			continue
		}
		if runsCodeOf(g, patterns) {
			out = append(out, g)
		}
	}
	return out
}

// runsCodeOf reports whether the goroutine of stack g has a frame of
// non-test code matching one of patterns.
func runsCodeOf(g string, patterns []string) bool {
	frames, _, _ := strings.Cut(g, "\ncreated by ")
	lines := strings.Split(frames, "\n")
	// lines[0] is the goroutine header; then each frame is a function
	// line and a file line.
	for i := 1; i+1 < len(lines); i += 2 {
		fn, file := lines[i], strings.TrimSpace(lines[i+1])
		file, _, _ = strings.Cut(file, ":")
		if strings.HasSuffix(file, "_test.go") || strings.Contains(fn, "testenv.") {
			continue
		}
		for _, p := range patterns {
			if names(fn, p) {
				return true
			}
		}
	}
	return false
}

// names reports whether the function line fn is code of pattern p: p
// stands in fn followed by its end, ".", "/" or "(" (so "rodon/agentd" is
// not "rodon/agentdx"), or p ends in "." or "/" itself.
func names(fn, p string) bool {
	i := strings.Index(fn, p)
	if i < 0 {
		return false
	}
	rest := fn[i+len(p):]
	return rest == "" || strings.HasSuffix(p, ".") || strings.HasSuffix(p, "/") || strings.ContainsAny(rest[:1], "./(")
}

// SyncBuffer is a bytes.Buffer safe for concurrent writes (a process's
// output, a logger) and the test's reads.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
