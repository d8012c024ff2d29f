package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/gateway/relay"
)

// Config configures a Gateway.
type Config struct {
	// Listen is the HOST:PORT the API and the page are served on. Run
	// refuses an address that is not loopback when TLS is nil.
	Listen string
	// TLS, if not nil, is the configuration of the public listener:
	// browsers and API clients then speak HTTPS (any certificate, such as
	// a public one). Nil is plain HTTP, for loopback.
	TLS *tls.Config
	// Collectors are exported on /metrics besides the gateway's own (the
	// cluster certificate's handshake counts).
	Collectors []prometheus.Collector
	// Name is the gateway's name, as its certificate names it
	// (gateway/NAME): the addresses it registers are recorded under it.
	Name string
	// Registrar, if not nil, is given the gateway's addresses when Run
	// starts and every RegisterInterval after, so that node agents deny
	// them to sandboxes.
	Registrar Registrar
	// RegisterInterval is how often the addresses are registered again.
	RegisterInterval time.Duration
	// Site is the origin browsers load the page from
	// ("http://127.0.0.1:7300"): cookie-authenticated requests must come
	// from it, and the cookie is Secure when it is https.
	Site string
	// DataDir holds caches only (the state is in the scheduler).
	DataDir string
	// OwnerEmail is the first owner's email, created by Run when the
	// scheduler has no owner yet.
	OwnerEmail string
	// AccountName names the first account, created with that owner;
	// empty is "default".
	AccountName string
	// BootstrapOut receives the first owner's one-time password when Run
	// creates it; nil is os.Stderr.
	BootstrapOut io.Writer
	// SessionTTL is how long a sign-in lasts.
	SessionTTL time.Duration
	// DriverInterval is how often the Driver looks at every unfinished run
	// when nothing woke it earlier.
	DriverInterval time.Duration
	// Page is the web page's files (web.FS()); nil when it is not built.
	Page fs.FS
	// Stream serves GET /v1/steps/{id}/stream once authorized; nil answers
	// 501 (the relay is not wired in).
	Stream StreamServer
	// Output reads a step's output from its node (the relay's upstream),
	// for the answer of an agent's Bash call; nil answers without it.
	Output OutputSource
	// Quotas bound the live runs and queued steps of each workspace and
	// each principal.
	Quotas Quotas
	// SignIn bounds sign-in attempts.
	SignIn SignInLimits
	// Timeouts are the HTTP server's.
	Timeouts Timeouts
	// RunRetention is how long a run record is kept after the run was
	// created (a run not settled yet is kept until it is).
	RunRetention time.Duration
	// MaintenanceInterval is how often the maintenance pass runs
	// (retention, expired sign-ins, quota counters).
	MaintenanceInterval time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Reload: every value received calls each of Reloaders (main sends
	// SIGHUP here). Nil: no reloads.
	Reload <-chan os.Signal
	// Reloaders re-read certificate files on Reload (reload.go).
	Reloaders []Reloader
	// MaxFileSize bounds one file written through the gateway (PUT
	// files, an upload's file, a proxied blob).
	MaxFileSize int64
	// ClusterListen is the HOST:PORT of the cluster listener, where node
	// agents fetch their steps' secrets (secret_delivery.go); it is served
	// only when ClusterTLS is set.
	ClusterListen string
	// ClusterTLS is the cluster listener's mutual TLS (the gateway's
	// cluster certificate, client certificates of the cluster CA):
	// pki.Source.ServerConfig. Nil serves no cluster listener.
	ClusterTLS *tls.Config
	// ClusterURL is the cluster listener's URL as nodes reach it
	// (https://HOST:PORT), put into the requests of steps with secrets.
	ClusterURL string
	// ApprovalTTL is how long a person's approval of a proposal lets the
	// run's next step apply it (gates.go); zero is DefaultApprovalTTL.
	ApprovalTTL time.Duration
	// RootKeyFile is the root key of the tenants' secrets (a Tink keyset,
	// internal/secretbox), reread when it changes. Without the file the
	// secrets routes answer 503 and the rest of the gateway works. It
	// must not be in DataDir or anything else that is backed up.
	RootKeyFile string
}

// Bounds of the settings (the flags of `gateway serve` check them).
const (
	MinRunRetention = time.Second
	MaxRunRetention = 10 * 365 * 24 * time.Hour
	// DefaultRunRetention is SPEC's 90 days.
	DefaultRunRetention = 90 * 24 * time.Hour
)

// Timeouts are the HTTP server's timeouts (docs/GATEWAY.md, "Limits").
// Read and Write bound each request but a stream's (a websocket keeps its
// own deadlines: pings and the relay's write wait).
type Timeouts struct {
	// ReadHeader bounds reading a request's headers; Read reading the
	// whole request (headers and body); Write the time from the end of
	// the headers to the end of the answer.
	ReadHeader, Read, Write time.Duration
	// Idle is how long a kept-alive connection waits for its next request.
	Idle time.Duration
}

// DefaultTimeouts and MaxTimeouts are the defaults and the largest values
// of `gateway serve`'s --http-* flags.
var (
	DefaultTimeouts = Timeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Write: 60 * time.Second, Idle: 2 * time.Minute}
	MaxTimeouts     = Timeouts{ReadHeader: time.Minute, Read: 10 * time.Minute, Write: 10 * time.Minute, Idle: time.Hour}
)

// Check reports the first timeout outside (0, max], naming its flag.
func (t Timeouts) Check() error {
	for _, c := range []struct {
		flag   string
		v, max time.Duration
	}{
		{"http-read-header-timeout", t.ReadHeader, MaxTimeouts.ReadHeader},
		{"http-read-timeout", t.Read, MaxTimeouts.Read},
		{"http-write-timeout", t.Write, MaxTimeouts.Write},
		{"http-idle-timeout", t.Idle, MaxTimeouts.Idle},
	} {
		if c.v <= 0 || c.v > c.max {
			return fmt.Errorf("%s %v: want more than 0 and at most %v", c.flag, c.v, c.max)
		}
	}
	return nil
}

// DefaultConfig returns the defaults of `gateway serve`.
func DefaultConfig() Config {
	return Config{
		Listen:              "127.0.0.1:7300",
		Site:                "http://127.0.0.1:7300",
		Name:                "gateway",
		RegisterInterval:    time.Minute,
		OwnerEmail:          "owner@rodon.local",
		AccountName:         defaultTenantName,
		SessionTTL:          12 * time.Hour,
		DriverInterval:      2 * time.Second,
		Quotas:              DefaultQuotas,
		SignIn:              DefaultSignInLimits,
		Timeouts:            DefaultTimeouts,
		RunRetention:        DefaultRunRetention,
		MaintenanceInterval: time.Minute,
		MaxFileSize:         DefaultMaxFileSize,
		ApprovalTTL:         DefaultApprovalTTL,
		RootKeyFile:         DefaultRootKeyFile,
		ClusterListen:       "127.0.0.1:7301",
		ClusterURL:          "https://127.0.0.1:7301",
	}
}

// StreamServer relays a step's stream to a client (*relay.Relay). The
// gateway calls it after it authorized the request: st.Interactive says
// whether the client may send input (an editor or more, on a tty step),
// st.Check authorizes the caller again while the stream is open, and the
// terminal's input is audited through st.Opened and st.Closed.
type StreamServer interface {
	ServeStream(w http.ResponseWriter, r *http.Request, st relay.Stream)
}

// Gateway serves the API. Build it with New, serve with Run (or mount
// Handler and run Driver yourself).
type Gateway struct {
	cfg Config
	// store is raw scoped by the context's tenant (tenant.go): what
	// handlers use. raw is for the loops that scan across tenants
	// (migrate.go, the Driver, maintenance).
	store *tenantStore
	raw   Store
	steps Steps
	// files is the scheduler's workspace API: steps, when it serves one.
	files   Files
	log     *slog.Logger
	now     func() time.Time
	metrics *metrics
	driver  *Driver
	nodes   *nodeNames
	routes  []route
	handler http.Handler
	// grants issues and verifies runs' grants (grantkeys.go).
	grants grants
	// signinByEmail and signinByAddr rate-limit sign-in attempts.
	signinByEmail *limiter
	signinByAddr  *limiter
	// hashing holds a token per password check running
	// (SignInLimits.Hashing).
	hashing      chan struct{}
	hashWait     time.Duration
	secureCookie bool
	// maintMu guards signinCursor: where the maintenance pass's sweep of
	// sign-ins goes on.
	maintMu      sync.Mutex
	signinCursor string
	// libMu guards lib, each tenant's library record once known.
	libMu sync.Mutex
	lib   map[string]libraryRecord
	// contents caches file contents by digest for the file tools
	// (tools_env.go).
	contents contentCache
	// rootKey is cfg.RootKeyFile (rootkey.go).
	rootKey *rootKey
}

// New checks cfg and wires a gateway on store and steps (both usually the
// scheduler client). Steps that also implement Files (the scheduler
// client does) serve the files API; without, its routes answer 501. It
// starts nothing.
func New(cfg Config, store Store, steps Steps, logger *slog.Logger) (*Gateway, error) {
	if store == nil || steps == nil {
		return nil, errors.New("gateway: a store and a step API are required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ApprovalTTL <= 0 {
		cfg.ApprovalTTL = DefaultApprovalTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.AccountName == "" {
		cfg.AccountName = defaultTenantName
	}
	if err := checkName("account-name", cfg.AccountName); err != nil {
		return nil, fmt.Errorf("account name %q: want 1 to 100 characters without control characters", cfg.AccountName)
	}
	if cfg.BootstrapOut == nil {
		cfg.BootstrapOut = os.Stderr
	}
	if cfg.SessionTTL <= 0 {
		return nil, fmt.Errorf("session ttl %v: want a positive duration", cfg.SessionTTL)
	}
	if cfg.DriverInterval <= 0 {
		return nil, fmt.Errorf("driver interval %v: want a positive duration", cfg.DriverInterval)
	}
	if err := cfg.Quotas.Check(); err != nil {
		return nil, err
	}
	if err := cfg.SignIn.Check(); err != nil {
		return nil, err
	}
	if err := cfg.Timeouts.Check(); err != nil {
		return nil, err
	}
	if cfg.RunRetention < MinRunRetention || cfg.RunRetention > MaxRunRetention {
		return nil, fmt.Errorf("run retention %v: want %v to %v", cfg.RunRetention, MinRunRetention, MaxRunRetention)
	}
	if cfg.MaxFileSize <= 0 || cfg.MaxFileSize > MaxMaxFileSize {
		return nil, fmt.Errorf("max file size %d: want 1 byte to %d", cfg.MaxFileSize, int64(MaxMaxFileSize))
	}
	if cfg.MaintenanceInterval <= 0 {
		return nil, fmt.Errorf("maintenance interval %v: want a positive duration", cfg.MaintenanceInterval)
	}
	u, err := url.Parse(cfg.Site)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("site %q: want an origin such as http://127.0.0.1:7300", cfg.Site)
	}
	cfg.Site = u.Scheme + "://" + u.Host
	if cfg.TLS != nil && u.Scheme != "https" {
		return nil, fmt.Errorf("site %q: the gateway serves HTTPS, so browsers load it from https://", cfg.Site)
	}
	if cfg.Registrar != nil && cfg.RegisterInterval <= 0 {
		return nil, fmt.Errorf("register interval %v: want a positive duration", cfg.RegisterInterval)
	}
	if cfg.Registrar != nil && cfg.Name == "" {
		return nil, errors.New("gateway name: required to register the gateway's addresses")
	}
	if cfg.ClusterURL != "" {
		if err := cluster.ValidateGatewayURL(cfg.ClusterURL); err != nil {
			return nil, fmt.Errorf("cluster url: %w", err)
		}
	}
	if cfg.ClusterTLS != nil && cfg.ClusterListen == "" {
		return nil, errors.New("cluster listen: required with the cluster TLS (HOST:PORT, such as 127.0.0.1:7301)")
	}
	if cfg.OwnerEmail != "" {
		if err := checkEmail(cfg.OwnerEmail); err != nil {
			return nil, fmt.Errorf("owner email: %w", err)
		}
	}
	g := &Gateway{
		cfg:           cfg,
		store:         newTenantStore(store),
		raw:           store,
		steps:         steps,
		log:           logger.With("component", "gateway"),
		now:           func() time.Time { return cfg.Now().UTC() },
		signinByEmail: newLimiter(cfg.SignIn.PerEmailBurst, cfg.SignIn.PerEmailEvery, cfg.Now),
		signinByAddr:  newLimiter(cfg.SignIn.PerAddressBurst, cfg.SignIn.PerAddressEvery, cfg.Now),
		hashing:       make(chan struct{}, cfg.SignIn.Hashing),
		hashWait:      hashWait,
		secureCookie:  u.Scheme == "https",
		rootKey:       &rootKey{path: cfg.RootKeyFile},
	}
	g.files, _ = steps.(Files)
	g.metrics = newMetrics(cfg.Collectors...)
	g.nodes = &nodeNames{steps: steps}
	g.grants = newJWSGrants(store, g.now, cfg.Name)
	g.driver = newDriver(g.store, steps, g.nodes, g.libraryID, cfg.DriverInterval, g.now, logger)
	g.driver.clusterURL = cfg.ClusterURL
	g.routes = g.routeTable()
	g.handler = g.buildHandler()
	return g, nil
}

// Handler returns the gateway's HTTP handler.
func (g *Gateway) Handler() http.Handler { return g.handler }

// Driver returns the run driver Run runs.
func (g *Gateway) Driver() *Driver { return g.driver }

// Run serves on cfg.Listen, runs the Driver and, when the scheduler has no
// owner yet, creates one. It blocks until ctx ends, then shuts the server
// down (waiting up to 10 s for requests in flight) and returns nil.
func (g *Gateway) Run(ctx context.Context) error {
	if g.cfg.DataDir != "" {
		if err := os.MkdirAll(g.cfg.DataDir, 0o700); err != nil {
			return fmt.Errorf("create data dir: %w", err)
		}
	}
	ln, err := net.Listen("tcp", g.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", g.cfg.Listen, err)
	}
	if g.cfg.TLS == nil && !isLoopback(ln.Addr()) {
		ln.Close()
		return fmt.Errorf("listen on %s: %w", ln.Addr(), ErrPlainPublic)
	}
	return g.Serve(ctx, ln)
}

// ErrPlainPublic is returned by Run for a listen address that is not
// loopback without TLS: browsers would send passwords and session cookies
// in the clear.
var ErrPlainPublic = errors.New("not a loopback address, and plain HTTP would carry passwords and session cookies in the clear: give the gateway a certificate")

// isLoopback reports whether a is a loopback TCP address.
func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.AddrPort().Addr().Unmap().IsLoopback()
}

// Serve is Run on a listener it closes; with cfg.TLS it serves HTTPS on
// it. With cfg.ClusterTLS it also listens on cfg.ClusterListen and serves
// the cluster listener there (secret_delivery.go) until ctx ends.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	addr := ln.Addr()
	var cln net.Listener
	if g.cfg.ClusterTLS != nil {
		var err error
		if cln, err = net.Listen("tcp", g.cfg.ClusterListen); err != nil {
			ln.Close()
			return fmt.Errorf("listen on %s (--cluster-listen): %w", g.cfg.ClusterListen, err)
		}
	}
	if g.cfg.TLS != nil {
		ln = tls.NewListener(ln, g.cfg.TLS)
	}
	srv := &http.Server{
		Handler:           g.handler,
		ReadHeaderTimeout: g.cfg.Timeouts.ReadHeader,
		IdleTimeout:       g.cfg.Timeouts.Idle,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	if err := g.migrateLoop(ctx); err != nil {
		ln.Close()
		return nil // ctx ended first
	}
	g.log.Info("gateway serving", "address", ln.Addr().String(), "site", g.cfg.Site)
	eg, ctx := errgroup.WithContext(ctx)
	eg.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve http: %w", err)
		}
		return nil
	})
	eg.Go(func() error {
		<-ctx.Done()
		// Drain with a fresh context: ctx is already cancelled.
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
		}
		return nil
	})
	if cln != nil {
		eg.Go(func() error { return g.serveCluster(ctx, cln) })
	}
	eg.Go(func() error { return g.driver.Run(ctx) })
	eg.Go(func() error { g.maintainLoop(ctx); return nil })
	eg.Go(func() error { g.reloadLoop(ctx); return nil })
	if g.cfg.Registrar != nil {
		eg.Go(func() error {
			g.registerLoop(ctx, addr)
			return nil
		})
	}
	if g.cfg.OwnerEmail != "" {
		eg.Go(func() error {
			g.bootstrapLoop(ctx)
			return nil
		})
	}
	return eg.Wait()
}

// migrateLoop moves the records of a cluster from before tenants
// (migrate.go), retrying while the scheduler does not answer; it returns
// ctx's error if ctx ends first.
func (g *Gateway) migrateLoop(ctx context.Context) error {
	backoff := 500 * time.Millisecond
	for {
		err := migrate(ctx, g.raw, g.now())
		if err == nil {
			return nil
		}
		g.log.Warn("move records into the default account", "error", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// bootstrapLoop creates the first owner, retrying while the scheduler does
// not answer, and prints its password once.
func (g *Gateway) bootstrapLoop(ctx context.Context) {
	backoff := 500 * time.Millisecond
	for {
		res, err := BootstrapNamed(ctx, g.raw, g.cfg.OwnerEmail, g.cfg.AccountName, g.now())
		if err == nil {
			if res.Created {
				g.log.Info("first owner created", "account_id", res.AccountID, "email", res.Email)
				fmt.Fprintf(g.cfg.BootstrapOut, "rodon gateway: created the owner %s with the one-time password %s\n"+
					"sign in at %s; this password is not shown again.\n", res.Email, res.Password, g.cfg.Site)
			}
			return
		}
		g.log.Warn("create the first owner", "error", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// maxHeaderBytes bounds a request's headers.
const maxHeaderBytes = 64 << 10

// deadlines bounds reading each request and writing its answer
// (Timeouts.Read and Write, from the end of its headers), but a step
// stream's: the websocket keeps its own (pings, the relay's write wait).
func (g *Gateway) deadlines(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isStreamPath(r.URL.Path) {
			rc := http.NewResponseController(w)
			now := time.Now()
			// Not every ResponseWriter has deadlines (httptest's): then
			// there is nothing to bound.
			rc.SetReadDeadline(now.Add(g.cfg.Timeouts.Read))
			rc.SetWriteDeadline(now.Add(g.cfg.Timeouts.Write))
			if isTransferPath(r.URL.Path) {
				// A file's bytes may take longer than a request: the
				// deadlines move on with each read and write, so a
				// transfer that makes progress goes on and one that
				// stalls is cut.
				w = &progressWriter{ResponseWriter: w, rc: rc, d: g.cfg.Timeouts.Write}
				r.Body = &progressBody{ReadCloser: r.Body, rc: rc, d: g.cfg.Timeouts.Read}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// isStreamPath reports whether path is a step stream's,
// /v1/steps/{id}/stream.
func isStreamPath(path string) bool {
	rest, ok := strings.CutPrefix(path, "/v1/steps/")
	id, ok2 := strings.CutSuffix(rest, "/stream")
	return ok && ok2 && id != "" && !strings.Contains(id, "/")
}

// isTransferPath reports whether path moves a file's bytes: a workspace's
// files or archive, or a proxied blob.
func isTransferPath(path string) bool {
	if strings.HasPrefix(path, "/v1/blobs/") {
		return true
	}
	rest, ok := strings.CutPrefix(path, "/v1/workspaces/")
	_, tail, _ := strings.Cut(rest, "/")
	return ok && (strings.HasPrefix(tail, "files/") || tail == "archive")
}

// progressBody moves the read deadline on with each read.
type progressBody struct {
	io.ReadCloser
	rc *http.ResponseController
	d  time.Duration
}

func (b *progressBody) Read(p []byte) (int, error) {
	b.rc.SetReadDeadline(time.Now().Add(b.d))
	return b.ReadCloser.Read(p)
}

// progressWriter moves the write deadline on with each write.
type progressWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (w *progressWriter) Write(p []byte) (int, error) {
	w.rc.SetWriteDeadline(time.Now().Add(w.d))
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *progressWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// securityHeaders sets the headers every answer carries.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			hd.Set("Cache-Control", "no-store")
		}
		h.ServeHTTP(w, r)
	})
}
