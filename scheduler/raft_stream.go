package scheduler

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// tcpStream is Raft's TCP stream layer, as raft.TCPStreamLayer, but it
// keeps the connections it accepted and closes them when it is closed.
// hashicorp/raft's transport closes only its listener: a connection a peer
// keeps in its pool would otherwise hold a handler goroutine until the peer
// closes it.
type tcpStream struct {
	ln net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

var _ raft.StreamLayer = (*tcpStream)(nil)

// listenRaft listens on addr, which must name a host the other members
// can dial (it is advertised as is).
func listenRaft(addr string) (*tcpStream, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if a, ok := ln.Addr().(*net.TCPAddr); !ok || a.IP.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("address %s is not advertisable: give a specific host", addr)
	}
	return &tcpStream{ln: ln, conns: make(map[net.Conn]struct{})}, nil
}

// Accept implements net.Listener.
func (s *tcpStream) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	tc := &trackedConn{Conn: c, s: s}
	s.conns[tc] = struct{}{}
	return tc, nil
}

// Close closes the listener and every accepted connection still open.
func (s *tcpStream) Close() error {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	err := s.ln.Close()
	for c := range conns {
		c.(*trackedConn).Conn.Close()
	}
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Addr implements net.Listener: the advertised address.
func (s *tcpStream) Addr() net.Addr { return s.ln.Addr() }

// Dial implements raft.StreamLayer.
func (s *tcpStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.Dial("tcp", string(address))
}

// trackedConn forgets itself when closed.
type trackedConn struct {
	net.Conn
	s *tcpStream
}

func (c *trackedConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
	return c.Conn.Close()
}

// closeTransport closes a network transport and its stream: pooled
// outgoing connections first (so that peers' handlers end), then the
// listener and the accepted connections.
type closeTransport struct {
	tr     *raft.NetworkTransport
	stream *tcpStream
}

func (c closeTransport) Close() error {
	c.tr.CloseStreams()
	err := c.tr.Close()
	if serr := c.stream.Close(); err == nil {
		err = serr
	}
	return err
}
