package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/rodon-compute/rodon/internal/pki"
)

// raftStream is Raft's stream layer: mutual TLS 1.3 between members, both
// sides requiring a member certificate of the cluster CA (as Nomad and
// Consul run hashicorp/raft's NetworkTransport over TLS), or plain TCP in
// plaintext mode. A connection whose handshake fails (a raw TCP client, a
// certificate of another CA or role) fails on its first read: the
// transport's handler drops it, and nothing of it reaches Raft.
//
// It keeps the TCP connections it accepted and closes them when it is
// closed. hashicorp/raft's transport closes only its listener: a connection
// a peer keeps in its pool, or one stuck in its handshake, would otherwise
// hold a handler goroutine until the peer closes it.
type raftStream struct {
	// ln accepts the connections Raft reads: tracked's, wrapped in TLS
	// unless in plaintext mode.
	ln      net.Listener
	tracked *trackingListener
	// src is the member's TLS; nil in plaintext mode.
	src *pki.Source
}

var _ raft.StreamLayer = (*raftStream)(nil)

// raftPeers is who may be on the other end of a Raft connection.
var raftPeers = pki.AllowRoles(pki.RoleMember)

// listenRaft listens on addr, which must name a host the other members
// can dial (it is advertised as is), with TLS from src (nil: plain TCP).
func listenRaft(addr string, src *pki.Source) (*raftStream, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if a, ok := ln.Addr().(*net.TCPAddr); !ok || a.IP.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("address %s is not advertisable: give a specific host", addr)
	}
	tl := &trackingListener{Listener: ln, conns: make(map[*trackedConn]struct{})}
	s := &raftStream{ln: tl, tracked: tl, src: src}
	if src != nil {
		s.ln = src.Listen(tl, raftPeers)
	}
	return s, nil
}

// Accept implements net.Listener. With TLS, the handshake happens on the
// connection's first read, in the transport's handler goroutine.
func (s *raftStream) Accept() (net.Conn, error) { return s.ln.Accept() }

// Close closes the listener and every accepted connection still open.
func (s *raftStream) Close() error { return s.tracked.Close() }

// Addr implements net.Listener: the advertised address.
func (s *raftStream) Addr() net.Addr { return s.tracked.Addr() }

// Dial implements raft.StreamLayer: with TLS, the handshake completes
// within timeout and the peer must be a member.
func (s *raftStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if s.src == nil {
		d := net.Dialer{Timeout: timeout}
		return d.Dial("tcp", string(address))
	}
	return s.src.Dial(context.Background(), string(address), timeout, raftPeers)
}

// trackingListener keeps the connections it accepted until they are
// closed, and closes those left when it is closed.
type trackingListener struct {
	net.Listener

	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	tc := &trackedConn{Conn: c, l: l}
	l.conns[tc] = struct{}{}
	return tc, nil
}

// Close closes the listener and every accepted connection still open.
func (l *trackingListener) Close() error {
	l.mu.Lock()
	l.closed = true
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	err := l.Listener.Close()
	for c := range conns {
		c.Conn.Close()
	}
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// trackedConn forgets itself when closed.
type trackedConn struct {
	net.Conn
	l *trackingListener
}

func (c *trackedConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// closeTransport closes a network transport and its stream: pooled
// outgoing connections first (so that peers' handlers end), then the
// listener and the accepted connections.
type closeTransport struct {
	tr     *raft.NetworkTransport
	stream *raftStream
}

func (c closeTransport) Close() error {
	c.tr.CloseStreams()
	err := c.tr.Close()
	if serr := c.stream.Close(); err == nil {
		err = serr
	}
	return err
}
