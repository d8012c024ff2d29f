package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/rodon-compute/rodon/gateway"
	"github.com/rodon-compute/rodon/internal/cli"
	"github.com/rodon-compute/rodon/internal/secretbox"
)

const keysUsage = `usage: gateway keys COMMAND [FLAGS]

Commands:
  init-root --root-key-file FILE     make the root key of the secrets (refuses to replace a file)
  rotate-root --root-key-file FILE   add a new root key, rewrap every account's data key, drop the old key
                                     (also takes the flags that reach the scheduler, as bootstrap does)
`

// keysCmd is `gateway keys`: the root key of the secrets
// (docs/GATEWAY.md, "Secrets").
func keysCmd(args []string, stdout, stderr io.Writer) (int, error) {
	if len(args) == 0 {
		return 0, fmt.Errorf("%w: want init-root or rotate-root\n%s", cli.ErrUsage, keysUsage)
	}
	switch args[0] {
	case "init-root":
		return 0, keysInitRoot(args[1:], stdout, stderr)
	case "rotate-root":
		return 0, keysRotateRoot(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, keysUsage)
		return 0, nil
	}
	return 0, fmt.Errorf("%w: unknown keys command %q\n%s", cli.ErrUsage, args[0], keysUsage)
}

// rootKeyFlag registers --root-key-file into p.
func rootKeyFlag(fs *flag.FlagSet, p *string) {
	fs.StringVar(p, "root-key-file", gateway.DefaultRootKeyFile, "root key of the secrets (a Tink keyset, mode 0600): "+
		"never in the data dir or anything backed up")
}

func keysInitRoot(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gateway keys init-root", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := new(string)
	rootKeyFlag(fs, path)
	if err := cli.ParseFlagsOnly(fs, args, "keys init-root"); err != nil {
		return err
	}
	if strings.TrimSpace(*path) == "" {
		return fmt.Errorf("%w: --root-key-file is required", cli.ErrUsage)
	}
	if err := secretbox.CreateRoot(*path); errors.Is(err, secretbox.ErrExists) {
		return fmt.Errorf("--root-key-file %s exists already: a new root key would open none of the secrets; "+
			"to change the key, use `gateway keys rotate-root`", *path)
	} else if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "root key written to %s (mode 0600); keep a copy apart from every backup of the cluster's data\n", *path)
	return nil
}

func keysRotateRoot(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gateway keys rotate-root", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf clusterFlags
	cf.register(fs)
	path := new(string)
	rootKeyFlag(fs, path)
	if err := cli.ParseFlagsOnly(fs, args, "keys rotate-root"); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if _, err := os.Stat(*path); err != nil {
		return fmt.Errorf("%w: --root-key-file: %v", cli.ErrUsage, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sched, _, err := cf.connect(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	if err != nil {
		return err
	}
	return rotateRoot(ctx, sched, *path, stdout)
}

// rotateRoot is keysRotateRoot after the flags, on any store.
func rotateRoot(ctx context.Context, store gateway.Store, path string, stdout io.Writer) error {
	res, err := gateway.RotateRoot(ctx, store, path)
	if err != nil {
		return fmt.Errorf("--root-key-file %s: %w", path, err)
	}
	fmt.Fprintf(stdout, "root key %d is the only key of %s now (dropped %v); %d data keys, %d rewrapped\n",
		res.Primary, path, res.Dropped, res.DataKeys, res.Rewrapped)
	return nil
}

// checkRootKeyFile refuses a root key file inside the data dir, which
// backups copy. A missing file is no error: the gateway serves without
// secrets (503 on their routes) until it exists.
func checkRootKeyFile(path, dataDir string) error {
	if strings.TrimSpace(path) == "" {
		return fmt.Errorf("%w: --root-key-file is required (default %s)", cli.ErrUsage, gateway.DefaultRootKeyFile)
	}
	abs, err1 := filepath.Abs(path)
	dir, err2 := filepath.Abs(dataDir)
	if err1 == nil && err2 == nil {
		if rel, err := filepath.Rel(dir, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return fmt.Errorf("%w: --root-key-file %s is inside --data-dir %s: a backup of the data dir would hold the key of every secret; "+
				"keep it elsewhere (default %s)", cli.ErrUsage, path, dataDir, gateway.DefaultRootKeyFile)
		}
	}
	return nil
}
