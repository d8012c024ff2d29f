package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net/http"
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
		return fmt.Errorf("%w: --scheduler is required (or set RODON_SCHEDULER)", cli.ErrUsage)
	}
	if _, err := pki.NewIdentity(pki.RoleGateway, f.name); err != nil {
		return fmt.Errorf("%w: --name: %v", cli.ErrUsage, err)
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
	addrs, err := cli.SchedulerURLs(f.scheduler, "--scheduler", "the gateway", !f.tls.Plaintext)
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
		return nil, nil, fmt.Errorf("%w: --scheduler: %v", cli.ErrUsage, err)
	}
	return c, src, nil
}
