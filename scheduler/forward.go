package scheduler

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"sync/atomic"

	"github.com/rodon-compute/rodon/api"
)

// ForwardedHeader marks a request a member forwarded to the leader, with
// the forwarding member's ID. A member that is not the leader answers such
// a request with no_leader instead of forwarding it again, so a request
// never travels in circles while leadership moves.
const ForwardedHeader = "X-Rodon-Forwarded-By"

// forward proxies r to the leader's HTTP address, as recorded in the
// replicated member records. With TLS the proxy dials the leader with this
// member's certificate, accepts only a member on the other end, and names
// the caller this member authorized in ForwardedForHeader, for the leader
// to authorize again. Without a known leader (an election), or
// when the leader cannot be dialled, it answers 503 no_leader, which a
// client may retry whatever the request: nothing was applied. A failure
// after the request reached the leader is a 502 unavailable: the change
// may have been applied.
func (s *Server) forward(w http.ResponseWriter, r *http.Request) {
	if by := r.Header.Get(ForwardedHeader); by != "" {
		writeError(w, noLeader("forwarded by member %s, but member %s is not the leader either: leadership is moving, retry shortly", by, s.cfg.ID))
		return
	}
	id, _ := s.raft.Leader()
	if id == "" {
		writeError(w, noLeader("no leader is known: an election may be under way, retry shortly"))
		return
	}
	m, ok := s.fsm.State().Member(id)
	if !ok {
		writeError(w, noLeader("the leader %s has not recorded its HTTP address yet: retry shortly", id))
		return
	}
	s.metrics.forwarded.Inc()
	target := &url.URL{Scheme: s.scheme(), Host: m.HTTPAddress}
	c, authorized := callerOf(r.Context())
	// sent says whether the request's headers reached the leader's
	// connection: before that (a refused dial, a failed TLS handshake)
	// nothing can have been applied.
	var sent atomic.Bool
	trace := &httptrace.ClientTrace{WroteHeaders: func() { sent.Store(true) }}
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out = pr.Out.WithContext(httptrace.WithClientTrace(pr.Out.Context(), trace))
			pr.SetURL(target)
			pr.Out.Host = r.Host
			pr.Out.Header.Set(ForwardedHeader, s.cfg.ID)
			pr.Out.Header.Del(ForwardedForHeader)
			if authorized {
				pr.Out.Header.Set(ForwardedForHeader, c.id.String())
			}
			pr.SetXForwarded()
		},
		Transport: s.fwd.Transport,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			var op *net.OpError
			if errors.As(err, &op) && op.Op == "dial" || !sent.Load() {
				writeError(w, noLeader("cannot reach the leader %s at %s: %v; retry shortly", id, m.HTTPAddress, err))
				return
			}
			writeError(w, &httpError{Status: http.StatusBadGateway, Code: api.CodeUnavailable,
				Message: fmt.Sprintf("forward to the leader %s at %s: %v; the change may have been applied: read it back before retrying",
					id, m.HTTPAddress, err)})
		},
	}
	p.ServeHTTP(w, r)
}
