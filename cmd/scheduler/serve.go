package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/cli"
	"github.com/rodon-compute/rodon/internal/envseal"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/scheduler"
)

// serveFlags are the flags of `scheduler serve`.
type serveFlags struct {
	nodeID    string
	dataDir   string
	raftAddr  string
	httpAddr  string
	bootstrap bool
	join      string
	nodeTTL   time.Duration
	bounds    boundFlags
	logLevel  string
	tls       cli.TLSFlags
	envKey    string
	blobStore string
	gc        gcFlags
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	d := scheduler.DefaultConfig()
	fs.StringVar(&f.nodeID, "node-id", "", "this member's unique id in the cluster (required)")
	fs.StringVar(&f.dataDir, "data-dir", "", "directory of the Raft log and snapshots (required)")
	fs.StringVar(&f.raftAddr, "raft-addr", "", "HOST:PORT of Raft traffic, dialled by the other members (required)")
	fs.StringVar(&f.httpAddr, "http-addr", "", "HOST:PORT of the HTTP API, dialled by agents, schedctl and the other members (required)")
	fs.BoolVar(&f.bootstrap, "bootstrap", false, "start a new cluster with this member as its only voter (first member only)")
	fs.StringVar(&f.join, "join", "", "HTTPADDR[,HTTPADDR...] of existing members to join (https unless --plaintext)")
	fs.DurationVar(&f.nodeTTL, "node-ttl", d.NodeTTL, "silence after which a node is declared down")
	f.bounds.register(fs, d)
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.tls.Register(fs)
	fs.StringVar(&f.envKey, "env-key", "", "the cluster env key that seals step environment values, the same file on every member "+
		"(default TLS-DIR/"+envseal.KeyFile+", made by `scheduler tls init`)")
	fs.StringVar(&f.blobStore, "blob-store", d.BlobStore, "the blob store of workspace contents: local (DATA-DIR/blobs, one member), "+
		"local:///PATH (a directory the members share) or s3://BUCKET?endpoint=HOST:PORT&region=R (credentials from credentials-file=PATH or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
	f.gc.register(fs)
}

// loadEnvKey loads the env key: --env-key, or env-key.json in the TLS
// directory. A joining member with TLS that has no key file yet fetches the
// cluster's from the members it joins (over mutual TLS, as a member) and
// keeps it there. A member without TLS (plaintext) may lack the default
// file: it then seals with an ephemeral key (scheduler.New says so in its
// log), fit for one member only. An explicit --env-key must load.
func (f *serveFlags) loadEnvKey(ctx context.Context, cfg scheduler.Config, logger *slog.Logger) (*envseal.Key, error) {
	path := f.envKey
	if path == "" {
		path = filepath.Join(f.tls.Dir, envseal.KeyFile)
	}
	k, err := envseal.Load(path)
	switch {
	case err == nil:
		logger.Info("env key loaded", "path", path, "primary_key_id", k.PrimaryID())
		return k, nil
	case errors.Is(err, os.ErrNotExist) && f.envKey == "" && f.tls.Plaintext:
		return nil, nil
	case errors.Is(err, os.ErrNotExist) && cfg.TLS != nil && len(cfg.Join) > 0:
		return scheduler.AwaitEnvKey(ctx, cfg, path, logger)
	}
	return nil, fmt.Errorf("%w: --env-key %s: %v: create it with `scheduler tls init --dir DIR` on the first member "+
		"(members that --join fetch it from the cluster)", cli.ErrUsage, path, err)
}

// config checks the flags and returns the member's configuration; every
// error names the flag at fault.
func (f *serveFlags) config() (scheduler.Config, error) {
	c := scheduler.DefaultConfig()
	for _, req := range []struct{ name, value string }{
		{"--node-id", f.nodeID}, {"--data-dir", f.dataDir}, {"--raft-addr", f.raftAddr}, {"--http-addr", f.httpAddr},
	} {
		if strings.TrimSpace(req.value) == "" {
			return c, fmt.Errorf("%w: %s is required", cli.ErrUsage, req.name)
		}
	}
	for _, a := range []struct{ name, value string }{{"--raft-addr", f.raftAddr}, {"--http-addr", f.httpAddr}} {
		if err := checkAddr(a.value); err != nil {
			return c, fmt.Errorf("%w: %s %q: %v", cli.ErrUsage, a.name, a.value, err)
		}
	}
	if err := cluster.ValidateName("member id", f.nodeID); err != nil {
		return c, fmt.Errorf("%w: --node-id: %v (it names the member's certificate, member/ID)", cli.ErrUsage, err)
	}
	if f.nodeTTL <= 0 {
		return c, fmt.Errorf("%w: --node-ttl %v: must be a positive duration such as 10s", cli.ErrUsage, f.nodeTTL)
	}
	var join []string
	for a := range strings.SplitSeq(f.join, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if err := checkAddr(strings.TrimPrefix(strings.TrimPrefix(a, "http://"), "https://")); err != nil {
			return c, fmt.Errorf("%w: --join %q: %v", cli.ErrUsage, a, err)
		}
		join = append(join, a)
	}
	if f.join != "" && len(join) == 0 {
		return c, fmt.Errorf("%w: --join %q: want HTTPADDR[,HTTPADDR...]", cli.ErrUsage, f.join)
	}
	if f.bootstrap && len(join) > 0 {
		return c, fmt.Errorf("%w: --bootstrap and --join are exclusive: bootstrap the first member, join the others to it", cli.ErrUsage)
	}
	if f.tls.Plaintext {
		// Without TLS nothing is authenticated: only on this machine.
		for _, a := range []struct{ name, value string }{{"--http-addr", f.httpAddr}, {"--raft-addr", f.raftAddr}} {
			if !cli.IsLoopback(a.value) {
				return c, fmt.Errorf("%w: %s %q is not a loopback address: without TLS (--plaintext) a member serves only this machine; "+
					"give it its certificate (--tls-dir) instead", cli.ErrUsage, a.name, a.value)
			}
		}
		for _, a := range join {
			if !cli.IsLoopback(a) {
				return c, fmt.Errorf("%w: --join %q is not a loopback address: without TLS (--plaintext) a member joins only members on this machine", cli.ErrUsage, a)
			}
			if strings.HasPrefix(a, "https://") {
				return c, fmt.Errorf("%w: --join %q: --plaintext members speak http://", cli.ErrUsage, a)
			}
		}
	} else {
		for _, a := range join {
			if strings.HasPrefix(a, "http://") {
				return c, fmt.Errorf("%w: --join %q: members speak TLS: give HOST:PORT or https://HOST:PORT", cli.ErrUsage, a)
			}
		}
	}
	c.ID, c.DataDir, c.RaftAddr, c.HTTPAddr = f.nodeID, f.dataDir, f.raftAddr, f.httpAddr
	c.Bootstrap, c.Join, c.NodeTTL = f.bootstrap, join, f.nodeTTL
	c.BlobStore = f.blobStore
	if err := f.bounds.apply(&c); err != nil {
		return c, err
	}
	if err := f.gc.check(); err != nil {
		return c, fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	return c, nil
}

// checkAddr checks a HOST:PORT the other members dial.
func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	switch {
	case err != nil:
		return fmt.Errorf("want HOST:PORT")
	case host == "" || net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified():
		return fmt.Errorf("want a specific host that other members can dial, not a wildcard")
	case port == "" || port == "0":
		return fmt.Errorf("want a fixed port")
	}
	return nil
}

// source loads the member's certificate (member/--node-id), or returns nil
// with --plaintext.
func (f *serveFlags) source(logger *slog.Logger) (*pki.Source, error) {
	var id pki.Identity
	if !f.tls.Plaintext {
		id = pki.Identity{Role: pki.RoleMember, Name: f.nodeID}
	}
	return f.tls.Source(pki.RoleMember, id, logger, f.httpAddr, f.raftAddr)
}

func serveCmd(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("scheduler serve", flag.ContinueOnError)
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
	f.gc.apply(fs)
	// Signals first: a SIGTERM during start-up stops the member cleanly,
	// and a SIGHUP does not kill it.
	ctx, hup, stop := cli.Signals()
	defer stop()
	src, err := f.source(logger)
	if err != nil {
		return err
	}
	cfg.TLS, cfg.Reload = src, hup
	if cfg.EnvKey, err = f.loadEnvKey(ctx, cfg, logger); err != nil {
		return err
	}
	srv, err := scheduler.New(cfg, logger)
	if err != nil {
		return err
	}
	logger.Info("scheduler member starting", "member", cfg.ID, "raft_address", cfg.RaftAddr,
		"http_address", cfg.HTTPAddr, "bootstrap", cfg.Bootstrap, "join", cfg.Join, "node_ttl", cfg.NodeTTL,
		"tls", src != nil)
	return srv.Run(ctx)
}
