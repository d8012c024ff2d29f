package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/gateway/relay"
)

// slowStream answers a stream after a while, as a long stream would keep
// its connection.
type slowStream struct{ wait time.Duration }

func (s slowStream) ServeStream(w http.ResponseWriter, r *http.Request, st relay.Stream) {
	time.Sleep(s.wait)
	w.Write([]byte("stream done\n"))
}

// serveFixture serves f's gateway (with cfg's timeouts) on a loopback
// listener until the test ends, and returns its address.
func serveFixture(t *testing.T, f *fixture) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.g.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return ln.Addr().String()
}

// TestHTTPTimeouts: a request whose body does not come is cut off after
// the read timeout, an idle kept-alive connection after the idle timeout,
// and a step stream is not bound by the write timeout.
func TestHTTPTimeouts(t *testing.T) {
	f := newFixtureWith(t, func(c *Config) {
		c.Timeouts = Timeouts{ReadHeader: time.Second, Read: 200 * time.Millisecond, Write: 300 * time.Millisecond, Idle: 300 * time.Millisecond}
		c.Stream = slowStream{wait: 600 * time.Millisecond}
	})
	addr := serveFixture(t, f)

	// A body that stops half way.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	io.WriteString(conn, "POST /v1/workspaces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+f.creds["key-admin"].bearer+
		"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"name\":")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		res.Body.Close()
	}
	if d := time.Since(start); d > 2*time.Second || err == nil && res.StatusCode < 400 {
		t.Errorf("stalled body: %v after %v, want an error answer or a closed connection within the read timeout", res, d)
	}

	// An idle kept-alive connection.
	conn2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	io.WriteString(conn2, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(conn2)
	res, err = http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("GET /healthz = %v, %v", res, err)
	}
	io.Copy(io.Discard, res.Body)
	start = time.Now()
	conn2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF || time.Since(start) > 2*time.Second {
		t.Errorf("idle connection: %v after %v, want closed (EOF) after the 300ms idle timeout", err, time.Since(start))
	}

	// A stream outlives the write timeout.
	req, _ := http.NewRequest("GET", "http://"+addr+"/v1/steps/"+stepID(f.run, 0)+"/stream", nil)
	req.Header.Set("Authorization", "Bearer "+f.creds["key-viewer"].bearer)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || !strings.Contains(string(b), "stream done") {
		t.Errorf("stream answer %q, %v: want it whole after 600ms, past the 300ms write timeout", b, err)
	}
}

// TestTimeoutSettings: each timeout's default and maximum, and the check
// of its range; and which paths are streams.
func TestTimeoutSettings(t *testing.T) {
	if want := (Timeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Write: time.Minute, Idle: 2 * time.Minute}); DefaultTimeouts != want || DefaultConfig().Timeouts != want {
		t.Errorf("default timeouts %+v, want %+v", DefaultTimeouts, want)
	}
	if want := (Timeouts{ReadHeader: time.Minute, Read: 10 * time.Minute, Write: 10 * time.Minute, Idle: time.Hour}); MaxTimeouts != want {
		t.Errorf("max timeouts %+v, want %+v", MaxTimeouts, want)
	}
	if err := MaxTimeouts.Check(); err != nil {
		t.Errorf("MaxTimeouts.Check() = %v", err)
	}
	for _, tc := range []struct {
		edit func(*Timeouts)
		want string
	}{
		{func(x *Timeouts) { x.ReadHeader = 0 }, "http-read-header-timeout 0s"},
		{func(x *Timeouts) { x.Read = 11 * time.Minute }, "http-read-timeout 11m0s"},
		{func(x *Timeouts) { x.Write = -time.Second }, "http-write-timeout -1s"},
		{func(x *Timeouts) { x.Idle = 2 * time.Hour }, "http-idle-timeout 2h0m0s"},
	} {
		x := DefaultTimeouts
		tc.edit(&x)
		if err := x.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%+v) = %v, want an error naming %q", x, err, tc.want)
		}
	}
	for path, want := range map[string]bool{
		"/v1/steps/s-abc-0/stream": true, "/v1/steps/s-abc-0": false, "/v1/steps//stream": false,
		"/v1/steps/a/b/stream": false, "/v1/runs": false,
	} {
		if got := isStreamPath(path); got != want {
			t.Errorf("isStreamPath(%q) = %v, want %v", path, got, want)
		}
	}
	if maxHeaderBytes != 64<<10 {
		t.Errorf("max header bytes %d, want 64 KiB", maxHeaderBytes)
	}
}

// trickle yields n chunks of data, every, then ends.
type trickle struct {
	n     int
	every time.Duration
}

func (r *trickle) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	time.Sleep(r.every)
	r.n--
	p[0] = 'x'
	return 1, nil
}

// TestTransferDeadlines: a file upload that keeps making progress goes on
// past the read timeout; one that stalls for it is cut.
func TestTransferDeadlines(t *testing.T) {
	f := newFixtureWith(t, func(c *Config) {
		c.Timeouts = Timeouts{ReadHeader: time.Second, Read: 300 * time.Millisecond, Write: 300 * time.Millisecond, Idle: time.Second}
	})
	addr := serveFixture(t, f)
	put := func(body io.Reader) (*http.Response, error) {
		req, _ := http.NewRequest("PUT", "http://"+addr+"/v1/workspaces/ws-main/files/slow.txt", body)
		req.Header.Set("Authorization", "Bearer "+f.creds["key-editor"].bearer)
		return http.DefaultClient.Do(req)
	}
	res, err := put(&trickle{n: 8, every: 100 * time.Millisecond})
	if err != nil || res.StatusCode != 201 {
		t.Fatalf("PUT over 800ms making progress = %v, %v, want 201", res, err)
	}
	res.Body.Close()
	w := f.do("viewer", "GET", "/v1/workspaces/ws-main/files/slow.txt", "", 200, nil)
	if w.Body.String() != "xxxxxxxx" {
		t.Errorf("slow.txt = %q, want 8 bytes", w.Body)
	}
	res, err = put(&trickle{n: 2, every: time.Second})
	if err == nil {
		res.Body.Close()
		if res.StatusCode < 400 {
			t.Errorf("PUT stalling 1s = %d, want it cut after the 300ms read timeout", res.StatusCode)
		}
	}
	for path, want := range map[string]bool{
		"/v1/workspaces/ws-a/files/x": true, "/v1/workspaces/ws-a/archive": true, "/v1/blobs/abc": true,
		"/v1/workspaces/ws-a/tree": false, "/v1/workspaces": false,
	} {
		if got := isTransferPath(path); got != want {
			t.Errorf("isTransferPath(%q) = %v, want %v", path, got, want)
		}
	}
}
