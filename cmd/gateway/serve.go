package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rodon-compute/rodon/gateway"
	"github.com/rodon-compute/rodon/gateway/relay"
	"github.com/rodon-compute/rodon/internal/cli"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/web"
)

// serveFlags are the flags of `gateway serve`.
type serveFlags struct {
	cluster    clusterFlags
	listen     string
	dataDir    string
	site       string
	httpsCert  string
	httpsKey   string
	ownerEmail string
	sessionTTL time.Duration
	logLevel   string
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	d := gateway.DefaultConfig()
	f.cluster.register(fs)
	fs.StringVar(&f.listen, "listen", d.Listen, "HOST:PORT to serve the API and the page on; "+
		"an address that is not loopback needs --https-cert and --https-key")
	fs.StringVar(&f.dataDir, "data-dir", "", "directory for caches (required; the state is in the scheduler)")
	fs.StringVar(&f.site, "site", "", "origin browsers load the page from (default http://LISTEN, or https://LISTEN with --https-cert)")
	fs.StringVar(&f.httpsCert, "https-cert", "", "certificate (PEM, chain first) browsers and API clients see: serve HTTPS "+
		"(a public certificate, or `scheduler tls issue --role gateway --name NAME --host HOST`)")
	fs.StringVar(&f.httpsKey, "https-key", "", "private key (PEM) of --https-cert")
	fs.StringVar(&f.ownerEmail, "owner-email", d.OwnerEmail, "email of the owner created on first start when the scheduler has none")
	fs.DurationVar(&f.sessionTTL, "session-ttl", d.SessionTTL, "how long a sign-in lasts")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
}

// config checks the flags and returns the gateway's configuration and the
// public listener's certificate (nil for plain HTTP); every error names
// the flag at fault.
func (f *serveFlags) config(logger *slog.Logger) (gateway.Config, *publicCert, error) {
	c := gateway.DefaultConfig()
	if err := f.cluster.check(); err != nil {
		return c, nil, err
	}
	if strings.TrimSpace(f.dataDir) == "" {
		return c, nil, fmt.Errorf("%w: --data-dir is required", errUsage)
	}
	host, port, err := net.SplitHostPort(f.listen)
	if err != nil || port == "" {
		return c, nil, fmt.Errorf("%w: --listen %q: want HOST:PORT", errUsage, f.listen)
	}
	if f.sessionTTL <= 0 {
		return c, nil, fmt.Errorf("%w: --session-ttl %v: want a positive duration such as 12h", errUsage, f.sessionTTL)
	}
	var pub *publicCert
	switch {
	case f.httpsCert != "" && f.httpsKey == "":
		return c, nil, fmt.Errorf("%w: --https-key is required with --https-cert", errUsage)
	case f.httpsCert == "" && f.httpsKey != "":
		return c, nil, fmt.Errorf("%w: --https-cert is required with --https-key", errUsage)
	case f.httpsCert != "":
		if pub, err = loadPublicCert(f.httpsCert, f.httpsKey, time.Now(), logger); err != nil {
			return c, nil, fmt.Errorf("%w: --https-cert: %v", errUsage, err)
		}
		c.TLS = pub.config()
	case !cli.IsLoopback(f.listen):
		return c, nil, fmt.Errorf("%w: --listen %s is not a loopback address: browsers would send passwords and session cookies "+
			"over plain HTTP; give the gateway a certificate with --https-cert FILE --https-key FILE "+
			"(a public one, or `scheduler tls issue --role gateway --name %s --host HOST`), or listen on 127.0.0.1",
			errUsage, f.listen, f.cluster.name)
	}
	c.Listen, c.DataDir, c.OwnerEmail, c.SessionTTL = f.listen, f.dataDir, f.ownerEmail, f.sessionTTL
	c.Name = f.cluster.name
	c.Site = strings.TrimSuffix(f.site, "/")
	switch {
	case c.Site != "" && pub != nil && !strings.HasPrefix(c.Site, "https://"):
		return c, nil, fmt.Errorf("%w: --site %s: the gateway serves HTTPS (--https-cert), so browsers load it from https://", errUsage, c.Site)
	case c.Site == "" && pub != nil:
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = pub.siteHost()
		}
		c.Site = "https://" + net.JoinHostPort(host, port)
	case c.Site == "":
		// Plain HTTP: a loopback host, as given.
		c.Site = "http://" + net.JoinHostPort(host, port)
	}
	return c, pub, nil
}

func serveCmd(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("gateway serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f serveFlags
	f.register(fs)
	if err := cli.ParseFlagsOnly(fs, args, "serve"); err != nil {
		return err
	}
	logger, err := cli.Logger(stderr, f.logLevel)
	if err != nil {
		return err
	}
	// Signals first: a SIGTERM during start-up stops the gateway cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serve(ctx, &f, logger, stderr)
}

// serve is `gateway serve` after its flags: it runs the gateway until ctx
// ends.
func serve(ctx context.Context, f *serveFlags, logger *slog.Logger, stderr io.Writer) error {
	cfg, pub, err := f.config(logger)
	if err != nil {
		return err
	}
	sched, src, err := f.cluster.connect(logger)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	hupCtx, stopHUP := context.WithCancel(ctx)
	defer stopHUP()
	wg.Go(func() { reloadOnHUP(hupCtx, src, pub, logger) })

	cfg.BootstrapOut = stderr
	cfg.Registrar = sched
	if web.Built() {
		cfg.Page = web.FS()
	}
	// The gateway checks the Origin of cookie-authenticated streams before
	// the relay sees them; the relay checks again against the same site.
	rcfg := relay.DefaultConfig()
	rcfg.CheckOrigin = func(r *http.Request) bool {
		o := r.Header.Get("Origin")
		return o == "" || o == cfg.Site
	}
	// Event messages and exit reasons are scrubbed as in step objects; g
	// is set before the gateway serves.
	var g *gateway.Gateway
	rcfg.Rewrite = func(ctx context.Context, line []byte) []byte { return g.ScrubFrame(ctx, line) }
	// Streams and input to TTY steps go to the node agent that runs them,
	// verified as that node's agent.
	agents := relay.NewAgents(src)
	defer agents.CloseIdleConnections()
	rcfg.Stdin, rcfg.Resize = agentInput(sched.StreamLocation, agents)
	rl, err := relay.New(rcfg, relay.NewAgentUpstream(sched.StreamLocation, agents), logger)
	if err != nil {
		return err
	}
	cfg.Stream = rl
	if src != nil {
		cfg.Collectors = append(cfg.Collectors, src.Collector())
	}
	g, err = gateway.New(cfg, sched, sched, logger)
	if err != nil {
		return err
	}
	return g.Run(ctx)
}

// reloadOnHUP re-reads the cluster certificate and the public one on
// SIGHUP until ctx ends (both are also re-read when their files change).
func reloadOnHUP(ctx context.Context, src *pki.Source, pub *publicCert, logger *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		if src != nil {
			if err := src.Reload(); err != nil {
				logger.Error("reload the cluster certificate on SIGHUP; keeping the previous one", "error", err)
			}
		}
		if pub != nil {
			if err := pub.reload(); err != nil {
				logger.Error("reload --https-cert on SIGHUP; keeping the previous one", "error", err)
			}
		}
	}
}

// publicTLSVersion is the least TLS version of the public listener:
// browsers and API clients of every kind, not only Rodon's own components
// (which speak TLS 1.3 to each other).
const publicTLSVersion = tls.VersionTLS12
