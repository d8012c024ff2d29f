package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// TestRelayLive relays a live step: every frame reaches the browser
// byte for byte as the agent stored it, and the stream ends with the exit
// frame and a normal close.
func TestRelayLive(t *testing.T) {
	e := newEnv(t, envOptions{})
	lg := e.create("live")
	lines(t, lg, 0, 10)
	conn := dial(t, e.wsURL("live", ""))
	got, _, err := readN(conn, 12) // 10 lines and 2 events
	if err != nil {
		t.Fatal(err)
	}
	// The rest arrives while the browser is connected.
	lines(t, lg, 10, 30)
	exit(t, lg, 3)
	rest, ce := readAll(t, conn)
	got = append(got, rest...)
	if ce.Code != websocket.CloseNormalClosure {
		t.Errorf("close = %v, want %d", ce, websocket.CloseNormalClosure)
	}
	want := e.raw("live", 0)
	if d := diffRaw(want, got); d != "" {
		t.Fatal(d)
	}
	var last api.Frame
	if err := json.Unmarshal(got[len(got)-1], &last); err != nil || last.Kind != api.KindExit {
		t.Errorf("last message = %s (%v), want the exit frame", got[len(got)-1], err)
	}
	if froms := e.up.froms(); !cmp.Equal(froms, []uint64{0}) {
		t.Errorf("upstream opened from %v, want once from 0", froms)
	}
}

// TestRelayFinished relays a step that has ended, from several points.
func TestRelayFinished(t *testing.T) {
	e := newEnv(t, envOptions{})
	lg := e.create("done")
	lines(t, lg, 0, 50)
	exit(t, lg, 0)
	all := e.raw("done", 0)
	for _, from := range []int{0, 1, 30, len(all) - 1} {
		conn := dial(t, e.wsURL("done", fmt.Sprintf("from=%d", from)))
		got, ce := readAll(t, conn)
		if ce.Code != websocket.CloseNormalClosure {
			t.Errorf("from=%d: close = %v, want %d", from, ce, websocket.CloseNormalClosure)
		}
		if d := diffRaw(all[from:], got); d != "" {
			t.Errorf("from=%d: %s", from, d)
		}
	}
}

// TestReconnect: a browser that goes away in the middle of a step and
// comes back with from=<last seq it has> ends up with the whole stream,
// nothing lost or repeated.
func TestReconnect(t *testing.T) {
	for _, how := range []string{"drop", "close"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			lg := e.create("again")
			lines(t, lg, 0, 20)
			conn := dial(t, e.wsURL("again", ""))
			got, _, err := readN(conn, 9)
			if err != nil {
				t.Fatal(err)
			}
			switch how {
			case "drop":
				conn.NetConn().Close()
			case "close":
				conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, "tab closed"), time.Now().Add(time.Second))
				// The relay answers the close with the browser's code.
				_, _, err := readN(conn, -1)
				var ce *websocket.CloseError
				if !errors.As(err, &ce) && err != nil {
					t.Logf("read after close: %v", err)
				}
				conn.Close()
			}
			lines(t, lg, 20, 20)
			var f api.Frame
			if err := json.Unmarshal(got[len(got)-1], &f); err != nil {
				t.Fatal(err)
			}
			exit(t, lg, 0)
			conn = dial(t, e.wsURL("again", fmt.Sprintf("from=%d", f.Seq)))
			rest, ce := readAll(t, conn)
			if ce.Code != websocket.CloseNormalClosure {
				t.Errorf("close = %v, want %d", ce, websocket.CloseNormalClosure)
			}
			if d := diffRaw(e.raw("again", 0), append(got, rest...)); d != "" {
				t.Fatal(d)
			}
		})
	}
}

// breakingUpstream cuts each of the first n streams it opens after a few
// bytes, mostly in the middle of a frame, as a failing connection does.
type breakingUpstream struct {
	Upstream
	mu    sync.Mutex
	n     int
	opens int
}

var errCut = errors.New("connection reset by test")

func (u *breakingUpstream) Open(ctx context.Context, id string, from uint64) (io.ReadCloser, error) {
	rc, err := u.Upstream.Open(ctx, id, from)
	if err != nil {
		return nil, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.opens++
	if u.opens > u.n {
		return rc, nil
	}
	return &cutReader{rc: rc, left: 50 + int64(u.opens*397)%400}, nil
}

type cutReader struct {
	rc   io.ReadCloser
	left int64
}

func (r *cutReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, errCut
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.rc.Read(p)
	r.left -= int64(n)
	return n, err
}

func (r *cutReader) Close() error { return r.rc.Close() }

// TestUpstreamBreaks: when the agent's stream breaks before the exit frame,
// the relay opens it again after the last frame it sent, and the browser
// sees one seamless stream.
func TestUpstreamBreaks(t *testing.T) {
	const breaks = 20
	e := newEnv(t, envOptions{wrap: func(up Upstream) Upstream { return &breakingUpstream{Upstream: up, n: breaks} }})
	lg := e.create("flaky")
	lines(t, lg, 0, 300)
	exit(t, lg, 0)
	conn := dial(t, e.wsURL("flaky", ""))
	got, ce := readAll(t, conn)
	if ce.Code != websocket.CloseNormalClosure {
		t.Errorf("close = %v, want %d", ce, websocket.CloseNormalClosure)
	}
	if d := diffRaw(e.raw("flaky", 0), got); d != "" {
		t.Fatal(d)
	}
	froms := e.up.froms()
	if len(froms) != breaks+1 {
		t.Errorf("upstream opened %d times (from %v), want %d", len(froms), froms, breaks+1)
	}
	for i := 1; i < len(froms); i++ {
		if froms[i] < froms[i-1] {
			t.Errorf("upstream opened from %v: went back", froms)
		}
	}
}

// TestAgentConnectionLost cuts the real connections to the agent in the
// middle of a live step.
func TestAgentConnectionLost(t *testing.T) {
	e := newEnv(t, envOptions{})
	lg := e.create("cut")
	lines(t, lg, 0, 10)
	conn := dial(t, e.wsURL("cut", ""))
	got, _, err := readN(conn, 12)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		e.agent.CloseClientConnections()
		lines(t, lg, 10+10*i, 10)
		more, _, err := readN(conn, 12)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, more...)
	}
	exit(t, lg, 0)
	rest, ce := readAll(t, conn)
	if ce.Code != websocket.CloseNormalClosure {
		t.Errorf("close = %v, want %d", ce, websocket.CloseNormalClosure)
	}
	if d := diffRaw(e.raw("cut", 0), append(got, rest...)); d != "" {
		t.Fatal(d)
	}
	if n := len(e.up.froms()); n < 2 {
		t.Errorf("upstream opened %d times, want a resume", n)
	}
}

// TestStreamRefused covers the streams that cannot be relayed: each ends
// with a close frame that says why, never with a normal close.
func TestStreamRefused(t *testing.T) {
	t.Run("no such step", func(t *testing.T) {
		e := newEnv(t, envOptions{})
		_, ce := readAll(t, dial(t, e.wsURL("nothing", "")))
		checkClose(t, ce, api.CloseNotFound, "no output of this step")
	})
	t.Run("from past the end", func(t *testing.T) {
		e := newEnv(t, envOptions{})
		lg := e.create("short")
		lines(t, lg, 0, 3)
		_, ce := readAll(t, dial(t, e.wsURL("short", "from=99")))
		checkClose(t, ce, api.CloseBadRequest, "from=99")
	})
	t.Run("log removed", func(t *testing.T) {
		e := newEnv(t, envOptions{})
		lg := e.create("gone")
		lines(t, lg, 0, 3)
		conn := dial(t, e.wsURL("gone", ""))
		if _, _, err := readN(conn, 4); err != nil { // 3 lines and an event
			t.Fatal(err)
		}
		if err := e.logs.Remove("gone"); err != nil {
			t.Fatal(err)
		}
		_, ce := readAll(t, conn)
		checkClose(t, ce, websocket.CloseInternalServerErr, "cannot be resumed after frame 4")
	})
	t.Run("node unreachable", func(t *testing.T) {
		e := newEnv(t, envOptions{
			edit: func(c *Config) { c.RetryTimeout = 300 * time.Millisecond },
			wrap: func(Upstream) Upstream {
				return upstreamFunc(func(ctx context.Context, id string, from uint64) (io.ReadCloser, error) {
					return nil, errors.New("dial tcp: connection refused")
				})
			},
		})
		start := time.Now()
		_, ce := readAll(t, dial(t, e.wsURL("lost", "from=4")))
		checkClose(t, ce, websocket.CloseInternalServerErr, "lost the step's stream after frame 4; reconnect with from=4")
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("gave up after %v, want about 300ms", d)
		}
		if n := len(e.up.froms()); n < 3 {
			t.Errorf("upstream tried %d times, want retries", n)
		}
	})
	t.Run("frame too long", func(t *testing.T) {
		big := `{"seq":1,"kind":"stdout","data":"` + strings.Repeat("x", 200<<10) + `","time":"2026-01-02T03:04:05Z"}` + "\n"
		e := newEnv(t, envOptions{
			edit: func(c *Config) { c.MaxFrame = 100 << 10 },
			wrap: func(Upstream) Upstream {
				return upstreamFunc(func(ctx context.Context, id string, from uint64) (io.ReadCloser, error) {
					return io.NopCloser(strings.NewReader(big)), nil
				})
			},
		})
		got, ce := readAll(t, dial(t, e.wsURL("big", "")))
		checkClose(t, ce, websocket.CloseInternalServerErr, "frame 1 is over 102400 bytes")
		if len(got) != 0 {
			t.Errorf("got %d messages, want none", len(got))
		}
	})
	t.Run("gap", func(t *testing.T) {
		frames := `{"seq":1,"kind":"stdout","data":"a","time":"2026-01-02T03:04:05Z"}` + "\n" +
			`{"seq":3,"kind":"stdout","data":"c","time":"2026-01-02T03:04:05Z"}` + "\n"
		e := newEnv(t, envOptions{
			wrap: func(Upstream) Upstream {
				return upstreamFunc(func(ctx context.Context, id string, from uint64) (io.ReadCloser, error) {
					return io.NopCloser(strings.NewReader(frames)), nil
				})
			},
		})
		got, ce := readAll(t, dial(t, e.wsURL("gap", "")))
		checkClose(t, ce, websocket.CloseInternalServerErr, "bad frame after frame 1")
		if len(got) != 1 {
			t.Errorf("got %d messages, want 1", len(got))
		}
	})
}

func checkClose(t *testing.T, ce *websocket.CloseError, code int, reason string) {
	t.Helper()
	if ce.Code != code || !strings.Contains(ce.Text, reason) {
		t.Errorf("close = %d %q, want %d with %q", ce.Code, ce.Text, code, reason)
	}
	if len(ce.Text) > maxCloseReason {
		t.Errorf("close reason %q is %d bytes, over %d", ce.Text, len(ce.Text), maxCloseReason)
	}
}

// TestShutdown: the end of the server's context ends a stream with 1001.
func TestShutdown(t *testing.T) {
	e := newEnv(t, envOptions{})
	lg := e.create("long")
	lines(t, lg, 0, 1)
	conn := dial(t, e.wsURL("long", ""))
	if _, _, err := readN(conn, 1); err != nil {
		t.Fatal(err)
	}
	e.cancel()
	_, ce := readAll(t, conn)
	checkClose(t, ce, websocket.CloseGoingAway, "gateway stopping")
}

// TestPing: a silent step's browser is pinged; a browser that answers
// stays, one that does not is given up after PongWait.
func TestPing(t *testing.T) {
	m := NewMetrics()
	e := newEnv(t, envOptions{edit: func(c *Config) {
		c.PingInterval = 20 * time.Millisecond
		c.PongWait = 150 * time.Millisecond
		c.Metrics = m
	}})
	lg := e.create("quiet")
	conn := dial(t, e.wsURL("quiet", ""))
	var pings int
	conn.SetPingHandler(func(payload string) error {
		pings++
		return conn.WriteControl(websocket.PongMessage, []byte(payload), time.Now().Add(time.Second))
	})
	exited := time.AfterFunc(500*time.Millisecond, func() {
		if err := lg.Exit(cluster.ExitRecord{State: cluster.StateExited, TerminatedBy: cluster.ByExit}); err != nil {
			t.Errorf("Exit() = %v", err)
		}
	})
	defer exited.Stop()
	got, ce := readAll(t, conn)
	if ce.Code != websocket.CloseNormalClosure || len(got) != 1 {
		t.Errorf("got %d messages and close %v, want the exit frame and %d", len(got), ce, websocket.CloseNormalClosure)
	}
	if pings < 5 {
		t.Errorf("got %d pings in 500ms, want about 25", pings)
	}

	// A browser that reads nothing answers no ping.
	e.create("deaf")
	dial(t, e.wsURL("deaf", ""))
	for deadline := time.Now().Add(3 * time.Second); metricValue(t, m, "rodon_gateway_streams") != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%v streams still served, want 0 after the pong wait", metricValue(t, m, "rodon_gateway_streams"))
		}
	}
}

// metricValue returns the value of the counter or gauge name of m.
func metricValue(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			return mt.GetGauge().GetValue() + mt.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestOrigin: a refused Origin is answered 403 before any upgrade, and the
// step's stream is never opened.
func TestOrigin(t *testing.T) {
	const site = "https://rodon.example"
	e := newEnv(t, envOptions{edit: func(c *Config) {
		c.CheckOrigin = func(r *http.Request) bool { return r.Header.Get("Origin") == site }
	}})
	lg := e.create("o")
	exit(t, lg, 0)
	h := http.Header{"Origin": {"https://evil.example"}}
	_, resp, err := websocket.DefaultDialer.DialContext(t.Context(), e.wsURL("o", ""), h)
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("dial with a bad origin = %v, %v; want 403", resp, err)
	}
	var doc api.Error
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || doc.Detail.Code != codeForbidden {
		t.Errorf("403 body = %+v (%v), want code %s", doc, err, codeForbidden)
	}
	resp.Body.Close()
	if n := len(e.up.froms()); n != 0 {
		t.Errorf("upstream opened %d times for a refused origin, want 0", n)
	}

	h.Set("Origin", site)
	conn, _, err := websocket.DefaultDialer.DialContext(t.Context(), e.wsURL("o", ""), h)
	if err != nil {
		t.Fatalf("dial with the site's origin = %v", err)
	}
	defer conn.Close()
	if got, ce := readAll(t, conn); len(got) != 1 || ce.Code != websocket.CloseNormalClosure {
		t.Errorf("got %d messages and %v, want the exit frame and a normal close", len(got), ce)
	}
}

func TestNew(t *testing.T) {
	up := upstreamFunc(func(context.Context, string, uint64) (io.ReadCloser, error) { return nil, nil })
	for _, tt := range []struct {
		name string
		edit func(*Config)
	}{
		{"pong wait", func(c *Config) { c.PongWait = c.PingInterval }},
		{"write wait", func(c *Config) { c.WriteWait = 0 }},
		{"max message", func(c *Config) { c.MaxMessage = 0 }},
		{"retry timeout", func(c *Config) { c.RetryTimeout = -1 }},
	} {
		cfg := DefaultConfig()
		tt.edit(&cfg)
		if _, err := New(cfg, up, testLogger(t)); err == nil {
			t.Errorf("New(%s) = nil error, want one", tt.name)
		}
	}
	if _, err := New(DefaultConfig(), nil, testLogger(t)); err == nil {
		t.Errorf("New(no upstream) = nil error, want one")
	}
}
