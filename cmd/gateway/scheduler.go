package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/internal/cli"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// clusterFlags are how `gateway serve` and `gateway bootstrap` reach the
// cluster: the scheduler's members, the gateway's name and its TLS files.
type clusterFlags struct {
	scheduler string
	name      string
	tls       cli.TLSFlags
	// retryFor is client.Options.RetryFor (not a flag: tests shorten it).
	retryFor time.Duration
}

func (f *clusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.scheduler, "scheduler", os.Getenv("RODON_SCHEDULER"), "URL[,URL...] of scheduler members (required; default $RODON_SCHEDULER); "+
		"a bare HOST:PORT is https, or http with --plaintext")
	fs.StringVar(&f.name, "name", "gateway", "this gateway's name: its certificate is gateway-NAME.crt in --tls-dir, naming gateway/NAME")
	f.tls.Register(fs)
}

// check checks the flags that need no file.
func (f *clusterFlags) check() error {
	if strings.TrimSpace(f.scheduler) == "" {
		return fmt.Errorf("%w: --scheduler is required (or set RODON_SCHEDULER)", errUsage)
	}
	if _, err := pki.NewIdentity(pki.RoleGateway, f.name); err != nil {
		return fmt.Errorf("%w: --name: %v", errUsage, err)
	}
	return nil
}

// connect loads the gateway's certificate (nil with --plaintext) and
// returns the scheduler client, which verifies every member's certificate
// names a member.
func (f *clusterFlags) connect(logger *slog.Logger) (*client.Client, *pki.Source, error) {
	if err := f.check(); err != nil {
		return nil, nil, err
	}
	addrs, err := schedulerURLs(f.scheduler, !f.tls.Plaintext)
	if err != nil {
		return nil, nil, err
	}
	id, _ := pki.NewIdentity(pki.RoleGateway, f.name)
	src, err := f.tls.Source(pki.RoleGateway, id, logger, addrs...)
	if err != nil {
		return nil, nil, err
	}
	opts := client.Options{UserAgent: "rodon-gateway", RetryFor: f.retryFor}
	if src != nil {
		opts.HTTPClient = &http.Client{Transport: src.Transport(pki.AllowRoles(pki.RoleMember))}
	}
	c, err := client.New(strings.Join(addrs, ","), opts)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: --scheduler: %v", errUsage, err)
	}
	return c, src, nil
}

// schedulerURLs splits the comma-separated --scheduler list and gives
// each a scheme: a bare HOST:PORT is https with TLS, http without. An
// explicit scheme must match: plain HTTP is refused with TLS on (it would
// carry the gateway's requests unauthenticated), https without a
// certificate to present.
func schedulerURLs(list string, useTLS bool) ([]string, error) {
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
			return nil, fmt.Errorf("%w: --scheduler %s is plain HTTP: write https://%s (the gateway speaks TLS to the scheduler), "+
				"or pass --plaintext for a scheduler started with --plaintext on loopback", errUsage, a, rest)
		case scheme == "https" && !useTLS:
			return nil, fmt.Errorf("%w: --scheduler %s is HTTPS, but --plaintext leaves the gateway without a certificate: "+
				"drop --plaintext, or write http://%s", errUsage, a, rest)
		}
		if u, err := url.Parse(a); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("%w: --scheduler %q: want https://HOST:PORT", errUsage, a)
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: --scheduler is required (or set RODON_SCHEDULER)", errUsage)
	}
	return out, nil
}
