package cli

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"

	"github.com/rodon-compute/rodon/internal/pki"
)

// DefaultTLSDir is where scripts/up and scripts/install-node put the
// cluster CA certificate and this machine's pairs; RODON_TLS_DIR overrides
// it.
const DefaultTLSDir = "/etc/rodon/tls"

// TLSDir is RODON_TLS_DIR, or DefaultTLSDir.
func TLSDir() string {
	if d := os.Getenv("RODON_TLS_DIR"); d != "" {
		return d
	}
	return DefaultTLSDir
}

// TLSFlags are the TLS flags of every daemon and of schedctl.
type TLSFlags struct {
	// Dir holds ca.crt and ROLE-NAME.crt/.key (--tls-dir).
	Dir string
	// CA, Cert and Key override the files of Dir (--tls-ca, --tls-cert,
	// --tls-key).
	CA, Cert, Key string
	// Plaintext turns TLS and authentication off, on loopback only
	// (--plaintext).
	Plaintext bool
}

// Register adds the flags to fs.
func (f *TLSFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Dir, "tls-dir", TLSDir(), "directory of the cluster CA (ca.crt) and this identity's ROLE-NAME.crt and .key (env RODON_TLS_DIR)")
	fs.StringVar(&f.CA, "tls-ca", "", "cluster CA certificate (default TLS-DIR/ca.crt)")
	fs.StringVar(&f.Cert, "tls-cert", "", "this identity's certificate (default TLS-DIR/ROLE-NAME.crt)")
	fs.StringVar(&f.Key, "tls-key", "", "this identity's private key (default TLS-DIR/ROLE-NAME.key)")
	fs.BoolVar(&f.Plaintext, "plaintext", false, "no TLS and no authentication: loopback addresses only, for tests of one component")
}

// Source loads the credentials of id (or, with a zero id, the one pair of
// role in the directory) and returns them. With --plaintext it returns nil
// once it checked that every address in addrs (HOST:PORT or URL) is on
// loopback. Every error names the flag to change.
func (f *TLSFlags) Source(role pki.Role, id pki.Identity, logger *slog.Logger, addrs ...string) (*pki.Source, error) {
	if f.Plaintext {
		if f.Cert != "" || f.Key != "" || f.CA != "" {
			return nil, fmt.Errorf("%w: --plaintext and --tls-cert/--tls-key/--tls-ca are exclusive", ErrUsage)
		}
		for _, a := range addrs {
			if !IsLoopback(a) {
				return nil, fmt.Errorf("%w: --plaintext: %s is not a loopback address: plain HTTP is for tests on one machine; "+
					"give this daemon its certificate (--tls-dir) instead", ErrUsage, a)
			}
		}
		return nil, nil
	}
	var files pki.Files
	switch {
	case !id.IsZero():
		files = pki.DirFiles(f.Dir, id)
	case f.Cert == "":
		var err error
		if files, err = pki.FindFiles(f.Dir, role); err != nil {
			return nil, fmt.Errorf("%w: --tls-dir: %v", ErrUsage, err)
		}
	}
	if f.CA != "" {
		files.CA = f.CA
	} else if files.CA == "" {
		files.CA = pki.DirFiles(f.Dir, id).CA
	}
	if f.Cert != "" {
		files.Cert = f.Cert
	}
	if f.Key != "" {
		files.Key = f.Key
	}
	src, err := pki.Load(files, id, logger)
	if err != nil {
		hint := fmt.Sprintf("create it with `scheduler tls issue --role %s --name NAME --dir %s`", role, f.Dir)
		if !id.IsZero() {
			hint = fmt.Sprintf("create it with `scheduler tls issue --role %s --name %s --dir %s`", id.Role, id.Name, f.Dir)
		}
		return nil, fmt.Errorf("%w: --tls-dir %s: %v; %s (the CA: `scheduler tls init --dir %s`), or pass --plaintext for a test on loopback",
			ErrUsage, f.Dir, err, hint, f.Dir)
	}
	if src.Identity().Role != role {
		return nil, fmt.Errorf("%w: --tls-cert %s names %s: want a %s certificate", ErrUsage, files.Cert, src.Identity(), role)
	}
	return src, nil
}

// IsLoopback reports whether addr (HOST:PORT, a URL, or a bare host) names
// a loopback host: 127.0.0.0/8, ::1 or localhost.
func IsLoopback(addr string) bool {
	host := addr
	if strings.Contains(addr, "://") {
		u, err := url.Parse(addr)
		if err != nil {
			return false
		}
		host = u.Hostname()
	} else if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && a.Unmap().IsLoopback()
}

// SchedulerURLs splits a comma-separated list of scheduler members and
// gives each the scheme of the mode: a bare HOST:PORT is https:// with TLS,
// http:// with --plaintext. An explicit scheme must match the mode: plain
// HTTP would carry the caller's requests unauthenticated, and https
// without a certificate cannot be answered. flag names the flag for
// errors, prog the program ("agentd speaks TLS to the scheduler").
func SchedulerURLs(list, flag, prog string, useTLS bool) ([]string, error) {
	var out []string
	for a := range strings.SplitSeq(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		scheme, rest, ok := strings.Cut(a, "://")
		switch {
		case !ok && useTLS:
			a = "https://" + a
		case !ok:
			a = "http://" + a
		case scheme == "http" && useTLS:
			return nil, fmt.Errorf("%w: %s %s is plain HTTP: write https://%s (%s speaks TLS to the scheduler), "+
				"or pass --plaintext for a scheduler started with --plaintext on loopback", ErrUsage, flag, a, rest, prog)
		case scheme == "https" && !useTLS:
			return nil, fmt.Errorf("%w: %s %s is HTTPS, but --plaintext leaves %s without a certificate: "+
				"drop --plaintext, or write http://%s", ErrUsage, flag, a, prog, rest)
		}
		if u, err := url.Parse(a); err != nil || u.Hostname() == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("%w: %s %q: want https://HOST:PORT", ErrUsage, flag, a)
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s %q: want URL[,URL...]", ErrUsage, flag, list)
	}
	return out, nil
}
