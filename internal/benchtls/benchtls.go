// Package benchtls gives the benchmarks in bench/ the two ways their
// daemons and clients can talk, so that one run measures both: mutual TLS
// under a cluster CA the benchmark makes in a temporary directory (as an
// operator would, with `scheduler tls init`), and plaintext on loopback
// (--plaintext everywhere), the baseline TLS is compared against.
//
// Both modes use the same environment-value key (the scheduler seals with
// it either way) and clients with the same connection settings (those of
// pki.Source.Transport), so that what differs between them is TLS alone.
package benchtls

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/rodon-compute/rodon/internal/envseal"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// Mode is one way of talking. The zero Mode is plaintext without an env
// key file; Setup returns the two modes a benchmark compares.
type Mode struct {
	// Dir is the TLS directory (ca.crt, ca.key, env-key.json and the
	// pairs Issue writes); empty in plaintext mode.
	Dir string
	// EnvKey is the env key file the scheduler members load (--env-key),
	// the same file in both modes.
	EnvKey string

	ca *pki.CA
}

// Setup makes the cluster CA and the env key in dir with `scheduler tls
// init` (binDir/scheduler) and returns the mutual-TLS mode and the
// plaintext one that shares its env key.
func Setup(binDir, dir string) (tlsMode, plain Mode, err error) {
	out, err := exec.Command(filepath.Join(binDir, "scheduler"), "tls", "init", "--dir", dir).CombinedOutput()
	if err != nil {
		return Mode{}, Mode{}, fmt.Errorf("scheduler tls init --dir %s: %w: %s", dir, err, out)
	}
	ca, err := pki.LoadCA(dir)
	if err != nil {
		return Mode{}, Mode{}, err
	}
	key := filepath.Join(dir, envseal.KeyFile)
	return Mode{Dir: dir, EnvKey: key, ca: ca}, Mode{EnvKey: key}, nil
}

// TLS reports whether m is mutual TLS.
func (m Mode) TLS() bool { return m.Dir != "" }

// String is "mutual TLS" or "plaintext".
func (m Mode) String() string {
	if m.TLS() {
		return "mutual TLS"
	}
	return "plaintext"
}

// Short is "tls" or "plain", for node ids and file names.
func (m Mode) Short() string {
	if m.TLS() {
		return "tls"
	}
	return "plain"
}

// Issue writes a pair for each identity to Dir (nothing in plaintext
// mode). Hosts are added as SANs to every pair (for the gateway's public
// listener, which browsers verify by host name).
func (m Mode) Issue(ids []pki.Identity, hosts ...string) error {
	if !m.TLS() {
		return nil
	}
	for _, id := range ids {
		if _, err := m.ca.IssueFiles(m.Dir, id, pki.IssueOptions{Hosts: hosts}); err != nil {
			return fmt.Errorf("issue %s: %w", id, err)
		}
	}
	return nil
}

// Flags are the TLS flags of a daemon or of schedctl: --tls-dir DIR, or
// --plaintext.
func (m Mode) Flags() []string {
	if m.TLS() {
		return []string{"--tls-dir", m.Dir}
	}
	return []string{"--plaintext"}
}

// SchedulerFlags are Flags and the env key, for `scheduler serve`.
func (m Mode) SchedulerFlags() []string {
	f := m.Flags()
	if m.EnvKey != "" {
		f = append(f, "--env-key", m.EnvKey)
	}
	return f
}

// URL is hostport's base URL: https:// with TLS, http:// without.
func (m Mode) URL(hostport string) string {
	if m.TLS() {
		return "https://" + hostport
	}
	return "http://" + hostport
}

// Env is the environment of a schedctl command run in this mode: the
// process's own, with RODON_TLS_DIR set to Dir (dropped in plaintext
// mode, where Flags gives --plaintext) and extra appended.
func (m Mode) Env(extra ...string) []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "RODON_TLS_DIR=") {
			env = append(env, e)
		}
	}
	if m.TLS() {
		env = append(env, "RODON_TLS_DIR="+m.Dir)
	}
	return append(env, extra...)
}

// Source loads id's pair from Dir; nil in plaintext mode.
func (m Mode) Source(id pki.Identity) (*pki.Source, error) {
	if !m.TLS() {
		return nil, nil
	}
	return pki.Load(pki.DirFiles(m.Dir, id), id, slog.New(slog.DiscardHandler))
}

// Client is a scheduler client acting as id (issued before), with opts
// (whose TLS and HTTPClient it sets). In plaintext mode its transport has
// the connection settings of the TLS one, without TLS.
func (m Mode) Client(addrs string, id pki.Identity, opts client.Options) (*client.Client, error) {
	src, err := m.Source(id)
	if err != nil {
		return nil, err
	}
	if src != nil {
		opts.TLS, opts.HTTPClient = src, nil
	} else {
		opts.HTTPClient = &http.Client{Transport: plainTransport()}
	}
	return client.New(addrs, opts)
}

// Transport is an HTTP transport acting as id and accepting only a
// server that authorize accepts (pki.Source.Transport); in plaintext mode
// one with the same connection settings.
func (m Mode) Transport(id pki.Identity, authorize pki.Authorizer) (*http.Transport, error) {
	src, err := m.Source(id)
	if err != nil || src == nil {
		return plainTransport(), err
	}
	return src.Transport(authorize), nil
}

// plainTransport has the settings of pki.Source.Transport, without TLS.
func plainTransport() *http.Transport { return pki.NewTransport(nil) }

// PublicTLS is the client configuration for a listener whose certificate
// the cluster CA issued and that verifies no client, such as the
// gateway's public one: the CA as the only root, host names checked as a
// browser checks them. Nil in plaintext mode.
func (m Mode) PublicTLS() (*tls.Config, error) {
	if !m.TLS() {
		return nil, nil
	}
	file := filepath.Join(m.Dir, pki.CACertFile)
	pemBytes, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("no certificate in %s", file)
	}
	return &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
}
