package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// headerTimeout bounds the wait for an answer's headers, long polls
// (which answer within their wait) included.
const headerTimeout = 2 * time.Minute

// newHTTPClient returns the HTTP client of schedctl's requests: no
// overall timeout (streams and long polls last), but a bound on a server
// that accepts a connection and never answers.
func newHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = headerTimeout
	return &http.Client{Transport: t}
}

// client returns a client of the scheduler named by --addr, else
// $RODON_SCHEDULER, else defaultAddr.
func (c *cli) client() (*client.Client, error) {
	addr := c.g.addr
	if addr == "" {
		addr = c.env("RODON_SCHEDULER")
	}
	if addr == "" {
		addr = defaultAddr
	}
	sc, err := client.New(addr, client.Options{HTTPClient: c.httpClient(), UserAgent: "schedctl", RetryFor: c.retryFor})
	if err != nil {
		return nil, fmt.Errorf("%w: --addr: %v", errUsage, err)
	}
	return sc, nil
}

func (c *cli) httpClient() *http.Client {
	if c.hc == nil {
		c.hc = newHTTPClient()
	}
	return c.hc
}

// isStatus reports whether err is an error answer with one of the HTTP
// statuses.
func isStatus(err error, statuses ...int) bool {
	var e *client.Error
	if !errors.As(err, &e) {
		return false
	}
	for _, s := range statuses {
		if e.Status == s {
			return true
		}
	}
	return false
}

// agentError turns an agent's error answer into a *client.Error, as the
// scheduler client does with the scheduler's (scheduler/client has no
// agent stream routes).
func agentError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &client.Error{Status: resp.StatusCode, Code: api.CodeInternal}
	var doc api.Error
	if json.Unmarshal(b, &doc) == nil && doc.Detail.Code != "" {
		e.Code, e.Message = doc.Detail.Code, doc.Detail.Message
	} else {
		switch resp.StatusCode {
		case http.StatusNotFound:
			e.Code = api.CodeNotFound
		case http.StatusConflict:
			e.Code = api.CodeConflict
		case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
			e.Code = api.CodeUnavailable
		}
		e.Message = strings.TrimSpace(string(b))
		if e.Message == "" {
			e.Message = http.StatusText(resp.StatusCode)
		}
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return fmt.Errorf("agent at %s: %w", resp.Request.URL.Host, e)
}
