package scheduler

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/rodon-compute/rodon/internal/pki"
)

// A member's TLS: with Config.TLS its HTTP API (Run), its requests to other
// members (forwarding, joins, health) and its Raft transport (raft_stream.go)
// are mutual TLS with the member's certificate; without, it runs in
// plaintext mode, on loopback only.

// checkTLS checks that a member with TLS has its own certificate, and that
// one without (plaintext mode) listens and dials on loopback only.
func checkTLS(cfg Config) error {
	if cfg.TLS != nil {
		want := pki.Identity{Role: pki.RoleMember, Name: cfg.ID}
		if got := cfg.TLS.Identity(); got != want {
			return fmt.Errorf("tls certificate %s names %s: want %s, this member's", cfg.TLS.Files().Cert, got, want)
		}
		for _, a := range cfg.Join {
			if strings.HasPrefix(a, "http://") {
				return fmt.Errorf("join address %s: this member speaks TLS: use https:// or HOST:PORT", a)
			}
		}
		return nil
	}
	for _, a := range []struct{ name, addr string }{{"http address", cfg.HTTPAddr}, {"raft address", cfg.RaftAddr}} {
		if !isLoopback(a.addr) {
			return fmt.Errorf("%s %s is not on loopback: plaintext mode (no TLS, no authentication) is for tests on one machine; give the member its certificate (Config.TLS)", a.name, a.addr)
		}
	}
	for _, a := range cfg.Join {
		if strings.HasPrefix(a, "https://") {
			return fmt.Errorf("join address %s: this member has no certificate (plaintext mode): use http:// or HOST:PORT", a)
		}
		if !isLoopback(a) {
			return fmt.Errorf("join address %s is not on loopback: plaintext mode is for tests on one machine; give the member its certificate (Config.TLS)", a)
		}
	}
	return nil
}

// isLoopback reports whether addr (HOST:PORT or a URL) names a loopback
// host: 127.0.0.0/8, ::1 or localhost.
func isLoopback(addr string) bool {
	if _, rest, ok := strings.Cut(addr, "://"); ok {
		addr, _, _ = strings.Cut(rest, "/")
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && a.Unmap().IsLoopback()
}

// memberTransport is the transport of a member's own requests to other
// members: with TLS it presents the member's certificate and accepts only
// a member on the other end.
func memberTransport(src *pki.Source) *http.Transport {
	if src == nil {
		return pki.NewTransport(nil)
	}
	return src.Transport(pki.AllowRoles(pki.RoleMember))
}

// scheme is the URL scheme of the member's HTTP API and of other members':
// https with TLS, http in plaintext mode.
func (s *Server) scheme() string {
	if s.cfg.TLS != nil {
		return "https"
	}
	return "http"
}

// memberURL is the URL of addr, a member's HTTP address (HOST:PORT) or
// URL (a --join address).
func (s *Server) memberURL(addr string) string {
	if strings.Contains(addr, "://") {
		return strings.TrimSuffix(addr, "/")
	}
	return s.scheme() + "://" + addr
}
