package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/rodon-compute/rodon/agentd"
	"github.com/rodon-compute/rodon/internal/cli"
	"github.com/rodon-compute/rodon/internal/size"
)

// runtimeFlags are the flags every command that talks to containerd takes.
type runtimeFlags struct {
	containerd  string
	runtimeType string
	runscConfig string
	dataDir     string
	logLevel    string
	// node scopes the runtime to one node's sandboxes (agentd serve,
	// cleanup); empty for agentd run.
	node          string
	net           networkFlags
	minFreeDisk   thresholdFlag
	minFreeInodes thresholdFlag
}

func (f *runtimeFlags) register(fs *flag.FlagSet) {
	d := agentd.DefaultRuntimeConfig()
	fs.StringVar(&f.containerd, "containerd", d.Address, "containerd socket")
	fs.StringVar(&f.runtimeType, "runtime", d.RuntimeType, "containerd runtime type of sandboxes")
	fs.StringVar(&f.runscConfig, "runsc-config", "", "TOML file of runsc flags ([runsc_config]) for the shim")
	fs.StringVar(&f.dataDir, "data-dir", d.DataDir, "agent data directory")
	fs.StringVar(&f.logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	f.minFreeDisk, f.minFreeInodes = thresholdFlag(d.MinFreeDisk), thresholdFlag(d.MinFreeInodes)
	fs.Var(&f.minFreeDisk, "min-free-disk", "free space (a percentage or a `SIZE` such as 20g) the node keeps on the file systems of its data, workspaces and logs: below it the node is degraded and no new workspace is made")
	fs.Var(&f.minFreeInodes, "min-free-inodes", "free inodes (a percentage or a `NUMBER`) the node keeps on those file systems: below it the node is degraded")
	f.net.register(fs)
}

func (f *runtimeFlags) config() agentd.RuntimeConfig {
	c := agentd.DefaultRuntimeConfig()
	c.Address = f.containerd
	c.RuntimeType = f.runtimeType
	c.DataDir = f.dataDir
	c.RuntimeConfigPath = f.runscConfig
	c.Node = f.node
	c.MinFreeDisk, c.MinFreeInodes = agentd.Threshold(f.minFreeDisk), agentd.Threshold(f.minFreeInodes)
	return c
}

// thresholdFlag is a free-space floor: "10%" or an amount ("20g").
type thresholdFlag agentd.Threshold

func (t *thresholdFlag) String() string { return agentd.Threshold(*t).String() }

func (t *thresholdFlag) Set(v string) error {
	th, err := agentd.ParseThreshold(v)
	if err != nil {
		return err
	}
	*t = thresholdFlag(th)
	return nil
}

// sizeFlag is a byte size flag ("512Mi", "1GiB").
type sizeFlag = size.Flag

// open builds the logger, loads the sandbox network (per --network) and
// connects to containerd. Its context ends on SIGINT or SIGTERM; close
// releases everything.
func (f *runtimeFlags) open(stderr io.Writer) (ctx context.Context, rt *agentd.Runtime, logger *slog.Logger, close func(), err error) {
	logger, err = cli.Logger(stderr, f.logLevel)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	egress, err := f.net.openEgress(logger)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	closeEgress := func() {
		if egress != nil {
			egress.Close()
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	cfg := f.config()
	cfg.Network = egress
	rt, err = agentd.NewRuntime(ctx, cfg, logger)
	if err != nil {
		stop()
		closeEgress()
		return nil, nil, nil, nil, err
	}
	return ctx, rt, logger, func() { rt.Close(); closeEgress(); stop() }, nil
}

// newFlagSet returns a flag set whose errors come back as cli.ErrUsage.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("agentd "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error { return cli.Parse(fs, args) }
