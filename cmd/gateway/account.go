package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/rodon-compute/rodon/gateway"
	"github.com/rodon-compute/rodon/internal/cli"
)

// accountCmd is `gateway account create|list`: a platform operator
// creates and lists accounts (tenants), on the cluster as `gateway
// bootstrap` reaches it.
func accountCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "create" && args[0] != "list") {
		fmt.Fprintln(stderr, "usage: gateway account create --account-name N --owner-email E | gateway account list")
		return fmt.Errorf("%w: want gateway account create or list", cli.ErrUsage)
	}
	sub := args[0]
	fs := flag.NewFlagSet("gateway account "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf clusterFlags
	cf.register(fs)
	output := fs.String("o", "text", "output format: text or json")
	name, email := new(string), new(string)
	if sub == "create" {
		fs.StringVar(name, "account-name", "", "the account's name (required)")
		fs.StringVar(email, "owner-email", "", "its owner's email (required): a new person gets a one-time password")
	}
	if err := cli.ParseFlagsOnly(fs, args[1:], "account "+sub); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if *output != "text" && *output != "json" {
		return fmt.Errorf("%w: -o %q: want text or json", cli.ErrUsage, *output)
	}
	if sub == "create" && (*name == "" || *email == "") {
		return fmt.Errorf("%w: --account-name and --owner-email are required", cli.ErrUsage)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sched, _, err := cf.connect(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	if err != nil {
		return err
	}
	if sub == "create" {
		return accountCreate(ctx, sched, *name, *email, *output == "json", stdout, stderr)
	}
	return accountList(ctx, sched, *output == "json", stdout)
}

// accountCreate is `gateway account create` after the flags, on any store.
func accountCreate(ctx context.Context, store gateway.Store, name, email string, asJSON bool, stdout, stderr io.Writer) error {
	ans, err := gateway.CreateTenant(ctx, store, name, email, time.Now())
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(ans)
	}
	fmt.Fprintf(stdout, "account:  %s (%s)\nowner:    %s (%s)\n", ans.Tenant.Name, ans.Tenant.ID, email, ans.OwnerID)
	if ans.OwnerPassword != "" {
		fmt.Fprintf(stdout, "password: %s\n", ans.OwnerPassword)
		fmt.Fprintln(stderr, "gateway account create: this password is shown once; keep it safe")
	} else {
		fmt.Fprintln(stderr, "gateway account create: the owner signs in with their own password")
	}
	return nil
}

// accountList is `gateway account list` after the flags, on any store.
func accountList(ctx context.Context, store gateway.Store, asJSON bool, stdout io.Writer) error {
	tenants, err := gateway.ListTenants(ctx, store)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(tenants)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tCREATED")
	for _, t := range tenants {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", t.ID, t.Name, t.CreatedAt.Format(time.RFC3339))
	}
	return tw.Flush()
}
