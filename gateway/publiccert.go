package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// PublicCert is the certificate of the gateway's public listener
// (--https-cert, --https-key). Handshakes use the pair that last loaded
// whole; the files are re-read when they change (looked at, at
// handshakes, at most once a second) and on reload (SIGHUP), so a renewed
// certificate is served without a restart. It is safe for concurrent use.
type PublicCert struct {
	certFile, keyFile string
	logger            *slog.Logger

	mu sync.Mutex
	// cur is the pair served; leaf its parsed certificate.
	cur  *tls.Certificate
	leaf *x509.Certificate
	// checked is when the files were last looked at, and stamps what they
	// looked like then.
	checked time.Time
	stamps  [2]fileStamp
}

// fileStamp is what a file looked like.
type fileStamp struct {
	size  int64
	mtime time.Time
}

func stampOf(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{size: fi.Size(), mtime: fi.ModTime()}
}

// LoadPublicCert loads the pair and checks it is valid at now.
func LoadPublicCert(certFile, keyFile string, now time.Time, logger *slog.Logger) (*PublicCert, error) {
	p := &PublicCert{certFile: certFile, keyFile: keyFile, logger: logger.With("component", "https")}
	if err := p.Reload(); err != nil {
		return nil, err
	}
	if now.After(p.leaf.NotAfter) || now.Before(p.leaf.NotBefore) {
		return nil, fmt.Errorf("%s is valid from %s to %s, not now", certFile, p.leaf.NotBefore.Format(time.RFC3339), p.leaf.NotAfter.Format(time.RFC3339))
	}
	return p, nil
}

// Reload reads the files now; on an error the previous pair stays.
func (p *PublicCert) Reload() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reloadLocked()
}

func (p *PublicCert) reloadLocked() error {
	p.checked = time.Now()
	p.stamps = [2]fileStamp{stampOf(p.certFile), stampOf(p.keyFile)}
	pair, err := tls.LoadX509KeyPair(p.certFile, p.keyFile)
	if err != nil {
		return fmt.Errorf("load %s and %s: %w", p.certFile, p.keyFile, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Errorf("parse %s: %w", p.certFile, err)
	}
	if p.leaf != nil && p.leaf.Equal(leaf) {
		return nil
	}
	p.cur, p.leaf = &pair, leaf
	p.logger.Info("https certificate loaded", "cert", p.certFile, "dns_names", leaf.DNSNames,
		"not_after", leaf.NotAfter)
	return nil
}

// get is tls.Config.GetCertificate.
func (p *PublicCert) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.checked) >= time.Second {
		p.checked = time.Now()
		if [2]fileStamp{stampOf(p.certFile), stampOf(p.keyFile)} != p.stamps {
			if err := p.reloadLocked(); err != nil {
				p.logger.Warn("--https-cert changed but does not load; keeping the previous certificate", "error", err)
			}
		}
	}
	return p.cur, nil
}

// TLSConfig is the public listener's TLS configuration. HTTP/1.1 only: the
// stream is a websocket upgrade.
func (p *PublicCert) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     publicTLSVersion,
		GetCertificate: p.get,
		NextProtos:     []string{"http/1.1"},
	}
}

// SiteHost is the host browsers reach a wildcard listener at: the
// certificate's first DNS name, else its first IP address, else
// 127.0.0.1.
func (p *PublicCert) SiteHost() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case len(p.leaf.DNSNames) > 0:
		return p.leaf.DNSNames[0]
	case len(p.leaf.IPAddresses) > 0:
		return p.leaf.IPAddresses[0].String()
	}
	return "127.0.0.1"
}

// publicTLSVersion is the least TLS version of the public listener:
// browsers and API clients of every kind, not only Rodon's own components
// (which speak TLS 1.3 to each other).
const publicTLSVersion = tls.VersionTLS12
