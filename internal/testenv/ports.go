package testenv

import (
	"net"
	"sync"
	"testing"
)

var given struct {
	mu    sync.Mutex
	ports map[int]bool
}

// FreeAddr returns a loopback address "127.0.0.1:PORT" whose port was free
// a moment ago and has not been handed out before in this process. Tests
// that pick several ports before binding any of them (a member's Raft and
// HTTP addresses, say) would otherwise get the same one twice now and then:
// the kernel may offer a port again as soon as it was closed.
func FreeAddr(t testing.TB) string {
	t.Helper()
	given.mu.Lock()
	defer given.mu.Unlock()
	if given.ports == nil {
		given.ports = make(map[int]bool)
	}
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("pick a free port: %v", err)
		}
		addr := l.Addr().(*net.TCPAddr)
		l.Close()
		if !given.ports[addr.Port] {
			given.ports[addr.Port] = true
			return addr.String()
		}
	}
	t.Fatal("pick a free port: 100 tries gave only ports handed out before")
	return ""
}
