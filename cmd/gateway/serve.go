package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rodon-compute/rodon/gateway"
	"github.com/rodon-compute/rodon/gateway/relay"
	"github.com/rodon-compute/rodon/internal/cli"
	"github.com/rodon-compute/rodon/web"
)

// serveFlags are the flags of `gateway serve`.
type serveFlags struct {
	scheduler  string
	listen     string
	dataDir    string
	site       string
	ownerEmail string
	sessionTTL time.Duration
	logLevel   string
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	d := gateway.DefaultConfig()
	fs.StringVar(&f.scheduler, "scheduler", os.Getenv("RODON_SCHEDULER"), "URL[,URL...] of scheduler members (required; default $RODON_SCHEDULER)")
	fs.StringVar(&f.listen, "listen", d.Listen, "HOST:PORT to serve the API and the page on")
	fs.StringVar(&f.dataDir, "data-dir", "", "directory for caches (required; the state is in the scheduler)")
	fs.StringVar(&f.site, "site", "", "origin browsers load the page from (default http://LISTEN)")
	fs.StringVar(&f.ownerEmail, "owner-email", d.OwnerEmail, "email of the owner created on first start when the scheduler has none")
	fs.DurationVar(&f.sessionTTL, "session-ttl", d.SessionTTL, "how long a sign-in lasts")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
}

// config checks the flags and returns the gateway's configuration; every
// error names the flag at fault.
func (f *serveFlags) config() (gateway.Config, error) {
	c := gateway.DefaultConfig()
	if strings.TrimSpace(f.scheduler) == "" {
		return c, fmt.Errorf("%w: --scheduler is required (or set RODON_SCHEDULER)", errUsage)
	}
	if strings.TrimSpace(f.dataDir) == "" {
		return c, fmt.Errorf("%w: --data-dir is required", errUsage)
	}
	host, port, err := net.SplitHostPort(f.listen)
	if err != nil || port == "" {
		return c, fmt.Errorf("%w: --listen %q: want HOST:PORT", errUsage, f.listen)
	}
	if f.sessionTTL <= 0 {
		return c, fmt.Errorf("%w: --session-ttl %v: want a positive duration such as 12h", errUsage, f.sessionTTL)
	}
	c.Listen, c.DataDir, c.OwnerEmail, c.SessionTTL = f.listen, f.dataDir, f.ownerEmail, f.sessionTTL
	c.Site = strings.TrimSuffix(f.site, "/")
	if c.Site == "" {
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = "127.0.0.1"
		}
		c.Site = "http://" + net.JoinHostPort(host, port)
	}
	return c, nil
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
	cfg, err := f.config()
	if err != nil {
		return err
	}
	// Signals first: a SIGTERM during start-up stops the gateway cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	store, steps, sched, err := newScheduler(f.scheduler)
	if err != nil {
		return err
	}
	cfg.BootstrapOut = stderr
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
	// Input to TTY steps goes to the node agent that runs them.
	rcfg.Stdin, rcfg.Resize = agentInput(sched.StreamURL, &http.Client{})
	rl, err := relay.New(rcfg, relay.NewAgentUpstream(sched.StreamURL, &http.Client{}), logger)
	if err != nil {
		return err
	}
	cfg.Stream = rl
	g, err = gateway.New(cfg, store, steps, logger)
	if err != nil {
		return err
	}
	return g.Run(ctx)
}
