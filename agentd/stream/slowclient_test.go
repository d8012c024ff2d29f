package stream

import (
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestNDJSONClientThatStopsReading: a plain-HTTP follower that stops
// reading is given up within WriteWait once its socket is full, instead of
// holding the handler (and a goroutine) for as long as the step runs.
func TestNDJSONClientThatStopsReading(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.WriteWait = 300 * time.Millisecond })
	lg := e.create("flood")
	line := strings.Repeat("x", 1000) + "\n"
	for range 20000 { // 20 MB: far more than the sockets' buffers
		write(t, lg.Stdout(), line)
	}
	c, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(4096)
	}
	fmt.Fprint(c, "GET /v1/steps/flood/stream HTTP/1.1\r\nHost: x\r\n\r\n")
	// Never read. The handler must give up within WriteWait of its
	// socket filling up, and its goroutine end, while the connection is
	// still open on the client's side.
	// First the handler must have started, or the wait below could end
	// before it began.
	deadline := time.Now().Add(5 * time.Second)
	for !serving() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !serving() {
		t.Fatal("the stream was not served within 5s")
	}
	deadline = time.Now().Add(5 * time.Second)
	for serving() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if serving() {
		t.Errorf("the stream of a client that stopped reading is still served after 5s")
	}
}

// serving reports whether a goroutine runs serveNDJSON.
func serving() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "serveNDJSON")
}
