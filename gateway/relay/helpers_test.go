package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/agentd/stream"
	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/pki/pkitest"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// The tests relay real streams: a node agent's stream handler
// (agentd/stream) over a log store in a temporary directory, read through
// NewAgentUpstream, sometimes behind a wrapper that breaks it.

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if stacks := leftGoroutines(5 * time.Second); stacks != "" {
			fmt.Fprintf(os.Stderr, "goroutines left running after the tests:\n%s", stacks)
			code = 1
		}
	}
	os.Exit(code)
}

func testLogger(t testing.TB) *slog.Logger {
	return testenv.Logger(t)
}

// env is a node agent serving a log store and a gateway serving the relay
// of its streams at /v1/steps/{id}/stream?from=N (&tty=1 for an
// interactive stream).
type env struct {
	t       *testing.T
	logs    *logstore.Store
	agent   *httptest.Server
	gateway *httptest.Server
	relay   *Relay
	up      *countingUpstream
	cancel  context.CancelFunc
	hooks   func(*Stream)
}

type envOptions struct {
	// edit changes the relay's configuration.
	edit func(*Config)
	// wrap wraps the agent upstream.
	wrap func(Upstream) Upstream
	// quiet routes logs nowhere (for long tests).
	quiet bool
	// plaintext serves the agent over plain HTTP and relays with
	// NewAgents(nil); otherwise the agent serves TLS as agent/n1 to
	// gateway certificates only, and the relay dials it as gateway/gw1.
	plaintext bool
	// node is the node the scheduler names for every stream; empty is
	// n1.
	node string
	// hooks, if not nil, sets the hooks of each stream served.
	hooks func(*Stream)
}

func newEnv(t *testing.T, opts envOptions) *env {
	t.Helper()
	logger := testLogger(t)
	if opts.quiet {
		logger = slog.New(slog.DiscardHandler)
	}
	lcfg := logstore.DefaultConfig()
	lcfg.Dir = t.TempDir()
	// A frame per write and no output cap: the tests count frames.
	lcfg.FlushDelay, lcfg.OutputBytes = 0, 1<<40
	logs, err := logstore.New(lcfg, logger)
	if err != nil {
		t.Fatalf("logstore.New() = %v", err)
	}
	h, err := stream.New(stream.DefaultConfig(), logs, logger)
	if err != nil {
		t.Fatalf("stream.New() = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &env{t: t, logs: logs, cancel: cancel, hooks: opts.hooks}
	agents := NewAgents(nil)
	if opts.plaintext {
		e.agent = startServer(ctx, h)
	} else {
		ca := pkitest.New(t)
		e.agent = startTLSServer(ctx, h, ca.Source(t, pki.RoleAgent, "n1"), pki.AllowRoles(pki.RoleGateway))
		agents = NewAgents(ca.Source(t, pki.RoleGateway, "gw1"))
	}
	t.Cleanup(agents.CloseIdleConnections)
	node := opts.node
	if node == "" {
		node = "n1"
	}
	resolve := func(ctx context.Context, id string) (api.StreamURL, error) {
		return api.StreamURL{URL: e.agent.URL + "/v1/steps/" + id + "/stream", Node: node}, nil
	}
	var up Upstream = NewAgentUpstream(resolve, agents)
	if opts.wrap != nil {
		up = opts.wrap(up)
	}
	e.up = &countingUpstream{Upstream: up}
	cfg := DefaultConfig()
	cfg.RetryTimeout = 2 * time.Second
	if opts.edit != nil {
		opts.edit(&cfg)
	}
	e.relay, err = New(cfg, e.up, logger)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	e.gateway = startServer(ctx, http.HandlerFunc(e.serve))
	t.Cleanup(func() {
		cancel()
		e.gateway.Close()
		e.agent.Close()
		checkNoGoroutines(t)
	})
	return e
}

// startServer starts h on a server whose requests end when ctx does, as
// the gateway's do on shutdown.
func startServer(ctx context.Context, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	srv.Start()
	return srv
}

// startTLSServer is startServer over TLS with src's certificate, letting
// in the clients authorize accepts.
func startTLSServer(ctx context.Context, h http.Handler, src *pki.Source, authorize pki.Authorizer) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	srv.TLS = src.ServerConfig(authorize)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	srv.StartTLS()
	return srv
}

func (e *env) serve(w http.ResponseWriter, r *http.Request) {
	id, ok := strings.CutPrefix(r.URL.Path, "/v1/steps/")
	id, ok2 := strings.CutSuffix(id, "/stream")
	if !ok || !ok2 {
		http.NotFound(w, r)
		return
	}
	var from uint64
	if s := r.URL.Query().Get("from"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			http.Error(w, "bad from", http.StatusBadRequest)
			return
		}
		from = n
	}
	st := Stream{StepID: id, From: from, Interactive: r.URL.Query().Get("tty") == "1"}
	if e.hooks != nil {
		e.hooks(&st)
	}
	e.relay.ServeStream(w, r, st)
}

func (e *env) wsURL(id string, query string) string {
	u := "ws" + strings.TrimPrefix(e.gateway.URL, "http") + "/v1/steps/" + id + "/stream"
	if query != "" {
		u += "?" + query
	}
	return u
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

func write(t testing.TB, w io.Writer, s string) {
	t.Helper()
	if _, err := io.WriteString(w, s); err != nil {
		t.Fatalf("Write(%q) = %v", s, err)
	}
}

func exit(t testing.TB, lg *logstore.Log, code int) {
	t.Helper()
	if err := lg.Exit(cluster.ExitRecord{State: cluster.StateExited, ExitCode: code, TerminatedBy: cluster.ByExit}); err != nil {
		t.Fatalf("Exit() = %v", err)
	}
}

// lines writes n output lines, every third to stderr and every fifth with
// an event before it, numbered from first.
func lines(t testing.TB, lg *logstore.Log, first, n int) {
	t.Helper()
	for i := first; i < first+n; i++ {
		if i%5 == 0 {
			if err := lg.Event(cluster.Event{Time: time.Now(), Kind: "note", Message: fmt.Sprintf("event %d", i)}); err != nil {
				t.Fatalf("Event() = %v", err)
			}
		}
		w := lg.Stdout()
		if i%3 == 2 {
			w = lg.Stderr()
		}
		write(t, w, fmt.Sprintf("line %d \"quoted\" \xff\n", i))
	}
}

// raw returns the frames of id's log after from as the agent stores them,
// one JSON document each.
func (e *env) raw(id cluster.StepID, from int64) [][]byte {
	e.t.Helper()
	r, err := e.logs.Open(id, logstore.ReadOptions{From: from})
	if err != nil {
		e.t.Fatalf("Open(%s) = %v", id, err)
	}
	defer r.Close()
	var out [][]byte
	for {
		b, err := r.NextJSON(e.t.Context())
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, bytes.Clone(b))
	}
}

// countingUpstream counts the upstream's opens.
type countingUpstream struct {
	Upstream
	mu    sync.Mutex
	opens []uint64
}

func (u *countingUpstream) Open(ctx context.Context, id string, from uint64) (io.ReadCloser, error) {
	u.mu.Lock()
	u.opens = append(u.opens, from)
	u.mu.Unlock()
	return u.Upstream.Open(ctx, id, from)
}

// froms returns the from of every open so far.
func (u *countingUpstream) froms() []uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]uint64(nil), u.opens...)
}

// upstreamFunc is an Upstream made of a function.
type upstreamFunc func(ctx context.Context, id string, from uint64) (io.ReadCloser, error)

func (f upstreamFunc) Open(ctx context.Context, id string, from uint64) (io.ReadCloser, error) {
	return f(ctx, id, from)
}

// dial opens a websocket stream.
func dial(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	conn, resp, err := websocket.DefaultDialer.DialContext(t.Context(), url, nil)
	if err != nil {
		t.Fatalf("dial %s: %v (response %v)", url, err, resp)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// readAll reads messages until the server closes, and returns them with
// the close error.
func readAll(t *testing.T, conn *websocket.Conn) ([][]byte, *websocket.CloseError) {
	t.Helper()
	msgs, ce, err := readN(conn, -1)
	if err != nil {
		t.Fatal(err)
	}
	if ce == nil {
		t.Fatalf("read %d messages and no close frame", len(msgs))
	}
	return msgs, ce
}

// readN reads n messages (all, for n < 0) or until the server closes.
func readN(conn *websocket.Conn, n int) ([][]byte, *websocket.CloseError, error) {
	var out [][]byte
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	for n < 0 || len(out) < n {
		kind, b, err := conn.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if !errors.As(err, &ce) {
				return out, nil, fmt.Errorf("read after %d messages: %w, want a close frame", len(out), err)
			}
			return out, ce, nil
		}
		if kind != websocket.TextMessage {
			return out, nil, fmt.Errorf("message type %d, want text", kind)
		}
		out = append(out, b)
	}
	return out, nil, nil
}

// diffRaw describes how got differs from want, or returns "".
func diffRaw(want, got [][]byte) string {
	for i := range min(len(want), len(got)) {
		if !bytes.Equal(want[i], got[i]) {
			return fmt.Sprintf("message %d = %.200s, want %.200s", i, got[i], want[i])
		}
	}
	if len(want) != len(got) {
		return fmt.Sprintf("got %d messages, want %d", len(got), len(want))
	}
	return ""
}

// checkNoGoroutines fails t if a goroutine of the relay or the agent's
// stream server is still alive after a grace period.
func checkNoGoroutines(t testing.TB) {
	t.Helper()
	if stacks := leftGoroutines(5 * time.Second); stacks != "" {
		t.Errorf("goroutines left running:\n%s", stacks)
	}
}

// leftGoroutines waits up to grace for the goroutines running code of the
// relay or the agent's stream server, other than tests, to end, and
// returns the stacks of those that did not.
func leftGoroutines(grace time.Duration) string {
	return strings.Join(testenv.Goroutines(grace, "rodon/gateway/relay.", "rodon/agentd/"), "\n\n")
}
