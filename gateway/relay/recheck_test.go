package relay

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/rodon-compute/rodon/api"
)

// TestRecheck: an open stream's caller is checked every Recheck; a
// refusal closes the stream with its code and reason within one
// interval, while a check that fails for another reason (the store did
// not answer) leaves it open.
func TestRecheck(t *testing.T) {
	var revoked, broken atomic.Bool
	var checks atomic.Int32
	e := newEnv(t, envOptions{
		edit: func(c *Config) { c.Recheck = 50 * time.Millisecond },
		hooks: func(st *Stream) {
			st.Check = func(ctx context.Context) error {
				checks.Add(1)
				switch {
				case revoked.Load():
					return &Revoked{Code: api.CloseUnauthorized, Reason: "the member was changed or removed since this sign-in"}
				case broken.Load():
					return errors.New("store unavailable")
				}
				return nil
			}
		},
	})
	lg := e.create("s1")
	lines(t, lg, 0, 3)
	conn := dial(t, e.wsURL("s1", ""))
	if _, ce, err := readN(conn, 3); err != nil || ce != nil {
		t.Fatalf("first frames: %v %v", ce, err)
	}
	broken.Store(true)
	for checks.Load() < 3 {
		time.Sleep(10 * time.Millisecond)
	}
	lines(t, lg, 3, 1)
	if msgs, ce, err := readN(conn, 1); err != nil || ce != nil || len(msgs) != 1 {
		t.Fatalf("stream after failed checks: %d messages, %v, %v; want it open", len(msgs), ce, err)
	}
	revoked.Store(true)
	start := time.Now()
	_, ce := readAll(t, conn)
	checkClose(t, ce, api.CloseUnauthorized, "changed or removed")
	if d := time.Since(start); d > time.Second {
		t.Errorf("revoked stream closed after %v, want within the 50ms recheck", d)
	}
}

// TestRecheckDefault: the default re-check is 30 s, the most allowed.
func TestRecheckDefault(t *testing.T) {
	if got := DefaultConfig().Recheck; got != 30*time.Second || MaxRecheck != 30*time.Second {
		t.Errorf("default recheck %v, max %v; want 30s both", got, MaxRecheck)
	}
	cfg := DefaultConfig()
	cfg.Recheck = 31 * time.Second
	if _, err := New(cfg, upstreamFunc(nil), testLogger(t)); err == nil {
		t.Error("New with a 31s recheck succeeded, want refused")
	}
	cfg.Recheck = 0
	if _, err := New(cfg, upstreamFunc(nil), testLogger(t)); err == nil {
		t.Error("New with no recheck succeeded, want refused")
	}
}

// TestStreamHooks: Opened is called once the websocket is open, Closed
// once it is closed with what the browser sent to the terminal.
func TestStreamHooks(t *testing.T) {
	var in inputs
	var mu sync.Mutex
	var opened int
	closed := make(chan Input, 1)
	e := newEnv(t, envOptions{edit: in.edit, hooks: func(st *Stream) {
		st.Opened = func() { mu.Lock(); opened++; mu.Unlock() }
		st.Closed = func(i Input) { closed <- i }
	}})
	lg := e.create("tty")
	lines(t, lg, 0, 1)
	conn := dial(t, e.wsURL("tty", "tty=1"))
	for _, m := range []string{`{"type":"stdin","data":"ls\r"}`, `{"type":"stdin","data":"exit\r"}`, `{"type":"resize","cols":80,"rows":24}`} {
		if err := conn.WriteMessage(websocket.TextMessage, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	in.wait(t, 3)
	exit(t, lg, 0)
	readAll(t, conn)
	select {
	case got := <-closed:
		if got.Bytes != 8 || got.Messages != 2 || got.Resizes != 1 || got.Open <= 0 {
			t.Errorf("closed with %+v, want 8 bytes in 2 stdin messages, 1 resize, a duration", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Closed was not called")
	}
	mu.Lock()
	defer mu.Unlock()
	if opened != 1 {
		t.Errorf("Opened called %d times, want 1", opened)
	}
}
