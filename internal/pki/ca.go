package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/rodon-compute/rodon/internal/atomicfile"
)

// File names in a CA or TLS directory.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// Validity defaults.
const (
	// DefaultCAValidity is how long a new cluster CA is valid.
	DefaultCAValidity = 10 * 365 * 24 * time.Hour
	// DefaultLeafValidity is how long an issued certificate is valid:
	// short, because rotation needs no restart (re-issue, and the daemon
	// picks the new files up).
	DefaultLeafValidity = 30 * 24 * time.Hour
	// MaxLeafValidity bounds IssueOptions.ValidFor.
	MaxLeafValidity = 398 * 24 * time.Hour
)

// CertPath and KeyPath are where dir keeps id's pair: ROLE-NAME.crt/.key.
func CertPath(dir string, id Identity) string {
	return filepath.Join(dir, string(id.Role)+"-"+id.Name+".crt")
}

// KeyPath is the private key beside CertPath.
func KeyPath(dir string, id Identity) string {
	return filepath.Join(dir, string(id.Role)+"-"+id.Name+".key")
}

// ErrExists is returned by InitCA for a directory that already has a CA.
var ErrExists = errors.New("a cluster CA already exists")

// InitCA creates a new cluster CA in dir (ca.crt, and ca.key readable by
// its owner only). It refuses to replace an existing one.
func InitCA(dir string, validFor time.Duration) error {
	if validFor <= 0 {
		validFor = DefaultCAValidity
	}
	if _, err := os.Stat(filepath.Join(dir, CACertFile)); err == nil {
		return fmt.Errorf("%w in %s", ErrExists, dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Rodon cluster CA", Organization: []string{"Rodon"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validFor),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return fmt.Errorf("create CA certificate: %w", err)
	}
	if err := writeKey(filepath.Join(dir, CAKeyFile), key); err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, CACertFile), pemBlock("CERTIFICATE", der), 0o644)
}

// CA is a loaded cluster CA that issues certificates.
type CA struct {
	cert *x509.Certificate
	key  crypto.Signer
	pem  []byte
}

// LoadCA reads the CA in dir.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, fmt.Errorf("read CA certificate: %w (create one with `scheduler tls init --dir %s`)", err, dir)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("read CA key: %w: issue certificates where the CA was made", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA in %s: %w", dir, err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("%s is not a CA certificate", filepath.Join(dir, CACertFile))
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("CA key in %s cannot sign", dir)
	}
	return &CA{cert: cert, key: signer, pem: certPEM}, nil
}

// CertPEM is the CA certificate, PEM-encoded.
func (ca *CA) CertPEM() []byte { return ca.pem }

// IssueOptions are the optional parts of a certificate.
type IssueOptions struct {
	// ValidFor is the certificate's lifetime; zero is
	// DefaultLeafValidity, at most MaxLeafValidity.
	ValidFor time.Duration
	// Hosts are DNS names and IP addresses to add as SANs, for clients
	// that verify host names (browsers reaching a gateway); Rodon's own
	// components verify the identity URI only.
	Hosts []string
	// Now is the issue time; zero is the current time (tests set it to
	// make expired certificates).
	Now time.Time
}

// Issue makes a key and a certificate for id, both PEM-encoded.
func (ca *CA) Issue(id Identity, opts IssueOptions) (certPEM, keyPEM []byte, err error) {
	if _, err := NewIdentity(id.Role, id.Name); err != nil {
		return nil, nil, err
	}
	validFor := opts.ValidFor
	switch {
	case validFor == 0:
		validFor = DefaultLeafValidity
	case validFor < 0 || validFor > MaxLeafValidity:
		return nil, nil, fmt.Errorf("validity %v: want a positive duration of at most %v", validFor, MaxLeafValidity)
	}
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	notAfter := now.Add(validFor)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: id.String(), Organization: []string{"Rodon"}},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         nil,
	}
	tmpl.URIs = append(tmpl.URIs, id.URI())
	for _, h := range opts.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate for %s: %w", id, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode key: %w", err)
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", keyDER), nil
}

// IssueFiles issues a certificate for id and writes it to dir as
// ROLE-NAME.crt and ROLE-NAME.key (owner-only), key first, each replaced
// atomically, so that a running daemon picks up the new pair whole.
func (ca *CA) IssueFiles(dir string, id Identity, opts IssueOptions) (certPath string, err error) {
	certPEM, keyPEM, err := ca.Issue(id, opts)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	if err := atomicfile.Write(KeyPath(dir, id), keyPEM, 0o600); err != nil {
		return "", err
	}
	certPath = CertPath(dir, id)
	if err := atomicfile.Write(certPath, certPEM, 0o644); err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, CACertFile)); errors.Is(err, os.ErrNotExist) {
		if err := atomicfile.Write(filepath.Join(dir, CACertFile), ca.pem, 0o644); err != nil {
			return "", err
		}
	}
	return certPath, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("pki: read random serial: %v", err))
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode key: %w", err)
	}
	return atomicfile.Write(path, pemBlock("PRIVATE KEY", der), 0o600)
}
