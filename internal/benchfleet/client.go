package benchfleet

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/rodon-compute/rodon/api"
)

// Client is a client of the gateway's API: signed in (cookie and CSRF
// token) or with an API key. JSON calls (Do) time out after 30 s; Send,
// for bodies of any size, only with its context.
type Client struct {
	site   string
	tls    *tls.Config // nil for plain HTTP
	hc     *http.Client
	stream *http.Client // hc without its timeout
	csrf   string
	bearer string
}

// NewClient is a client of the gateway at site that verifies its HTTPS
// certificate with tlsConf (nil for plain HTTP).
func NewClient(site string, tlsConf *tls.Config) *Client {
	jar, _ := cookiejar.New(nil)
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy, t.TLSClientConfig = nil, tlsConf
	return &Client{site: site, tls: tlsConf, hc: &http.Client{Jar: jar, Timeout: 30 * time.Second, Transport: t},
		stream: &http.Client{Jar: jar, Transport: t}}
}

// Send sends one request with the client's credentials, its body streamed
// as it is (nil for none) with header added, and returns the answer
// whatever its status; the caller closes its body. A body with a Size
// method (*os.File does not have one: use io.NewSectionReader) is sent
// with that Content-Length rather than chunked.
func (c *Client) Send(ctx context.Context, method, path string, body io.Reader, header http.Header) (*http.Response, error) {
	req, err := c.request(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if n, ok := body.(interface{ Size() int64 }); ok {
		req.ContentLength = n.Size()
	}
	resp, err := c.stream.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp, nil
}

// request is a request to the gateway with the client's credentials.
func (c *Client) request(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.site+path, body)
	if err != nil {
		return nil, err
	}
	if c.csrf != "" && method != http.MethodGet {
		req.Header.Set("X-CSRF-Token", c.csrf)
	}
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	return req, nil
}

// Do sends one request, body as JSON unless nil, and decodes a 2xx answer
// into out unless it is nil; any other status is an error.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := c.request(ctx, method, path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode %.200s: %w", method, path, b, err)
		}
	}
	return nil
}

// SignIn creates the owner (bench@rodon.local) with `gateway bootstrap`
// and returns a client with an admin API key of the owner's.
func (f *Fleet) SignIn(ctx context.Context) (*Client, error) {
	const email = "bench@rodon.local"
	pw, err := f.Bootstrap(ctx, email)
	if err != nil {
		return nil, err
	}
	return APIKey(ctx, f.Site, f.Public, email, pw)
}

// APIKey signs in as the owner and creates an admin API key; it returns a
// client that uses the key.
func APIKey(ctx context.Context, site string, tlsConf *tls.Config, email, password string) (*Client, error) {
	owner := NewClient(site, tlsConf)
	var signin struct {
		CSRFToken string `json:"csrf_token"`
	}
	if err := owner.Do(ctx, http.MethodPost, "/v1/auth/signin", map[string]string{"email": email, "password": password}, &signin); err != nil {
		return nil, err
	}
	owner.csrf = signin.CSRFToken
	var key struct {
		Secret string `json:"secret"`
	}
	if err := owner.Do(ctx, http.MethodPost, "/v1/keys", map[string]any{"name": "bench", "role": "admin"}, &key); err != nil {
		return nil, err
	}
	c := NewClient(site, tlsConf)
	c.bearer = key.Secret
	return c, nil
}

// WithBearer is a client of the same gateway that sends token as its
// credential (an API key, or a run's grant) and no cookie.
func (c *Client) WithBearer(token string) *Client {
	k := NewClient(c.site, c.tls)
	k.bearer = token
	return k
}

// Operation is the part of a run (an Operation) the benchmark reads.
type Operation struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Steps []struct {
		ID    string `json:"id"`
		State string `json:"state"`
	} `json:"steps"`
	Errors []string `json:"errors"`
}

// StartRun starts a run of one step running args in the base image.
func (c *Client) StartRun(ctx context.Context, ws string, args ...string) (Operation, error) {
	var op Operation
	err := c.Do(ctx, http.MethodPost, "/v1/runs", map[string]any{"workspace": ws,
		"steps": []map[string]any{{"args": args, "cpu": 1, "memory": "512Mi"}}}, &op)
	if err == nil && len(op.Steps) != 1 {
		err = fmt.Errorf("run %s has %d steps, want 1", op.ID, len(op.Steps))
	}
	return op, err
}

// WaitRun waits until run id has ended and returns it.
func (c *Client) WaitRun(ctx context.Context, id string) (Operation, error) {
	var op Operation
	var err error
	werr := WaitFor(ctx, 2*time.Minute, "run "+id+" to end", func() bool {
		err = c.Do(ctx, http.MethodGet, "/v1/runs/"+id, nil, &op)
		return err == nil && op.State != "running"
	})
	if werr != nil {
		return op, fmt.Errorf("%w (last answer: %v)", werr, err)
	}
	return op, nil
}

// StreamResult is what one reader of a step's output saw. Times are
// taken as the bytes arrived in this process.
type StreamResult struct {
	Start     time.Time // the reader was started
	Connected time.Time // websocket only: the handshake completed (the last one)
	First     time.Time // the first output bytes arrived
	End       time.Time // the exit frame arrived (the reader ended)
	Stdout    int64     // bytes of stdout decoded
	Exit      *api.Exit // websocket only: the exit frame's data
	Redials   int       // websocket only: connections closed 4404 before any frame
}

// ReadStream reads step id's stream through the gateway's websocket from
// frame 0 until the exit frame, decoding every frame as a client must.
// A step not submitted yet (409) and a stream that the node does not have
// yet (close 4404 before any frame: the step is placed but its node has
// not opened its log) are tried again every 10 ms.
func (c *Client) ReadStream(ctx context.Context, id string) (StreamResult, error) {
	r := StreamResult{Start: time.Now()}
	u := "ws" + strings.TrimPrefix(c.site, "http") + "/v1/steps/" + id + "/stream?from=0"
	h := http.Header{"Authorization": {"Bearer " + c.bearer}}
	d := websocket.Dialer{HandshakeTimeout: 20 * time.Second, ReadBufferSize: 64 << 10, TLSClientConfig: c.tls}
	deadline := time.Now().Add(60 * time.Second)
	var buf bytes.Buffer
	for {
		conn, resp, err := d.DialContext(ctx, u, h)
		if err != nil {
			if resp != nil && resp.StatusCode == http.StatusConflict && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return r, fmt.Errorf("open the stream of step %s: %w", id, err)
		}
		r.Connected = time.Now()
		frames, err := readFrames(conn, &buf, &r)
		conn.Close()
		var ce *websocket.CloseError
		if frames == 0 && errors.As(err, &ce) && ce.Code == 4404 && time.Now().Before(deadline) {
			r.Redials++
			time.Sleep(10 * time.Millisecond)
			continue
		}
		return r, err
	}
}

// readFrames reads frames from conn into r until the exit frame, which it
// answers with a normal close. It returns how many frames it read.
func readFrames(conn *websocket.Conn, buf *bytes.Buffer, r *StreamResult) (int, error) {
	for n := 0; ; n++ {
		_, rd, err := conn.NextReader()
		if err != nil {
			return n, err
		}
		buf.Reset()
		if _, err := buf.ReadFrom(rd); err != nil {
			return n, err
		}
		var f api.Frame
		if err := json.Unmarshal(buf.Bytes(), &f); err != nil {
			return n, fmt.Errorf("frame %d: %w", n+1, err)
		}
		switch f.Kind {
		case api.KindStdout:
			b, err := f.Output()
			if err != nil {
				return n, err
			}
			if r.Stdout == 0 && len(b) > 0 {
				r.First = time.Now()
			}
			r.Stdout += int64(len(b))
		case api.KindExit:
			r.End = time.Now()
			x, err := f.Exit()
			if err != nil {
				return n, err
			}
			r.Exit = &x
			conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
				time.Now().Add(time.Second))
			return n + 1, nil
		}
	}
}
