package relay

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"
)

// inputs records what reaches Config.Stdin and Config.Resize.
type inputs struct {
	mu  sync.Mutex
	got []string
	// fail makes the next call fail.
	fail bool
}

func (in *inputs) edit(c *Config) {
	c.Stdin = func(ctx context.Context, id string, data []byte) error {
		return in.add(id + " stdin " + string(data))
	}
	c.Resize = func(ctx context.Context, id string, cols, rows int) error {
		return in.add(id + " resize " + strconv.Itoa(cols) + "x" + strconv.Itoa(rows))
	}
}

func (in *inputs) add(s string) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.fail {
		in.fail = false
		return errors.New("step has no terminal any more")
	}
	in.got = append(in.got, s)
	return nil
}

func (in *inputs) wait(t *testing.T, n int) []string {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		in.mu.Lock()
		got := append([]string(nil), in.got...)
		in.mu.Unlock()
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
	}
}

// TestInput: a tty step's browser input reaches Stdin and Resize, in
// order, while the stream goes on.
func TestInput(t *testing.T) {
	var in inputs
	e := newEnv(t, envOptions{edit: in.edit})
	lg := e.create("tty")
	lines(t, lg, 0, 2)
	conn := dial(t, e.wsURL("tty", "tty=1"))
	send := func(msg string) {
		t.Helper()
		if err := conn.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatalf("send %s: %v", msg, err)
		}
	}
	send(`{"type":"stdin","data":"ls -l\r"}`)
	send(`{"type":"resize","cols":120,"rows":40}`)
	send(` { "rows" : 1 , "type" : "resize" , "cols" : 65535 } `)
	in.wait(t, 3)
	in.mu.Lock()
	in.fail = true // dropped, and the stream goes on
	in.mu.Unlock()
	send(`{"type":"stdin","data":"lost"}`)
	send(`{"type":"stdin","data":""}`)
	send(`{"data":"\u00e9\n","type":"stdin"}`)
	want := []string{"tty stdin ls -l\r", "tty resize 120x40", "tty resize 65535x1", "tty stdin ", "tty stdin é\n"}
	if got := in.wait(t, len(want)); !cmp.Equal(got, want) {
		t.Errorf("input = %q, want %q", got, want)
	}
	lines(t, lg, 2, 2)
	exit(t, lg, 0)
	got, ce := readAll(t, conn)
	if ce.Code != websocket.CloseNormalClosure {
		t.Errorf("close = %v, want %d", ce, websocket.CloseNormalClosure)
	}
	if d := diffRaw(e.raw("tty", 0), got); d != "" {
		t.Error(d)
	}
}

// TestBadInput: every message the relay does not take ends the stream
// with a close frame whose code and reason say what was wrong, and none
// reaches the step.
func TestBadInput(t *testing.T) {
	var in inputs
	e := newEnv(t, envOptions{edit: in.edit})
	lg := e.create("tty")
	lines(t, lg, 0, 2)
	for _, tt := range []struct {
		name   string
		query  string
		kind   int
		msg    string
		code   int
		reason string
	}{
		{"malformed", "tty=1", websocket.TextMessage, `{"type":"stdin","data":"x"`, websocket.ClosePolicyViolation, "malformed JSON"},
		{"not an object", "tty=1", websocket.TextMessage, `["stdin"]`, websocket.ClosePolicyViolation, "not a JSON object"},
		{"two objects", "tty=1", websocket.TextMessage, `{"type":"stdin","data":"x"}{}`, websocket.ClosePolicyViolation, "data after the object"},
		{"unknown type", "tty=1", websocket.TextMessage, `{"type":"signal","data":"KILL"}`, websocket.ClosePolicyViolation, `unknown type "signal"`},
		{"spec kind", "tty=1", websocket.TextMessage, `{"kind":"stdin","data":"x"}`, websocket.ClosePolicyViolation, `unknown field "kind"`},
		{"unknown field", "tty=1", websocket.TextMessage, `{"type":"stdin","data":"x","echo":true}`, websocket.ClosePolicyViolation, `unknown field "echo"`},
		{"key case", "tty=1", websocket.TextMessage, `{"Type":"stdin","data":"x"}`, websocket.ClosePolicyViolation, `unknown field "Type"`},
		{"duplicate", "tty=1", websocket.TextMessage, `{"type":"stdin","data":"x","data":"y"}`, websocket.ClosePolicyViolation, `duplicate field "data"`},
		{"bad size", "tty=1", websocket.TextMessage, `{"type":"resize","cols":0,"rows":10}`, websocket.ClosePolicyViolation, `"cols" must be an integer from 1`},
		{"float size", "tty=1", websocket.TextMessage, `{"type":"resize","cols":80.5,"rows":10}`, websocket.ClosePolicyViolation, `"cols" must be an integer`},
		{"no data", "tty=1", websocket.TextMessage, `{"type":"stdin"}`, websocket.ClosePolicyViolation, `without "data"`},
		{"oversize", "tty=1", websocket.TextMessage, `{"type":"stdin","data":"` + strings.Repeat("a", 64<<10) + `"}`, websocket.ClosePolicyViolation, "message too big: more than 65536 bytes"},
		{"binary", "tty=1", websocket.BinaryMessage, `{"type":"stdin","data":"x"}`, websocket.CloseUnsupportedData, "binary messages are not accepted"},
		{"not interactive", "", websocket.TextMessage, `{"type":"stdin","data":"x"}`, websocket.ClosePolicyViolation, "this stream takes no input"},
		{"not utf-8", "tty=1", websocket.TextMessage, "{\"type\":\"stdin\",\"data\":\"\xff\"}", websocket.ClosePolicyViolation, "not UTF-8"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn := dial(t, e.wsURL("tty", tt.query))
			if err := conn.WriteMessage(tt.kind, []byte(tt.msg)); err != nil {
				t.Fatal(err)
			}
			got, ce := readAll(t, conn)
			checkClose(t, ce, tt.code, tt.reason)
			if len(got) > 3 {
				t.Errorf("got %d messages, want at most the 3 frames so far", len(got))
			}
		})
	}
	if got := in.wait(t, 0); len(got) != 0 {
		t.Errorf("input %q reached the step, want none", got)
	}
}
