package stream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/rodon-compute/rodon/api"
)

func TestWebsocketFinished(t *testing.T) {
	e := newEnv(t, nil)
	all := e.finished("done", 20)
	for _, tt := range []struct {
		query string
		from  int
	}{
		{"", 0},
		{"?from=7", 7},
		{"?from=7&follow=0", 7},
		{"?from=21", 21},
	} {
		got, ce := readWS(t, dial(t, e.wsURL("/v1/steps/done/stream"+tt.query)))
		if diff := diffFrames(all[tt.from:], got); diff != "" {
			t.Errorf("websocket stream%s (-want +got):\n%s", tt.query, diff)
		}
		if ce.Code != websocket.CloseNormalClosure {
			t.Errorf("websocket stream%s closed with %v, want %d", tt.query, ce, websocket.CloseNormalClosure)
		}
	}
}

// TestWebsocketResume disconnects a websocket client mid-step, reconnects
// with from=N, and checks the joined output equals what the step wrote, byte
// for byte.
func TestWebsocketResume(t *testing.T) {
	e := newEnv(t, nil)
	lg := e.create("live")
	rng := rand.New(rand.NewPCG(5, 6))
	var want bytes.Buffer
	writeChunk := func() {
		b := make([]byte, 2+rng.IntN(40<<10))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		b[len(b)-1] = '\n' // no incomplete character to hold back
		want.Write(b)
		if _, err := lg.Stdout().Write(b); err != nil {
			t.Fatal(err)
		}
	}

	conn := dial(t, e.wsURL("/v1/steps/live/stream"))
	var first []api.Frame
	writeChunk()
	for len(first) < 40 {
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, b, err := conn.ReadMessage()
		if err != nil {
			t.Fatalf("read frame %d: %v", len(first)+1, err)
		}
		var f api.Frame
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		first = append(first, f)
		writeChunk()
	}
	conn.Close() // gone mid-step, without a close frame

	for range 30 {
		writeChunk()
	}
	conn = dial(t, e.wsURL("/v1/steps/live/stream?from="+strconv.FormatInt(lastSeq(first), 10)))
	for range 30 {
		writeChunk()
	}
	exit(t, lg, 0)
	rest, ce := readWS(t, conn)
	if ce.Code != websocket.CloseNormalClosure {
		t.Errorf("stream closed with %v, want %d", ce, websocket.CloseNormalClosure)
	}
	all := append(first, rest...)
	if diff := diffFrames(e.frames("live", 0), all); diff != "" {
		t.Fatalf("joined frames differ from the log (-log +got):\n%s", diff)
	}
	var got bytes.Buffer
	for _, f := range all {
		if f.Kind == api.KindStdout {
			b, err := f.Output()
			if err != nil {
				t.Fatal(err)
			}
			got.Write(b)
		}
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Errorf("joined stdout = %d bytes, want the %d bytes written", got.Len(), want.Len())
	}
	x, err := all[len(all)-1].Exit()
	if err != nil || x.State != "exited" || x.ExitCode == nil || *x.ExitCode != 0 {
		t.Errorf("last frame = %+v, %v; want the exit frame", all[len(all)-1], err)
	}
}

func lastSeq(frames []api.Frame) int64 { return frames[len(frames)-1].Seq }

// TestWebsocketErrors checks that a bad request is refused with a close
// frame that says why.
func TestWebsocketErrors(t *testing.T) {
	e := newEnv(t, nil)
	e.finished("done", 3)
	tests := []struct {
		path   string
		code   int
		reason string
	}{
		{"/v1/steps/nope/stream", CloseNotFound, "no output of step nope"},
		{"/v1/steps/done/stream?from=x", CloseBadRequest, `from="x"`},
		{"/v1/steps/done/stream?from=-3", CloseBadRequest, `from="-3"`},
		{"/v1/steps/done/stream?from=99", CloseBadRequest, "has 4 frames"},
		{"/v1/steps/done/stream?follow=yes", CloseBadRequest, `follow="yes"`},
	}
	for _, tt := range tests {
		got, ce := readWS(t, dial(t, e.wsURL(tt.path)))
		if len(got) != 0 || ce.Code != tt.code || !strings.Contains(ce.Text, tt.reason) {
			t.Errorf("websocket %s = %d frames, close %d %q; want none, close %d with %q", tt.path, len(got), ce.Code, ce.Text, tt.code, tt.reason)
		}
	}
}

// TestWebsocketClientMessage closes a stream whose client sends a message.
func TestWebsocketClientMessage(t *testing.T) {
	e := newEnv(t, nil)
	lg := e.create("live")
	write(t, lg.Stdout(), "x\n")
	conn := dial(t, e.wsURL("/v1/steps/live/stream"))
	if err := conn.WriteMessage(websocket.TextMessage, []byte(`{"kind":"stdin","data":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	got, ce := readWS(t, conn)
	if len(got) > 1 || ce.Code != websocket.CloseUnsupportedData {
		t.Errorf("stream after a client message = %d frames, close %v; want at most 1, close %d", len(got), ce, websocket.CloseUnsupportedData)
	}
}

// TestWebsocketClientClose answers a client's close and ends the handler.
func TestWebsocketClientClose(t *testing.T) {
	e := newEnv(t, nil)
	e.create("live")
	conn := dial(t, e.wsURL("/v1/steps/live/stream"))
	msg := websocket.FormatCloseMessage(websocket.CloseGoingAway, "bye")
	if err := conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	_, ce := readWS(t, conn)
	if ce.Code != websocket.CloseGoingAway {
		t.Errorf("server answered a close with %v, want %d", ce, websocket.CloseGoingAway)
	}
}

// TestWebsocketPingPong keeps a reading client connected past the pong
// deadline, answers the client's pings, and drops a client that stops
// answering pings.
func TestWebsocketPingPong(t *testing.T) {
	const pongWait = 300 * time.Millisecond
	e := newEnv(t, func(c *Config) {
		c.PingInterval = 50 * time.Millisecond
		c.PongWait = pongWait
	})
	lg := e.create("idle")

	// A client that reads answers pings (gorilla's default ping handler).
	conn := dial(t, e.wsURL("/v1/steps/idle/stream"))
	pings := make(chan struct{}, 100)
	conn.SetPingHandler(func(data string) error {
		pings <- struct{}{}
		return conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	pongs := make(chan string, 1)
	conn.SetPongHandler(func(data string) error {
		pongs <- data
		return nil
	})
	if err := conn.WriteControl(websocket.PingMessage, []byte("are you there"), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	frames := make(chan error, 1)
	go func() {
		_, ce, err := readWSErr(conn)
		if err == nil && ce.Code != websocket.CloseNormalClosure {
			err = ce
		}
		frames <- err
	}()
	time.Sleep(3 * pongWait)
	select {
	case err := <-frames:
		t.Fatalf("reading client dropped after %v: %v", 3*pongWait, err)
	default:
	}
	if len(pings) < 3 {
		t.Errorf("client saw %d pings in %v, want several every 50ms", len(pings), 3*pongWait)
	}
	select {
	case data := <-pongs:
		if data != "are you there" {
			t.Errorf("pong = %q, want the ping's payload", data)
		}
	default:
		t.Errorf("no pong to the client's ping")
	}

	// A client that never reads never answers pings: the server gives up
	// on it after the pong wait.
	mute := dial(t, e.wsURL("/v1/steps/idle/stream"))
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		checkHandlersGone(t, 1)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("server kept a client that answers no pings")
	}
	if d := time.Since(start); d < pongWait/2 {
		t.Errorf("mute client dropped after %v, before the pong wait of %v", d, pongWait)
	}
	_, _, err := mute.ReadMessage()
	if err == nil {
		t.Errorf("mute client read a message, want the connection closed")
	}

	exit(t, lg, 0)
	if err := <-frames; err != nil {
		t.Errorf("reading client's stream ended with %v, want a normal close", err)
	}
}

// TestWebsocketShutdown closes streams with 1001 when the server stops.
func TestWebsocketShutdown(t *testing.T) {
	e := newEnv(t, nil)
	e.create("live")
	conn := dial(t, e.wsURL("/v1/steps/live/stream"))
	time.Sleep(20 * time.Millisecond)
	e.cancel()
	_, ce := readWS(t, conn)
	if ce.Code != websocket.CloseGoingAway {
		t.Errorf("stream closed with %v on shutdown, want %d", ce, websocket.CloseGoingAway)
	}
}

// TestWebsocketHandshakeError answers a broken upgrade with a JSON error.
func TestWebsocketHandshakeError(t *testing.T) {
	e := newEnv(t, nil)
	e.finished("done", 1)
	req, _ := http.NewRequest("GET", e.url("/v1/steps/done/stream"), nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-Websocket-Version", "13")
	// No Sec-WebSocket-Key.
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body api.Error
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusBadRequest || body.Detail.Code != api.CodeBadRequest {
		t.Errorf("broken handshake = %s %+v (%v), want 400 bad_request", resp.Status, body, err)
	}
}

// TestStreamRemoved ends both kinds of followers of a log removed before
// its exit frame so that neither mistakes it for a complete stream.
func TestStreamRemoved(t *testing.T) {
	e := newEnv(t, nil)
	lg := e.create("doomed")
	write(t, lg.Stdout(), "x\n")
	conn := dial(t, e.wsURL("/v1/steps/doomed/stream"))
	if _, _, err := conn.ReadMessage(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(e.url("/v1/steps/doomed/stream"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make(chan struct{})
	ndjson := make(chan error, 1)
	go func() {
		frames, err := decodeLines(resp.Body, func(api.Frame) { close(first) })
		if err == nil {
			err = fmt.Errorf("clean end after %d frames", len(frames))
		}
		ndjson <- err
	}()
	<-first
	if err := e.logs.Remove("doomed"); err != nil {
		t.Fatal(err)
	}
	got, ce := readWS(t, conn)
	if len(got) != 0 || ce.Code != websocket.CloseInternalServerErr {
		t.Errorf("websocket follower of a removed log = %d more frames, close %v; want none, close %d", len(got), ce, websocket.CloseInternalServerErr)
	}
	if err := <-ndjson; err == nil || !strings.Contains(err.Error(), "unexpected EOF") {
		t.Errorf("NDJSON follower of a removed log ended with %v, want unexpected EOF", err)
	}
}

// checkHandlersGone waits until at most n websocket handlers run.
func checkHandlersGone(t *testing.T, n int) {
	for {
		if countGoroutines("stream.(*Handler).serveWebsocket") <= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
