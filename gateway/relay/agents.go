package relay

import (
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/pki"
)

// Agents makes the HTTP clients that reach node agents: the relay's
// upstream and the terminal input. With TLS, each node has a transport of
// its own, whose handshakes present the gateway's certificate and accept
// only a server whose certificate names exactly agent/NODE.
//
// One transport per node, not one for all, is what keeps that check true
// for kept-alive connections: an http.Transport pools idle connections by
// host and port, so a connection verified as agent/n1 would otherwise
// carry a later request meant for agent/n2 at the same address (a node that
// took the address over). A transport verifies at the handshake, before a
// request is written, so keystrokes never reach the wrong node either.
// Transports unused for idleTransport are dropped.
//
// Agents is safe for concurrent use.
type Agents struct {
	// src is the gateway's certificate; nil in plaintext mode.
	src *pki.Source
	now func() time.Time

	mu sync.Mutex
	// nodes are the TLS transports by node id; plain is plaintext mode's
	// one client.
	nodes map[string]*nodeClient
	plain *http.Client
	// swept is when unused transports were last dropped.
	swept time.Time
}

// nodeClient is the client of one node's agent and when it was last
// handed out.
type nodeClient struct {
	client *http.Client
	used   time.Time
}

// idleTransport is how long a node's transport is kept unused; its idle
// connections close after a minute anyway (pki.Source.Transport).
const idleTransport = 10 * time.Minute

// NewAgents returns the clients of node agents for a gateway whose
// certificate src holds, or, with a nil src, of plaintext mode (plain
// HTTP, no authentication: tests on loopback).
func NewAgents(src *pki.Source) *Agents {
	a := &Agents{src: src, now: time.Now, nodes: map[string]*nodeClient{}}
	if src == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.Proxy = nil
		a.plain = &http.Client{Transport: t}
	}
	return a
}

// Client checks loc, the scheduler's answer to where a step's stream is,
// and returns its URL and the client to request it (or a URL beside it)
// with. The client has no timeout: bound requests with their context.
// Under TLS it refuses an http:// URL and a node that is no agent
// identity; in plaintext mode, an https:// URL.
func (a *Agents) Client(loc api.StreamURL) (*http.Client, *url.URL, error) {
	u, err := url.Parse(loc.URL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, nil, fmt.Errorf("agent url %q: want https://HOST:PORT/...", loc.URL)
	}
	if a.src == nil {
		if u.Scheme != "http" {
			return nil, nil, fmt.Errorf("agent url %s: the gateway runs with --plaintext and has no certificate to present", u.Redacted())
		}
		return a.plain, u, nil
	}
	if u.Scheme != "https" {
		return nil, nil, fmt.Errorf("agent url %s of node %q is plain HTTP: refused, the gateway talks to agents over TLS only "+
			"(is the agent running with --plaintext?)", u.Redacted(), loc.Node)
	}
	id, err := pki.NewIdentity(pki.RoleAgent, loc.Node)
	if err != nil {
		return nil, nil, fmt.Errorf("agent url %s: the scheduler named no valid node to verify (%w)", u.Redacted(), err)
	}
	return a.nodeClient(id), u, nil
}

// nodeClient returns the client that accepts only id as the server.
func (a *Agents) nodeClient(id pki.Identity) *http.Client {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	if now.Sub(a.swept) >= time.Minute {
		a.swept = now
		for node, nc := range a.nodes {
			if now.Sub(nc.used) >= idleTransport {
				nc.client.CloseIdleConnections()
				delete(a.nodes, node)
			}
		}
	}
	nc, ok := a.nodes[id.Name]
	if !ok {
		nc = &nodeClient{client: &http.Client{Transport: a.src.Transport(pki.AllowIdentity(id))}}
		a.nodes[id.Name] = nc
	}
	nc.used = now
	return nc.client
}

// CloseIdleConnections closes every idle connection to every agent.
func (a *Agents) CloseIdleConnections() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.plain != nil {
		a.plain.CloseIdleConnections()
	}
	for _, nc := range a.nodes {
		nc.client.CloseIdleConnections()
	}
}
