package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Files names the three files a daemon's TLS needs.
type Files struct {
	CA, Cert, Key string
}

// DirFiles are id's files in dir: ca.crt, ROLE-NAME.crt, ROLE-NAME.key.
func DirFiles(dir string, id Identity) Files {
	return Files{CA: filepath.Join(dir, CACertFile), Cert: CertPath(dir, id), Key: KeyPath(dir, id)}
}

// material is one loaded generation of a Source's files.
type material struct {
	pair  *tls.Certificate
	leaf  *x509.Certificate
	id    Identity
	roots *x509.CertPool
}

// Source holds a daemon's certificate, key and the cluster CA, and keeps
// them current: every handshake uses the latest pair and CA that loaded
// whole. It is safe for concurrent use.
type Source struct {
	files  Files
	logger *slog.Logger
	// want, if set, is the identity the certificate must name.
	want Identity

	cur atomic.Pointer[material]
	hs  handshakes

	mu sync.Mutex
	// checked is when the files were last looked at; stamps are what they
	// looked like then.
	checked time.Time
	stamps  [3]stamp
}

// stamp is what a file looked like.
type stamp struct {
	size  int64
	mtime time.Time
	ino   uint64
}

// checkEvery is how often handshakes look at the files for a change.
const checkEvery = time.Second

// Load reads files and returns a Source serving them. If want is not
// zero, the certificate must name exactly that identity (a daemon loads
// its own). The certificate must chain to the CA file and be valid now.
func Load(files Files, want Identity, logger *slog.Logger) (*Source, error) {
	s := &Source{files: files, want: want, logger: logger.With("component", "tls")}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Identity is the identity of the loaded certificate.
func (s *Source) Identity() Identity { return s.cur.Load().id }

// NotAfter is when the loaded certificate expires.
func (s *Source) NotAfter() time.Time { return s.cur.Load().leaf.NotAfter }

// Files are the files the Source reads.
func (s *Source) Files() Files { return s.files }

// Reload reads the files now. On an error the Source keeps serving what
// it had.
func (s *Source) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloadLocked()
}

func (s *Source) reloadLocked() error {
	s.checked = time.Now()
	for i, f := range []string{s.files.CA, s.files.Cert, s.files.Key} {
		s.stamps[i] = stampOf(f)
	}
	m, err := load(s.files)
	if err != nil {
		return err
	}
	if !s.want.IsZero() && m.id != s.want {
		return fmt.Errorf("%s names %s, want %s", s.files.Cert, m.id, s.want)
	}
	if old := s.cur.Load(); old != nil && old.leaf.Equal(m.leaf) && old.roots.Equal(m.roots) {
		return nil
	}
	s.cur.Store(m)
	s.logger.Info("tls certificate loaded", "identity", m.id.String(), "not_after", m.leaf.NotAfter,
		"cert", s.files.Cert)
	return nil
}

// current returns the material to use now, re-reading the files first if
// they changed since they were last looked at more than checkEvery ago.
func (s *Source) current() *material {
	s.mu.Lock()
	if time.Since(s.checked) >= checkEvery {
		s.checked = time.Now()
		changed := false
		for i, f := range []string{s.files.CA, s.files.Cert, s.files.Key} {
			if stampOf(f) != s.stamps[i] {
				changed = true
			}
		}
		if changed {
			if err := s.reloadLocked(); err != nil {
				s.logger.Warn("tls files changed but do not load; keeping the previous certificate", "error", err)
			}
		}
	}
	s.mu.Unlock()
	return s.cur.Load()
}

func stampOf(path string) stamp {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}
	}
	return stamp{size: fi.Size(), mtime: fi.ModTime(), ino: inode(fi)}
}

func load(files Files) (*material, error) {
	caPEM, err := os.ReadFile(files.CA)
	if err != nil {
		return nil, fmt.Errorf("read cluster CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s holds no PEM certificate", files.CA)
	}
	pair, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		return nil, fmt.Errorf("load certificate %s and key %s: %w", files.Cert, files.Key, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("parse %s: %w", files.Cert, err)
		}
	}
	id, err := IdentityOf(leaf)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", files.Cert, err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("%s is not valid under the cluster CA %s: %w", files.Cert, files.CA, err)
	}
	return &material{pair: &pair, leaf: leaf, id: id, roots: roots}, nil
}

// ServerConfig is the TLS 1.3 configuration of a listener: it presents the
// Source's certificate, requires a client certificate that chains to the
// cluster CA (tls.RequireAndVerifyClientCert) and names an identity, and
// lets authorize refuse the handshake by identity (AnyIdentity for an HTTP
// API that authorizes per route).
func (s *Source) ServerConfig(authorize Authorizer) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := s.current()
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{*m.pair},
				ClientAuth:   tls.RequireAndVerifyClientCert,
				ClientCAs:    m.roots,
				NextProtos:   []string{"http/1.1"},
				VerifyConnection: func(cs tls.ConnectionState) error {
					id, err := verifiedIdentity(cs)
					if err == nil {
						err = authorize(id)
					}
					s.hs.add(SideServer, id, err)
					return err
				},
			}, nil
		},
	}
}

// ClientConfig is the TLS 1.3 configuration of a client: it presents the
// Source's certificate and accepts a server whose certificate chains to the
// cluster CA and whose identity authorize accepts. Host names are not
// checked (InsecureSkipVerify only turns off Go's host-name verification,
// which VerifyConnection replaces with the chain and identity checks).
func (s *Source) ClientConfig(authorize Authorizer) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true,
		NextProtos:         []string{"http/1.1"},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return s.current().pair, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := s.verifyServer(cs, authorize)
			s.hs.add(SideClient, id, err)
			return err
		},
	}
}

// verifyServer checks a server's chain against the cluster CA, then its
// identity with authorize.
func (s *Source) verifyServer(cs tls.ConnectionState, authorize Authorizer) (Identity, error) {
	if len(cs.PeerCertificates) == 0 {
		return Identity{}, errors.New("server sent no certificate")
	}
	opts := x509.VerifyOptions{
		Roots:         s.current().roots,
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return Identity{}, fmt.Errorf("server certificate: %w", err)
	}
	id, err := IdentityOf(cs.PeerCertificates[0])
	if err != nil {
		return Identity{}, err
	}
	return id, authorize(id)
}

// verifiedIdentity is the identity of the verified client certificate of a
// server-side handshake.
func verifiedIdentity(cs tls.ConnectionState) (Identity, error) {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return Identity{}, errors.New("client certificate not verified")
	}
	return IdentityOf(cs.VerifiedChains[0][0])
}

// PeerIdentity is the verified identity of the other end of a TLS
// connection, as a server sees it (r.TLS of an HTTP request).
func PeerIdentity(cs *tls.ConnectionState) (Identity, bool) {
	if cs == nil {
		return Identity{}, false
	}
	if len(cs.VerifiedChains) > 0 {
		id, err := verifiedIdentity(*cs)
		return id, err == nil
	}
	return Identity{}, false
}

// Transport is an HTTP transport whose connections use ClientConfig(
// authorize). Its idle connections are the caller's to close.
func (s *Source) Transport(authorize Authorizer) *http.Transport {
	return NewTransport(s.ClientConfig(authorize))
}

// NewTransport is the HTTP transport of Rodon's components with the TLS
// configuration cfg; nil is plain HTTP (--plaintext), with the same
// connection settings. It keeps up to 64 idle connections per host: a
// burst of callers that found fewer would reconnect, and pay a handshake
// each time.
func NewTransport(cfg *tls.Config) *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     cfg,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     time.Minute,
		ForceAttemptHTTP2:   false,
	}
}

// Listen wraps ln so that every accepted connection is a TLS server
// connection with ServerConfig(authorize). The handshake happens on the
// connection's first read or write, in its own goroutine, never in Accept;
// it must complete within handshakeTimeout.
func (s *Source) Listen(ln net.Listener, authorize Authorizer) net.Listener {
	return &listener{Listener: ln, cfg: s.ServerConfig(authorize)}
}

// handshakeTimeout bounds a TLS handshake on a raw listener (Listen);
// HTTP servers bound theirs with ReadHeaderTimeout.
const handshakeTimeout = 10 * time.Second

type listener struct {
	net.Listener
	cfg *tls.Config
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &handshakeConn{Conn: tls.Server(c, l.cfg)}, nil
}

// handshakeConn completes its handshake within handshakeTimeout before the
// first read or write.
type handshakeConn struct {
	*tls.Conn
	once sync.Once
	err  error
}

func (c *handshakeConn) handshake() error {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
		defer cancel()
		c.err = c.Conn.HandshakeContext(ctx)
		if c.err != nil {
			c.Conn.Close()
		}
	})
	return c.err
}

func (c *handshakeConn) Read(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *handshakeConn) Write(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// Dial dials address over TCP and completes a client handshake with
// ClientConfig(authorize) within timeout.
func (s *Source) Dial(ctx context.Context, address string, timeout time.Duration, authorize Authorizer) (*tls.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: s.ClientConfig(authorize)}
	c, err := d.DialContext(ctx, "tcp", address)
	if err != nil {
		return nil, err
	}
	return c.(*tls.Conn), nil
}

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// FindFiles finds the one pair of role in dir (ROLE-*.crt with its key),
// for a client such as schedctl that knows its role but not its name.
func FindFiles(dir string, role Role) (Files, error) {
	certs, _ := filepath.Glob(filepath.Join(dir, string(role)+"-*.crt"))
	switch len(certs) {
	case 0:
		return Files{}, fmt.Errorf("no %s certificate (%s-NAME.crt) in %s: issue one with `scheduler tls issue --role %s --name NAME --dir %s`",
			role, role, dir, role, dir)
	case 1:
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(certs[0]), string(role)+"-"), ".crt")
		return Files{CA: filepath.Join(dir, CACertFile), Cert: certs[0], Key: KeyPath(dir, Identity{Role: role, Name: name})}, nil
	}
	return Files{}, fmt.Errorf("%d %s certificates in %s (%s): name the one to use", len(certs), role, dir, strings.Join(certs, ", "))
}
