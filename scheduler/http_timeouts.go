package scheduler

import (
	"fmt"
	"net/http"
	"time"
)

// HTTPTimeouts bound the member's HTTP exchanges (docs/PROTOCOL.md,
// "Timeouts"), so that no client holds a connection or a handler for
// longer than its route needs: one that sends its headers or its body
// slowly, reads the answer slowly, or keeps an idle connection open.
type HTTPTimeouts struct {
	// Header bounds the TLS handshake and the reading of a request's
	// headers (--http-header-timeout).
	Header time.Duration
	// Request bounds the rest of an exchange, reading the body and
	// writing the answer (a forwarded one included), on every route but
	// the long polls and the snapshots (--http-timeout). A long poll
	// (?index= on GET /v1/steps/{id} and GET /v1/agent/assignments) gets
	// MaxWait more.
	Request time.Duration
	// Snapshot bounds the exchange of GET /v1/snapshot and POST
	// /v1/snapshot/restore, whose documents may be 256 MiB, and of the
	// routes that move a workspace's bytes (files, archive, diff, blobs)
	// (--snapshot-timeout).
	Snapshot time.Duration
	// Idle bounds how long a kept-alive connection waits for its next
	// request (--http-idle-timeout).
	Idle time.Duration
}

// DefaultHTTPTimeouts are the timeouts of `scheduler serve` without flags.
func DefaultHTTPTimeouts() HTTPTimeouts {
	return HTTPTimeouts{Header: 10 * time.Second, Request: 30 * time.Second, Snapshot: 5 * time.Minute, Idle: 2 * time.Minute}
}

// MaxHTTPTimeout is the largest of any of them New accepts.
const MaxHTTPTimeout = time.Hour

func (t HTTPTimeouts) validate() error {
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"header", t.Header}, {"request", t.Request}, {"snapshot", t.Snapshot}, {"idle", t.Idle}} {
		if f.v <= 0 || f.v > MaxHTTPTimeout {
			return fmt.Errorf("http %s timeout %v: want more than 0, at most %v", f.name, f.v, MaxHTTPTimeout)
		}
	}
	return nil
}

// routeTimeout returns how long the exchange of r, a request of the route
// pattern, may take once its headers are read.
func (s *Server) routeTimeout(pattern string, r *http.Request) time.Duration {
	t := s.cfg.HTTP
	switch pattern {
	case "GET /v1/steps/{id}", "GET /v1/agent/assignments":
		if r.URL.Query().Has("index") {
			return s.cfg.MaxWait + t.Request
		}
	case "GET /v1/snapshot", "POST /v1/snapshot/restore",
		"GET /v1/workspaces/{id}/files/{path...}", "PUT /v1/workspaces/{id}/files/{path...}",
		"GET /v1/workspaces/{id}/archive", "GET /v1/workspaces/{id}/diff",
		"GET /v1/blobs/{digest}", "PUT /v1/blobs/{digest}":
		return t.Snapshot
	}
	return t.Request
}

// withDeadlines serves mux with the read and write deadlines of each
// request's route. Both are set on every request: net/http resets neither
// between the requests of a connection when the server has no timeouts of
// its own, and the read deadline must outlast the handler, which ends when
// the background read of the connection fails.
func (s *Server) withDeadlines(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := mux.Handler(r)
		deadline := time.Now().Add(s.routeTimeout(pattern, r))
		rc := http.NewResponseController(w)
		// Not supported by a test's recorder; a real connection has both.
		_ = rc.SetReadDeadline(deadline)
		_ = rc.SetWriteDeadline(deadline)
		mux.ServeHTTP(w, r)
	})
}
