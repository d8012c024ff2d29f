package stream

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// env is a log store served by a Handler on an httptest server.
type env struct {
	t      *testing.T
	logs   *logstore.Store
	srv    *httptest.Server
	cancel context.CancelFunc
}

// newEnv starts a server whose requests end when env.cancel is called, as
// agentd's do on shutdown. Goroutines of the package are checked to be gone
// after the test.
func newEnv(t *testing.T, edit func(*Config)) *env {
	t.Helper()
	logger := testenv.Logger(t)
	lcfg := logstore.DefaultConfig()
	lcfg.Dir = t.TempDir()
	// A frame per write and no output cap: the tests count frames.
	lcfg.FlushDelay, lcfg.OutputBytes = 0, 1<<40
	logs, err := logstore.New(lcfg, logger)
	if err != nil {
		t.Fatalf("logstore.New() = %v", err)
	}
	cfg := DefaultConfig()
	if edit != nil {
		edit(&cfg)
	}
	h, err := New(cfg, logs, logger)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := httptest.NewUnstartedServer(h)
	srv.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	srv.Start()
	t.Cleanup(func() {
		cancel()
		srv.Close()
		checkNoGoroutines(t)
	})
	return &env{t: t, logs: logs, srv: srv, cancel: cancel}
}

func (e *env) create(id cluster.StepID) *logstore.Log {
	e.t.Helper()
	lg, err := e.logs.Create(id)
	if err != nil {
		e.t.Fatalf("Create(%s) = %v", id, err)
	}
	e.t.Cleanup(func() { lg.Close() })
	return lg
}

func write(t *testing.T, w io.Writer, s string) {
	t.Helper()
	if _, err := io.WriteString(w, s); err != nil {
		t.Fatalf("Write(%q) = %v", s, err)
	}
}

func exit(t *testing.T, lg *logstore.Log, code int) {
	t.Helper()
	if err := lg.Exit(cluster.ExitRecord{State: cluster.StateExited, ExitCode: code, TerminatedBy: cluster.ByExit}); err != nil {
		t.Fatalf("Exit() = %v", err)
	}
}

// finished writes a finished log of n output lines and returns its frames.
func (e *env) finished(id cluster.StepID, n int) []api.Frame {
	e.t.Helper()
	lg := e.create(id)
	for i := range n {
		w := lg.Stdout()
		if i%3 == 2 {
			w = lg.Stderr()
		}
		write(e.t, w, fmt.Sprintf("line %d\n", i))
	}
	exit(e.t, lg, 0)
	return e.frames(id, 0)
}

// frames reads id's log from the store.
func (e *env) frames(id cluster.StepID, from int64) []api.Frame {
	e.t.Helper()
	r, err := e.logs.Open(id, logstore.ReadOptions{From: from})
	if err != nil {
		e.t.Fatalf("Open(%s) = %v", id, err)
	}
	defer r.Close()
	var out []api.Frame
	for {
		f, err := r.Next(e.t.Context())
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, f)
	}
}

func (e *env) url(path string) string { return e.srv.URL + path }

// getNDJSON reads a whole NDJSON response.
func getNDJSON(t *testing.T, url string) []api.Frame {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s = %s %s, want 200", url, resp.Status, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("GET %s: Content-Type %q, want application/x-ndjson", url, ct)
	}
	frames, err := decodeLines(resp.Body, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return frames
}

// decodeLines reads frames from NDJSON until EOF, calling each, if set,
// after every frame.
func decodeLines(r io.Reader, each func(api.Frame)) ([]api.Frame, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	var out []api.Frame
	for sc.Scan() {
		var f api.Frame
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			return out, fmt.Errorf("decode line %d: %w", len(out)+1, err)
		}
		out = append(out, f)
		if each != nil {
			each(f)
		}
	}
	return out, sc.Err()
}

// diffFrames is cmp.Diff(want, got), with a fast path for equal frames
// (cmp compares large byte slices element by element).
func diffFrames(want, got []api.Frame) string {
	if slices.EqualFunc(want, got, api.Frame.Same) {
		return ""
	}
	return cmp.Diff(want, got, cmpopts.EquateEmpty())
}

// checkNoGoroutines fails t if a goroutine running code of this package is
// still alive after a short grace period.
func checkNoGoroutines(t testing.TB) {
	t.Helper()
	testenv.NoGoroutines(t, 5*time.Second, "rodon/agentd/stream.")
}
