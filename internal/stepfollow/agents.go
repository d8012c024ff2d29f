package stepfollow

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// Agents makes the HTTP clients of node agents' step streams. With TLS,
// a node's agent is dialled with the operator certificate and must
// present exactly agent/NODE, the node the scheduler says runs the step.
// The client of one node is kept (a Session follows one step, whose node
// changes only when it is re-placed); a client for another node is a new
// transport, so a connection verified as one node's agent never carries a
// request meant for another's at the same address. Safe for concurrent
// use.
type Agents struct {
	// src is the operator's certificate; nil with --plaintext.
	src *pki.Source
	// headerTimeout bounds the wait for an answer's headers.
	headerTimeout time.Duration

	mu sync.Mutex
	// node is the node client is for (with TLS), or "" (plain).
	node   string
	client *http.Client
}

// errStreamAddress marks a stream address schedctl refuses to dial:
// asking again gives the same answer.
var errStreamAddress = errors.New("stream address refused")

// NewAgents returns the clients of node agents for the operator whose
// certificate src holds, or, with a nil src, of --plaintext (plain HTTP,
// loopback only). headerTimeout bounds the wait for an answer's headers
// (a server that accepts a connection and never answers); 0 is no bound.
func NewAgents(src *pki.Source, headerTimeout time.Duration) *Agents {
	return &Agents{src: src, headerTimeout: headerTimeout}
}

// get checks loc, the scheduler's answer to where a step's stream is, and
// returns the client to request its URL with. With TLS it refuses an
// http:// URL and a node that is no agent identity; with --plaintext, an
// https:// URL.
func (a *Agents) get(loc api.StreamURL) (*http.Client, *url.URL, error) {
	u, err := url.Parse(loc.URL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, nil, fmt.Errorf("%w: %q: want https://HOST:PORT/...", errStreamAddress, loc.URL)
	}
	var id pki.Identity
	switch {
	case a.src == nil && u.Scheme != "http":
		return nil, nil, fmt.Errorf("%w: %s is HTTPS, but --plaintext leaves schedctl without a certificate", errStreamAddress, u.Redacted())
	case a.src != nil && u.Scheme != "https":
		return nil, nil, fmt.Errorf("%w: %s of node %q is plain HTTP, and schedctl talks to agents over TLS only "+
			"(is the agent running with --plaintext? then so must schedctl)", errStreamAddress, u.Redacted(), loc.Node)
	case a.src != nil:
		if id, err = pki.NewIdentity(pki.RoleAgent, loc.Node); err != nil {
			return nil, nil, fmt.Errorf("%w: %s: the scheduler named no valid node to verify (%w)", errStreamAddress, u.Redacted(), err)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.client == nil || a.node != id.Name {
		if a.client != nil {
			a.client.CloseIdleConnections()
		}
		var t *http.Transport
		if a.src != nil {
			t = a.src.Transport(Verify(pki.AllowIdentity(id)))
		} else {
			t = http.DefaultTransport.(*http.Transport).Clone()
			t.Proxy = nil
		}
		t.ResponseHeaderTimeout = a.headerTimeout
		a.client, a.node = &http.Client{Transport: t}, id.Name
	}
	return a.client, u, nil
}

// refusedPeer is a server whose certificate is of the cluster but names
// another identity than the one wanted.
type refusedPeer struct{ err error }

func (e *refusedPeer) Error() string { return e.err.Error() }

// Verify wraps authorize so that its refusals are errors IsTLSError
// recognizes.
func Verify(authorize pki.Authorizer) pki.Authorizer {
	return func(id pki.Identity) error {
		if err := authorize(id); err != nil {
			return &refusedPeer{err}
		}
		return nil
	}
}

// IsTLSError reports whether err is a failed TLS handshake: a server of
// another CA or identity (refused by an authorizer wrapped in Verify), or
// one that refused the client's certificate.
func IsTLSError(err error) bool {
	var (
		refused *refusedPeer
		unknown x509.UnknownAuthorityError
		invalid x509.CertificateInvalidError
		alert   tls.AlertError
		header  tls.RecordHeaderError
	)
	return errors.As(err, &refused) || errors.As(err, &unknown) || errors.As(err, &invalid) ||
		errors.As(err, &alert) || errors.As(err, &header)
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
