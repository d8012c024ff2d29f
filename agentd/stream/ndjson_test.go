package stream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
)

func TestNDJSONFinished(t *testing.T) {
	e := newEnv(t, nil)
	all := e.finished("done", 20)
	for _, tt := range []struct {
		query string
		from  int
	}{
		{"", 0},
		{"?from=0", 0},
		{"?from=5", 5},
		{"?from=5&follow=0", 5},
		{"?follow=false", 0},
		{"?from=21", 21},
	} {
		got := getNDJSON(t, e.url("/v1/steps/done/stream"+tt.query))
		if diff := diffFrames(all[tt.from:], got); diff != "" {
			t.Errorf("GET stream%s (-want +got):\n%s", tt.query, diff)
		}
	}
	// The Accept header the CLI sends changes nothing.
	req, _ := http.NewRequest("GET", e.url("/v1/steps/done/stream?from=19"), nil)
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeLines(resp.Body, nil)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if diff := diffFrames(all[19:], got); diff != "" {
		t.Errorf("GET stream?from=19 with Accept (-want +got):\n%s", diff)
	}
}

// TestNDJSONFollow reads a live stream: each frame arrives while the step is
// still writing, the response ends after the exit frame, and a client that
// reconnects with from=N continues byte for byte.
func TestNDJSONFollow(t *testing.T) {
	e := newEnv(t, nil)
	lg := e.create("live")
	resp, err := http.Get(e.url("/v1/steps/live/stream"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET = %s, want 200", resp.Status)
	}

	// Write a line, and the next only once the client has seen it: the
	// stream must deliver each frame without waiting for more.
	rng := rand.New(rand.NewPCG(3, 4))
	var want bytes.Buffer
	chunk := func() []byte {
		b := make([]byte, 1+rng.IntN(20<<10))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		want.Write(b)
		return b
	}
	if _, err := lg.Stdout().Write(chunk()); err != nil {
		t.Fatal(err)
	}
	var first []api.Frame
	sc := json.NewDecoder(resp.Body)
	for len(first) < 50 {
		var f api.Frame
		if err := sc.Decode(&f); err != nil {
			t.Fatalf("decode frame %d: %v", len(first)+1, err)
		}
		first = append(first, f)
		if _, err := lg.Stdout().Write(chunk()); err != nil {
			t.Fatal(err)
		}
	}
	resp.Body.Close() // disconnect mid-step

	done := make(chan struct{})
	var rest []api.Frame
	go func() {
		defer close(done)
		resp, err := http.Get(e.url("/v1/steps/live/stream?from=" + itoa(first[len(first)-1].Seq)))
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		rest, err = decodeLines(resp.Body, nil)
		if err != nil {
			t.Error(err)
		}
	}()
	for range 50 {
		if _, err := lg.Stderr().Write([]byte("err\n")); err != nil {
			t.Fatal(err)
		}
		if _, err := lg.Stdout().Write(chunk()); err != nil {
			t.Fatal(err)
		}
	}
	exit(t, lg, 0)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("follow response did not end after the exit frame")
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
}

// TestNDJSONNoFollowLive ends a follow=0 request on a running step at the
// frames that exist.
func TestNDJSONNoFollowLive(t *testing.T) {
	e := newEnv(t, nil)
	lg := e.create("running")
	write(t, lg.Stdout(), "a\n")
	write(t, lg.Stdout(), "b\n")
	got := getNDJSON(t, e.url("/v1/steps/running/stream?follow=0"))
	if len(got) != 2 {
		t.Errorf("follow=0 on a running step read %d frames, want 2", len(got))
	}
}

func TestNDJSONErrors(t *testing.T) {
	e := newEnv(t, nil)
	e.finished("done", 3)
	tests := []struct {
		method, path string
		status       int
		code, msg    string
	}{
		{"GET", "/v1/steps/nope/stream", 404, api.CodeNotFound, "no output of step nope"},
		{"GET", "/v1/steps/done/stream?from=abc", 400, api.CodeBadRequest, `from="abc"`},
		{"GET", "/v1/steps/done/stream?from=-1", 400, api.CodeBadRequest, `from="-1"`},
		{"GET", "/v1/steps/done/stream?from=1.5", 400, api.CodeBadRequest, `from="1.5"`},
		{"GET", "/v1/steps/done/stream?from=5", 400, api.CodeBadRequest, "has 4 frames"},
		{"GET", "/v1/steps/done/stream?follow=maybe", 400, api.CodeBadRequest, `follow="maybe"`},
		{"POST", "/v1/steps/done/stream", 405, api.CodeMethodNotAllowed, "POST"},
		{"GET", "/v1/nodes", 404, api.CodeNotFound, "no such route"},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, e.url(tt.path), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var got api.Error
		if err := json.Unmarshal(body, &got); err != nil {
			t.Errorf("%s %s: body %q: %v", tt.method, tt.path, body, err)
			continue
		}
		if resp.StatusCode != tt.status || got.Detail.Code != tt.code || !strings.Contains(got.Detail.Message, tt.msg) {
			t.Errorf("%s %s = %d %+v, want %d %s with %q", tt.method, tt.path, resp.StatusCode, got.Detail, tt.status, tt.code, tt.msg)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q, want application/json", tt.method, tt.path, ct)
		}
	}
}

// TestNDJSONShutdown ends a follower when the server's context ends.
func TestNDJSONShutdown(t *testing.T) {
	e := newEnv(t, nil)
	lg := e.create("forever")
	write(t, lg.Stdout(), "x\n")
	resp, err := http.Get(e.url("/v1/steps/forever/stream"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := make(chan error, 1)
	go func() {
		_, err := decodeLines(resp.Body, nil)
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	e.cancel()
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("follower did not end when the server stopped")
	}
}

// TestUpgradeGetsNDJSON: there is no websocket mode; a request asking to
// upgrade gets the frames as NDJSON like any other.
func TestUpgradeGetsNDJSON(t *testing.T) {
	e := newEnv(t, nil)
	want := e.finished("done", 2)
	req, _ := http.NewRequest("GET", e.url("/v1/steps/done/stream"), nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-Websocket-Version", "13")
	req.Header.Set("Sec-Websocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "application/x-ndjson" {
		t.Fatalf("upgrade request = %s %q, want 200 application/x-ndjson", resp.Status, ct)
	}
	got, err := decodeLines(resp.Body, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := diffFrames(want, got); diff != "" {
		t.Errorf("frames (-want +got):\n%s", diff)
	}
}

// TestStreamRemoved ends a follower of a log removed before its exit frame
// so that it does not mistake it for a complete stream.
func TestStreamRemoved(t *testing.T) {
	e := newEnv(t, nil)
	lg := e.create("doomed")
	write(t, lg.Stdout(), "x\n")
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
	if err := <-ndjson; err == nil || !strings.Contains(err.Error(), "unexpected EOF") {
		t.Errorf("NDJSON follower of a removed log ended with %v, want unexpected EOF", err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
