package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	icli "github.com/rodon-compute/rodon/internal/cli"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/stepfollow"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// headerTimeout bounds the wait for an answer's headers, long polls
// (which answer within their wait) included.
const headerTimeout = 2 * time.Minute

// conn is how schedctl reaches the cluster, set up on first use: the
// scheduler's member URLs, the client of its requests, and the agents'
// clients for step streams.
type conn struct {
	addrs  []string
	hc     *http.Client
	agents *stepfollow.Agents
}

// connect sets up c.conn from the flags and the environment: the
// scheduler named by --addr, else $RODON_SCHEDULER, else defaultAddr;
// with TLS, the operator certificate of --tls-dir (or --tls-cert), and a
// client that accepts only scheduler members.
func (c *cli) connect() (*conn, error) {
	if c.conn != nil {
		return c.conn, nil
	}
	g := c.g
	plaintext := g.tls.Plaintext
	addr := g.addr
	if addr == "" {
		addr = c.env("RODON_SCHEDULER")
	}
	if addr == "" {
		addr = defaultAddr
		if plaintext {
			addr = defaultPlainAddr
		}
	}
	addrs, err := icli.SchedulerURLs(addr, "--addr", "schedctl", !plaintext)
	if err != nil {
		return nil, err
	}
	if g.tls.Dir == "" {
		g.tls.Dir = c.env("RODON_TLS_DIR")
	}
	if g.tls.Dir == "" {
		g.tls.Dir = icli.DefaultTLSDir
	}
	if g.tls.Cert != "" && g.tls.Key == "" {
		g.tls.Key = strings.TrimSuffix(g.tls.Cert, ".crt") + ".key"
	}
	var src *pki.Source
	if !plaintext && g.tls.Cert == "" {
		if certs, _ := filepath.Glob(filepath.Join(g.tls.Dir, string(pki.RoleOperator)+"-*.crt")); len(certs) == 0 {
			return nil, noCertificate(g.tls.Dir, c.env("USER"))
		}
	}
	src, err = g.tls.Source(pki.RoleOperator, pki.Identity{}, slog.New(slog.DiscardHandler), addrs...)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", errUsage, strings.TrimPrefix(err.Error(), "usage: "))
	}
	var t *http.Transport
	if src != nil {
		t = src.Transport(stepfollow.Verify(pki.AllowRoles(pki.RoleMember)))
	} else {
		t = http.DefaultTransport.(*http.Transport).Clone()
		t.Proxy = nil
	}
	// No overall timeout (streams and long polls last), but a bound on a
	// server that accepts a connection and never answers.
	t.ResponseHeaderTimeout = headerTimeout
	c.conn = &conn{addrs: addrs, hc: &http.Client{Transport: t}, agents: stepfollow.NewAgents(src, headerTimeout)}
	return c.conn, nil
}

// noCertificate is the error for a TLS directory without an operator
// certificate: it says what to run to get one.
func noCertificate(dir, user string) error {
	name := operatorName(user)
	return fmt.Errorf("%w: --tls-dir %s has no operator certificate (operator-NAME.crt)\n"+
		"schedctl talks to the scheduler over mutual TLS and needs an operator certificate. On the machine that holds the "+
		"cluster CA, run:\n  scheduler tls issue --role operator --name %s --out %s\n"+
		"(add --dir CA-DIR when the CA is not in $RODON_TLS_DIR or %s), or point --tls-dir (or $RODON_TLS_DIR) at the "+
		"directory that has yours, or give --tls-cert FILE; --plaintext is only for a scheduler started with --plaintext on loopback",
		errUsage, dir, name, dir, icli.DefaultTLSDir)
}

// operatorName is an identity name made of the user's login name, or
// "admin".
func operatorName(user string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(user) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			b.WriteRune(r)
		}
	}
	if _, err := pki.NewIdentity(pki.RoleOperator, b.String()); err != nil {
		return "admin"
	}
	return b.String()
}

// client returns a client of the scheduler.
func (c *cli) client() (*client.Client, error) {
	cn, err := c.connect()
	if err != nil {
		return nil, err
	}
	sc, err := client.New(strings.Join(cn.addrs, ","), client.Options{HTTPClient: cn.hc, UserAgent: "schedctl", RetryFor: c.retryFor})
	if err != nil {
		return nil, fmt.Errorf("%w: --addr: %v", errUsage, err)
	}
	return sc, nil
}

// follow is the configuration of following a step of sc: its output to
// the standard streams (with -o json: its frames to stdout).
func (c *cli) follow(sc *client.Client, warn func(string, ...any)) stepfollow.Config {
	cfg := stepfollow.Config{Client: sc, Agents: c.conn.agents, Stdout: c.stdout, Stderr: c.stderr, Warn: warn, StallGrace: c.stallGrace}
	if c.g.json() {
		cfg.Frames = c.stdout
	}
	return cfg
}
