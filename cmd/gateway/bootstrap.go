package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rodon-compute/rodon/gateway"
	"github.com/rodon-compute/rodon/internal/cli"
)

// bootstrapCmd creates the first account and its owner and prints the
// owner's password once.
func bootstrapCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gateway bootstrap", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf clusterFlags
	cf.register(fs)
	email := fs.String("email", "", "the owner's email (required)")
	name := fs.String("account-name", "default", "the first account's name")
	if err := cli.ParseFlagsOnly(fs, args, "bootstrap"); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if *email == "" {
		return fmt.Errorf("%w: --email is required", cli.ErrUsage)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Only errors are logged: stdout and stderr are for the person.
	sched, _, err := cf.connect(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	if err != nil {
		return err
	}
	return bootstrap(ctx, sched, *email, *name, stdout, stderr)
}

// bootstrap is bootstrapCmd after the flags, on any store.
func bootstrap(ctx context.Context, store gateway.Store, email, name string, stdout, stderr io.Writer) error {
	res, err := gateway.BootstrapNamed(ctx, store, email, name, time.Now().UTC())
	if err != nil {
		return fmt.Errorf("--email %q: %w", email, err)
	}
	if !res.Created {
		fmt.Fprintln(stderr, "gateway bootstrap: an owner exists already (or another gateway is creating one): nothing done")
		return nil
	}
	fmt.Fprintf(stdout, "account:  %s (%s)\nowner:    %s (%s)\npassword: %s\n", res.Tenant.Name, res.Tenant.ID, res.Email, res.AccountID, res.Password)
	fmt.Fprintln(stderr, "gateway bootstrap: this password is shown once; keep it safe")
	return nil
}
