package scheduler

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// TestHTTPTimeouts checks the bounds of the member's HTTP server on a
// raw connection: slow headers, a slow body and an idle connection are
// cut at their bound, a long poll is not.
func TestHTTPTimeouts(t *testing.T) {
	c := newServerCluster(t, 1, func(cfg *Config) {
		cfg.HTTP = HTTPTimeouts{Header: 200 * time.Millisecond, Request: 300 * time.Millisecond, Snapshot: time.Second, Idle: 400 * time.Millisecond}
		cfg.MaxWait = 2 * time.Second
	})
	addr := c.members[0].srv.cfg.HTTPAddr
	cl := c.client()
	s, err := cl.SubmitStep(t.Context(), api.StepRequest{ID: "s1", Image: "base", Args: []string{"true"}, CPU: 1, MemoryBytes: gib})
	if err != nil {
		t.Fatal(err)
	}

	// closedWithin sends what, then reads until the server closes the
	// connection, and returns how long that took and what it answered.
	closedWithin := func(what string) (time.Duration, string) {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		if _, err := io.WriteString(conn, what); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(conn)
		return time.Since(start), string(b)
	}
	if d, _ := closedWithin("GET /healthz HTTP/1.1\r\nHost: x\r\n"); d < 150*time.Millisecond || d > 1500*time.Millisecond {
		t.Errorf("headers never finished: closed after %v, want about the header timeout of 200ms", d)
	}
	body := `{"image":"base","args":["true"],"cpu":1,`
	if d, answer := closedWithin(fmt.Sprintf("POST /v1/steps HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body)+100, body)); d > 1500*time.Millisecond {
		t.Errorf("a body never finished: closed after %v (%q), want about the request timeout of 300ms", d, answer)
	}

	// An idle kept-alive connection is closed; a long poll on it is not
	// cut at the request timeout.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	start := time.Now()
	fmt.Fprintf(conn, "GET /v1/steps/s1?index=%d&wait=1s HTTP/1.1\r\nHost: x\r\n\r\n", s.ModifyIndex+1000)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("long poll: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if d := time.Since(start); resp.StatusCode != 200 || d < 900*time.Millisecond {
		t.Errorf("long poll of 1s = %d after %v, want 200 after its wait (not cut at 300ms)", resp.StatusCode, d)
	}
	idle := time.Now()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Errorf("idle connection: read = %v, want it closed by the server", err)
	}
	if d := time.Since(idle); d > 1500*time.Millisecond {
		t.Errorf("idle connection closed after %v, want about the idle timeout of 400ms", d)
	}
}
