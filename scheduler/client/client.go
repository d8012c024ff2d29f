// Package client is the Go client of the scheduler's HTTP API
// (docs/PROTOCOL.md): the operator routes used by schedctl, the agent
// routes used by agentd, and the record store and audit log used by the
// gateway. A Client knows every member's URL; a request that cannot reach
// a member, or that meets a cluster without a leader, is retried on the
// next member with backoff until Options.RetryFor passes or the context
// ends. Members forward writes to the leader themselves, so any member will
// do. Errors the scheduler answers come back as *Error.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/pki"
)

// IndexHeader carries the state index a member answered from.
const IndexHeader = "X-Rodon-Index"

// NextCursorHeader carries, on a page of a list, the cursor of the next
// page; it is absent on the last page.
const NextCursorHeader = "X-Next-Cursor"

// Options configure a Client; the zero value is usable.
type Options struct {
	// TLS is the caller's certificate and the cluster CA: requests use
	// mutual TLS 1.3 and accept only a scheduler member (role member) on
	// the other end, and a bare HOST:PORT address means https://. Nil is
	// plaintext, or whatever HTTPClient does.
	TLS *pki.Source
	// HTTPClient makes the requests; nil is a client without an overall
	// timeout (long polls last as long as asked; bound calls with ctx).
	// With TLS, its Transport must be nil: the client uses TLS's.
	HTTPClient *http.Client
	// RetryFor bounds how long a request is retried across members while
	// none answers or the cluster has no leader; zero is 30 seconds, a
	// negative value tries each member once.
	RetryFor time.Duration
	// UserAgent is sent with every request; empty is "rodon-client".
	UserAgent string
}

// Client talks to a scheduler cluster. It is safe for concurrent use.
type Client struct {
	urls []*url.URL
	hc   *http.Client
	opts Options
	// next is the index of the member that answered last; requests start
	// there.
	next atomic.Int32
}

// New returns a client of the members at addrs, a comma-separated list of
// URLs ("https://10.0.0.1:7100,https://10.0.0.2:7100"); a bare host:port
// means https://host:port with Options.TLS, else http://host:port. With
// TLS, an http:// URL is refused: it would not be encrypted.
func New(addrs string, opts Options) (*Client, error) {
	scheme := "http"
	if opts.TLS != nil {
		scheme = "https"
	}
	var urls []*url.URL
	for a := range strings.SplitSeq(addrs, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if !strings.Contains(a, "://") {
			a = scheme + "://" + a
		}
		u, err := url.Parse(a)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("scheduler address %q: want %s://HOST:PORT", a, scheme)
		}
		if opts.TLS != nil && u.Scheme != "https" {
			return nil, fmt.Errorf("scheduler address %q: the client has a TLS certificate: want https://HOST:PORT or HOST:PORT", a)
		}
		u.Path = strings.TrimSuffix(u.Path, "/")
		urls = append(urls, u)
	}
	if len(urls) == 0 {
		return nil, fmt.Errorf("no scheduler address in %q: want URL[,URL...]", addrs)
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	if opts.TLS != nil {
		if hc.Transport != nil {
			return nil, errors.New("client: Options.HTTPClient has a Transport and Options.TLS is set: give one or the other")
		}
		c := *hc
		c.Transport = opts.TLS.Transport(pki.AllowRoles(pki.RoleMember))
		hc = &c
	}
	if opts.RetryFor == 0 {
		opts.RetryFor = 30 * time.Second
	}
	if opts.UserAgent == "" {
		opts.UserAgent = "rodon-client"
	}
	return &Client{urls: urls, hc: hc, opts: opts}, nil
}

// CloseIdleConnections closes the idle connections of the client's
// transport (that of Options.TLS, or of Options.HTTPClient).
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// URLs returns the members' base URLs, in the order given to New.
func (c *Client) URLs() []string {
	out := make([]string, len(c.urls))
	for i, u := range c.urls {
		out[i] = u.String()
	}
	return out
}

// retryMode says when a request may be sent again.
type retryMode int

const (
	// retrySafe: the request may be repeated whatever happened to the
	// previous try (reads, and writes the scheduler treats as idempotent).
	retrySafe retryMode = iota
	// retryUnsent: the request is repeated only when the previous try
	// surely changed nothing (connection refused, no leader).
	retryUnsent
)

// request is one API call.
type request struct {
	method string
	// path is the URL path after the member's base URL, escaped.
	path  string
	query url.Values
	body  []byte // nil for none
	retry retryMode
	// limit caps a read response body; zero is 64 MiB.
	limit int64
	// header holds headers sent besides the client's own.
	header http.Header
	// stream, if not nil, is the body (body is then nil), read once as
	// it is sent, length bytes long (-1: unknown). Whatever retry says, a
	// request with a stream is tried on another member only when it
	// could not connect: once sent, its bytes are gone.
	stream io.Reader
	length int64
	// open asks for the answer's body unread (response.open, which the
	// caller closes) when the status is below 300 or 304; openAny for
	// every status (a proxy's).
	open, openAny bool
}

// response is a successful answer.
type response struct {
	status int
	index  uint64
	body   []byte
	// next is the cursor of a list's next page; empty on the last.
	next string
	// open is the answer with its body unread, for a request.open.
	open *http.Response
}

// do sends r to one member after another until one answers or the retry
// budget ends.
func (c *Client) do(ctx context.Context, r request) (*response, error) {
	var deadline time.Time
	if c.opts.RetryFor > 0 {
		deadline = time.Now().Add(c.opts.RetryFor)
	}
	backoff := 50 * time.Millisecond
	start := int(c.next.Load())
	var lastErr error
	for try := 0; ; try++ {
		i := (start + try) % len(c.urls)
		resp, again, err := c.once(ctx, c.urls[i], r)
		if err == nil {
			c.next.Store(int32(i))
			return resp, nil
		}
		lastErr = err
		if !again || ctx.Err() != nil {
			return nil, err
		}
		if (try+1)%len(c.urls) != 0 {
			continue // try the next member at once
		}
		if deadline.IsZero() || time.Now().Add(backoff).After(deadline) {
			return nil, lastErr
		}
		var ae *Error
		wait := backoff
		if errors.As(lastErr, &ae) && ae.RetryAfter > 0 {
			wait = min(ae.RetryAfter, time.Until(deadline))
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, lastErr
		}
		backoff = min(2*backoff, time.Second)
	}
}

// once sends r to the member at base. again says whether another try may
// succeed and is allowed by r.retry.
func (c *Client) once(ctx context.Context, base *url.URL, r request) (resp *response, again bool, err error) {
	// r.path is escaped (ids go through escape): keep it so, so that an id
	// with '%', '?' or a space reaches the server as it is.
	u := *base
	p, err := url.PathUnescape(r.path)
	if err != nil {
		return nil, false, fmt.Errorf("%s %s: %w", r.method, r.path, err)
	}
	u.Path, u.RawPath = base.Path+p, base.EscapedPath()+r.path
	u.RawQuery = r.query.Encode()
	var body io.Reader
	switch {
	case r.stream != nil:
		body = r.stream
	case r.body != nil:
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), body)
	if err != nil {
		return nil, false, fmt.Errorf("%s %s: %w", r.method, r.path, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.opts.UserAgent)
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.stream != nil {
		switch {
		case r.length == 0:
			req.Body, req.ContentLength = http.NoBody, 0
		case r.length > 0:
			req.ContentLength = r.length
		}
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	hr, err := c.hc.Do(req)
	if err != nil {
		err = fmt.Errorf("%s %s: %w", r.method, u.Redacted(), err)
		if r.stream != nil {
			return nil, ctx.Err() == nil && unsent(err), err
		}
		return nil, ctx.Err() == nil && (r.retry == retrySafe || unsent(err)), err
	}
	idx, _ := strconv.ParseUint(hr.Header.Get(IndexHeader), 10, 64)
	if r.openAny || r.open && (hr.StatusCode < 300 || hr.StatusCode == http.StatusNotModified) {
		return &response{status: hr.StatusCode, index: idx, open: hr}, false, nil
	}
	defer hr.Body.Close()
	limit := r.limit
	if limit == 0 {
		limit = 64 << 20
	}
	b, err := io.ReadAll(io.LimitReader(hr.Body, limit+1))
	if err != nil {
		err = fmt.Errorf("%s %s: read answer: %w", r.method, u.Redacted(), err)
		return nil, ctx.Err() == nil && r.retry == retrySafe && r.stream == nil, err
	}
	if int64(len(b)) > limit {
		return nil, false, fmt.Errorf("%s %s: answer over %d bytes", r.method, u.Redacted(), limit)
	}
	if hr.StatusCode >= 300 {
		e := decodeError(hr, b)
		again := e.Code == api.CodeNoLeader || e.Code == api.CodeUnavailable && r.retry == retrySafe
		return nil, again && r.stream == nil, e
	}
	return &response{status: hr.StatusCode, index: idx, body: b, next: hr.Header.Get(NextCursorHeader)}, false, nil
}

// unsent reports whether err surely happened before the request reached a
// server: it could not connect.
func unsent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// call sends r with in (if not nil) as its JSON body, and decodes the
// answer into out (if not nil).
func (c *Client) call(ctx context.Context, r request, in, out any) (*response, error) {
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("%s %s: encode request: %w", r.method, r.path, err)
		}
		r.body = b
	}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	if out != nil {
		if err := json.Unmarshal(resp.body, out); err != nil {
			return nil, fmt.Errorf("%s %s: decode answer: %w", r.method, r.path, err)
		}
	}
	return resp, nil
}

func escape(id string) string { return url.PathEscape(id) }

func waitQuery(index uint64, wait time.Duration) url.Values {
	q := url.Values{}
	q.Set("index", strconv.FormatUint(index, 10))
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	return q
}

// MaxPageLimit is the most entries a list route answers in one page; a
// larger limit is capped. A limit of zero asks for the server's default
// (100).
const MaxPageLimit = 1000

// pageQuery returns q with the page parameters set.
func pageQuery(q url.Values, limit int, cursor string) url.Values {
	if q == nil {
		q = url.Values{}
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	return q
}

// listPage reads one page of the list at path: the entries and the cursor
// of the next page ("" on the last).
func listPage[T any](ctx context.Context, c *Client, path string, q url.Values, limit int, cursor string) ([]T, string, error) {
	var out []T
	resp, err := c.call(ctx, request{method: http.MethodGet, path: path, query: pageQuery(q, limit, cursor)}, nil, &out)
	if err != nil {
		return nil, "", err
	}
	return out, resp.next, nil
}

// listAll reads every page of the list at path, MaxPageLimit entries at a
// time. The pages are read at different moments: an entry added or
// removed meanwhile may be missed, but none is read twice.
func listAll[T any](ctx context.Context, c *Client, path string, q url.Values) ([]T, error) {
	all := []T{}
	cursor := ""
	for {
		page, next, err := listPage[T](ctx, c, path, q, MaxPageLimit, cursor)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		cursor = next
	}
}
