package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/gateway"
	"github.com/rodon-compute/rodon/gateway/relay"
	"github.com/rodon-compute/rodon/internal/cli"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/size"
	"github.com/rodon-compute/rodon/web"
)

// serveFlags are the flags of `gateway serve`.
type serveFlags struct {
	cluster clusterFlags
	listen  string
	// clusterListen and clusterURL: the cluster listener, where node
	// agents fetch their steps' secrets over mutual TLS.
	clusterListen string
	clusterURL    string
	dataDir       string
	site          string
	httpsCert     string
	httpsKey      string
	ownerEmail    string
	ownerAcct     string
	sessionTTL    time.Duration
	logLevel      string
	rootKey       string
	settings      settings
}

// settings are the bounds of `gateway serve` (docs/GATEWAY.md, "Limits"):
// each has a default and a range its flag checks.
type settings struct {
	quotas              gateway.Quotas
	signIn              gateway.SignInLimits
	timeouts            gateway.Timeouts
	runRetention        time.Duration
	approvalTTL         time.Duration
	maintenanceInterval time.Duration
	streamRecheck       time.Duration
	maxFileSize         sizeFlag
}

// sizeFlag is a byte size flag ("512Mi", "1GiB").
type sizeFlag = size.Flag

// defaultSettings are the flags' defaults.
func defaultSettings() settings {
	d := gateway.DefaultConfig()
	return settings{quotas: d.Quotas, signIn: d.SignIn, timeouts: d.Timeouts, runRetention: d.RunRetention, approvalTTL: d.ApprovalTTL,
		maintenanceInterval: d.MaintenanceInterval, streamRecheck: relay.DefaultConfig().Recheck, maxFileSize: sizeFlag(d.MaxFileSize)}
}

// Bounds of the maintenance interval.
const (
	minMaintenanceInterval = time.Second
	maxMaintenanceInterval = 24 * time.Hour
)

func (s *settings) register(fs *flag.FlagSet) {
	*s = defaultSettings()
	q, mq := &s.quotas, gateway.MaxQuotas
	fs.IntVar(&q.LiveRunsPerWorkspace, "quota-live-runs-per-workspace", q.LiveRunsPerWorkspace,
		fmt.Sprintf("runs not settled yet one workspace may have (1-%d); a run past it is refused with 429 quota_exceeded", mq.LiveRunsPerWorkspace))
	fs.IntVar(&q.LiveRunsPerPrincipal, "quota-live-runs-per-principal", q.LiveRunsPerPrincipal,
		fmt.Sprintf("runs not settled yet one account or API key may have (1-%d)", mq.LiveRunsPerPrincipal))
	fs.IntVar(&q.QueuedStepsPerWorkspace, "quota-queued-steps-per-workspace", q.QueuedStepsPerWorkspace,
		fmt.Sprintf("steps no node has started yet one workspace may have when it starts a run (1-%d)", mq.QueuedStepsPerWorkspace))
	fs.IntVar(&q.QueuedStepsPerPrincipal, "quota-queued-steps-per-principal", q.QueuedStepsPerPrincipal,
		fmt.Sprintf("steps no node has started yet one account or API key may have when it starts a run (1-%d)", mq.QueuedStepsPerPrincipal))
	l, ml := &s.signIn, gateway.MaxSignInLimits
	fs.IntVar(&l.PerAddressBurst, "signin-per-address-burst", l.PerAddressBurst,
		fmt.Sprintf("sign-in attempts one client (an IPv4 address or an IPv6 /64) may make at once (1-%d)", ml.PerAddressBurst))
	fs.DurationVar(&l.PerAddressEvery, "signin-per-address-every", l.PerAddressEvery,
		fmt.Sprintf("one more sign-in attempt per client this often (%v-%v)", gateway.MinSignInEvery, ml.PerAddressEvery))
	fs.IntVar(&l.PerEmailBurst, "signin-per-email-burst", l.PerEmailBurst,
		fmt.Sprintf("sign-in attempts one email may get at once (1-%d)", ml.PerEmailBurst))
	fs.DurationVar(&l.PerEmailEvery, "signin-per-email-every", l.PerEmailEvery,
		fmt.Sprintf("one more sign-in attempt per email this often (%v-%v)", gateway.MinSignInEvery, ml.PerEmailEvery))
	fs.IntVar(&l.Hashing, "signin-hashing", l.Hashing,
		fmt.Sprintf("password checks (argon2id, 19 MiB each) running at once over all clients (1-%d); past it a sign-in waits up to 2s, then 503", ml.Hashing))
	t, mt := &s.timeouts, gateway.MaxTimeouts
	fs.DurationVar(&t.ReadHeader, "http-read-header-timeout", t.ReadHeader, fmt.Sprintf("time to read a request's headers (at most %v)", mt.ReadHeader))
	fs.DurationVar(&t.Read, "http-read-timeout", t.Read, fmt.Sprintf("time to read a request's body, streams excepted; a file transfer's, between two reads (at most %v)", mt.Read))
	fs.DurationVar(&t.Write, "http-write-timeout", t.Write, fmt.Sprintf("time to write an answer, streams excepted; a file transfer's, between two writes (at most %v)", mt.Write))
	fs.DurationVar(&t.Idle, "http-idle-timeout", t.Idle, fmt.Sprintf("how long a kept-alive connection waits for its next request (at most %v)", mt.Idle))
	fs.DurationVar(&s.runRetention, "run-retention", s.runRetention,
		fmt.Sprintf("how long run records are kept after the run started (%v-%v; a run not settled is kept until it is)", gateway.MinRunRetention, gateway.MaxRunRetention))
	fs.DurationVar(&s.approvalTTL, "approval-ttl", s.approvalTTL,
		fmt.Sprintf("how long a person's approval of an agent run's proposal lets the run's next step apply it (%v-%v)", gateway.MinApprovalTTL, gateway.MaxApprovalTTL))
	fs.DurationVar(&s.maintenanceInterval, "maintenance-interval", s.maintenanceInterval,
		fmt.Sprintf("how often the maintenance pass runs: retention, expired sign-ins, quota counters (%v-%v)", minMaintenanceInterval, maxMaintenanceInterval))
	fs.Var(&s.maxFileSize, "max-file-size",
		fmt.Sprintf("largest file one write through the gateway may carry: PUT files, an upload's file, a proxied blob (1 byte to %s); "+
			"more is refused with 413", size.Format(gateway.MaxMaxFileSize)))
	fs.DurationVar(&s.streamRecheck, "stream-recheck", s.streamRecheck,
		fmt.Sprintf("how often an open stream's caller is authorized again: a deleted or changed member's stream closes within it (at most %v)", relay.MaxRecheck))
}

// check checks the settings, naming the flag at fault.
func (s *settings) check() error {
	for _, err := range []error{s.quotas.Check(), s.signIn.Check(), s.timeouts.Check()} {
		if err != nil {
			return fmt.Errorf("%w: --%v", cli.ErrUsage, err)
		}
	}
	switch {
	case s.runRetention < gateway.MinRunRetention || s.runRetention > gateway.MaxRunRetention:
		return fmt.Errorf("%w: --run-retention %v: want %v to %v", cli.ErrUsage, s.runRetention, gateway.MinRunRetention, gateway.MaxRunRetention)
	case s.approvalTTL < gateway.MinApprovalTTL || s.approvalTTL > gateway.MaxApprovalTTL:
		return fmt.Errorf("%w: --approval-ttl %v: want %v to %v", cli.ErrUsage, s.approvalTTL, gateway.MinApprovalTTL, gateway.MaxApprovalTTL)
	case s.maintenanceInterval < minMaintenanceInterval || s.maintenanceInterval > maxMaintenanceInterval:
		return fmt.Errorf("%w: --maintenance-interval %v: want %v to %v", cli.ErrUsage, s.maintenanceInterval, minMaintenanceInterval, maxMaintenanceInterval)
	case s.maxFileSize <= 0 || s.maxFileSize > gateway.MaxMaxFileSize:
		return fmt.Errorf("%w: --max-file-size %s: want 1 byte to %s", cli.ErrUsage, s.maxFileSize.String(), size.Format(gateway.MaxMaxFileSize))
	case s.streamRecheck <= 0 || s.streamRecheck > relay.MaxRecheck:
		return fmt.Errorf("%w: --stream-recheck %v: want more than 0 and at most %v", cli.ErrUsage, s.streamRecheck, relay.MaxRecheck)
	}
	return nil
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	d := gateway.DefaultConfig()
	f.cluster.register(fs)
	fs.StringVar(&f.listen, "listen", d.Listen, "HOST:PORT to serve the API and the page on; "+
		"an address that is not loopback needs --https-cert and --https-key")
	fs.StringVar(&f.clusterListen, "cluster-listen", d.ClusterListen, "HOST:PORT of the cluster listener, where node agents fetch "+
		"their steps' secrets (mutual TLS with the cluster CA only; not served with --plaintext)")
	fs.StringVar(&f.clusterURL, "cluster-url", d.ClusterURL, "https://HOST:PORT at which nodes reach --cluster-listen")
	fs.StringVar(&f.dataDir, "data-dir", "", "directory for caches (required; the state is in the scheduler)")
	fs.StringVar(&f.site, "site", "", "origin browsers load the page from (default http://LISTEN, or https://LISTEN with --https-cert)")
	fs.StringVar(&f.httpsCert, "https-cert", "", "certificate (PEM, chain first) browsers and API clients see: serve HTTPS "+
		"(a public certificate, or `scheduler tls issue --role gateway --name NAME --host HOST`)")
	fs.StringVar(&f.httpsKey, "https-key", "", "private key (PEM) of --https-cert")
	fs.StringVar(&f.ownerEmail, "owner-email", d.OwnerEmail, "email of the owner created on first start when the scheduler has none")
	fs.StringVar(&f.ownerAcct, "account-name", d.AccountName, "name of the first account, created with that owner")
	fs.DurationVar(&f.sessionTTL, "session-ttl", d.SessionTTL, "how long a sign-in lasts")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	rootKeyFlag(fs, &f.rootKey)
	f.settings.register(fs)
}

// config checks the flags and returns the gateway's configuration and the
// public listener's certificate (nil for plain HTTP); every error names
// the flag at fault.
func (f *serveFlags) config(logger *slog.Logger) (gateway.Config, *gateway.PublicCert, error) {
	c := gateway.DefaultConfig()
	if err := f.cluster.check(); err != nil {
		return c, nil, err
	}
	if strings.TrimSpace(f.dataDir) == "" {
		return c, nil, fmt.Errorf("%w: --data-dir is required", cli.ErrUsage)
	}
	host, port, err := net.SplitHostPort(f.listen)
	if err != nil || port == "" {
		return c, nil, fmt.Errorf("%w: --listen %q: want HOST:PORT", cli.ErrUsage, f.listen)
	}
	if h, p, err := net.SplitHostPort(f.clusterListen); err != nil || p == "" {
		return c, nil, fmt.Errorf("%w: --cluster-listen %q: want HOST:PORT", cli.ErrUsage, f.clusterListen)
	} else if h == host && p == port {
		return c, nil, fmt.Errorf("%w: --cluster-listen %s: the same address as --listen; give the cluster listener its own port", cli.ErrUsage, f.clusterListen)
	}
	if err := cluster.ValidateGatewayURL(f.clusterURL); err != nil {
		return c, nil, fmt.Errorf("%w: --cluster-url: %v", cli.ErrUsage, err)
	}
	c.ClusterListen, c.ClusterURL = f.clusterListen, f.clusterURL
	if f.sessionTTL <= 0 {
		return c, nil, fmt.Errorf("%w: --session-ttl %v: want a positive duration such as 12h", cli.ErrUsage, f.sessionTTL)
	}
	if err := f.settings.check(); err != nil {
		return c, nil, err
	}
	st := f.settings
	c.Quotas, c.SignIn, c.Timeouts, c.RunRetention, c.MaintenanceInterval = st.quotas, st.signIn, st.timeouts, st.runRetention, st.maintenanceInterval
	c.MaxFileSize, c.ApprovalTTL = int64(st.maxFileSize), st.approvalTTL
	var pub *gateway.PublicCert
	switch {
	case f.httpsCert != "" && f.httpsKey == "":
		return c, nil, fmt.Errorf("%w: --https-key is required with --https-cert", cli.ErrUsage)
	case f.httpsCert == "" && f.httpsKey != "":
		return c, nil, fmt.Errorf("%w: --https-cert is required with --https-key", cli.ErrUsage)
	case f.httpsCert != "":
		if pub, err = gateway.LoadPublicCert(f.httpsCert, f.httpsKey, time.Now(), logger); err != nil {
			return c, nil, fmt.Errorf("%w: --https-cert: %v", cli.ErrUsage, err)
		}
		c.TLS = pub.TLSConfig()
	case !cli.IsLoopback(f.listen):
		return c, nil, fmt.Errorf("%w: --listen %s is not a loopback address: browsers would send passwords and session cookies "+
			"over plain HTTP; give the gateway a certificate with --https-cert FILE --https-key FILE "+
			"(a public one, or `scheduler tls issue --role gateway --name %s --host HOST`), or listen on 127.0.0.1",
			cli.ErrUsage, f.listen, f.cluster.name)
	}
	c.Listen, c.DataDir, c.OwnerEmail, c.SessionTTL = f.listen, f.dataDir, f.ownerEmail, f.sessionTTL
	c.AccountName = f.ownerAcct
	if f.rootKey != "" {
		c.RootKeyFile = f.rootKey
	}
	if err := checkRootKeyFile(c.RootKeyFile, c.DataDir); err != nil {
		return c, nil, err
	}
	c.Name = f.cluster.name
	c.Site = strings.TrimSuffix(f.site, "/")
	switch {
	case c.Site != "" && pub != nil && !strings.HasPrefix(c.Site, "https://"):
		return c, nil, fmt.Errorf("%w: --site %s: the gateway serves HTTPS (--https-cert), so browsers load it from https://", cli.ErrUsage, c.Site)
	case c.Site == "" && pub != nil:
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = pub.SiteHost()
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
	// Signals first: a SIGTERM during start-up stops the gateway cleanly,
	// and a SIGHUP (which reloads the certificates) does not kill it.
	ctx, hup, stop := cli.Signals()
	defer stop()
	return serve(ctx, &f, hup, logger, stderr)
}

// serve is `gateway serve` after its flags: it runs the gateway until ctx
// ends; every value of hup reloads the certificates.
func serve(ctx context.Context, f *serveFlags, hup <-chan os.Signal, logger *slog.Logger, stderr io.Writer) error {
	cfg, pub, err := f.config(logger)
	if err != nil {
		return err
	}
	sched, src, err := f.cluster.connect(logger)
	if err != nil {
		return err
	}
	cfg.Reload = hup
	if src != nil {
		cfg.Reloaders = append(cfg.Reloaders, gateway.Reloader{What: "the cluster certificate", Reload: src.Reload})
		// The cluster listener: any identity of the cluster CA gets
		// through the handshake, and its route says who may.
		cfg.ClusterTLS = src.ServerConfig(pki.AnyIdentity)
	}
	if pub != nil {
		cfg.Reloaders = append(cfg.Reloaders, gateway.Reloader{What: "--https-cert", Reload: pub.Reload})
	}
	cfg.BootstrapOut = stderr
	cfg.Registrar = sched
	if web.Built() {
		cfg.Page = web.FS()
	}
	// The gateway checks the Origin of cookie-authenticated streams before
	// the relay sees them; the relay checks again against the same site.
	rcfg := relay.DefaultConfig()
	rcfg.Recheck = f.settings.streamRecheck
	rcfg.Metrics = relay.NewMetrics()
	cfg.Collectors = append(cfg.Collectors, rcfg.Metrics.Collectors()...)
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
	rcfg.Stdin, rcfg.Resize = relay.AgentInput(sched.StreamLocation, agents)
	up := relay.NewAgentUpstream(sched.StreamLocation, agents)
	rl, err := relay.New(rcfg, up, logger)
	if err != nil {
		return err
	}
	cfg.Stream = rl
	// An agent's Bash call answers with its step's output, read the same
	// way.
	cfg.Output = up
	if src != nil {
		cfg.Collectors = append(cfg.Collectors, src.Collector())
	}
	g, err = gateway.New(cfg, sched, sched, logger)
	if err != nil {
		return err
	}
	return g.Run(ctx)
}
