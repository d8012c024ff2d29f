package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/internal/cli"
	"github.com/rodon-compute/rodon/internal/envseal"
	"github.com/rodon-compute/rodon/internal/pki"
)

const tlsUsage = `usage: scheduler tls COMMAND [FLAGS]

Commands:
  init  --dir DIR                       make the cluster CA (DIR/ca.crt, DIR/ca.key) and the
                                        env key (DIR/env-key.json)
  issue --role ROLE --name ID --dir DIR issue DIR/ROLE-ID.crt and .key
        [--host H,...] [--valid-for D]  ROLE: member, agent (ID: the node id), gateway, operator
        [--renew-within D] [--out DIR]  (keep a valid pair that expires later than D from now)
  show  --cert FILE [--ca FILE]         verify a certificate under the CA; print its identity
  rotate-env-key --dir DIR              add a new primary key to DIR/env-key.json; the old
                                        ones still open what they sealed

Daemons and schedctl read DIR (--tls-dir, default RODON_TLS_DIR or /etc/rodon/tls)
and pick up re-issued files without a restart. env-key.json seals step environment
values: copy it to every scheduler member (and nowhere else), and restart the members
after a rotation.
`

// tlsCmd is `scheduler tls init|issue`.
func tlsCmd(args []string, stdout, stderr io.Writer) (int, error) {
	if len(args) == 0 {
		return 0, fmt.Errorf("%w: want init or issue\n%s", cli.ErrUsage, tlsUsage)
	}
	switch args[0] {
	case "init":
		return 0, tlsInit(args[1:], stdout, stderr)
	case "issue":
		return 0, tlsIssue(args[1:], stdout, stderr)
	case "show":
		return 0, tlsShow(args[1:], stdout, stderr)
	case "rotate-env-key":
		return 0, tlsRotateEnvKey(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, tlsUsage)
		return 0, nil
	}
	return 0, fmt.Errorf("%w: unknown tls command %q\n%s", cli.ErrUsage, args[0], tlsUsage)
}

func tlsInit(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("scheduler tls init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", cli.TLSDir(), "directory to create the CA and the env key in")
	validFor := fs.Duration("valid-for", pki.DefaultCAValidity, "lifetime of the CA certificate")
	if err := cli.ParseFlagsOnly(fs, args, "tls init"); err != nil {
		return err
	}
	if *validFor <= 0 {
		return fmt.Errorf("%w: --valid-for %v: must be positive", cli.ErrUsage, *validFor)
	}
	// Each of the two is made when missing, so that a directory made
	// before the env key existed gets one.
	caErr := pki.InitCA(*dir, *validFor)
	if caErr != nil && !errors.Is(caErr, pki.ErrExists) {
		return caErr
	}
	keyPath := filepath.Join(*dir, envseal.KeyFile)
	keyErr := envseal.Create(keyPath)
	if keyErr != nil && !errors.Is(keyErr, envseal.ErrExists) {
		return keyErr
	}
	if caErr != nil && keyErr != nil {
		return fmt.Errorf("%v and %v: keep them, or move them away to start a new cluster", caErr, keyErr)
	}
	if caErr == nil {
		fmt.Fprintf(stdout, "created the cluster CA in %s (ca.key stays on this machine; copy only ca.crt)\n", *dir)
	}
	if keyErr == nil {
		fmt.Fprintf(stdout, "created the env key %s (copy it to every scheduler member, and nowhere else)\n", keyPath)
	}
	return nil
}

func tlsRotateEnvKey(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("scheduler tls rotate-env-key", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", cli.TLSDir(), "directory of env-key.json")
	if err := cli.ParseFlagsOnly(fs, args, "tls rotate-env-key"); err != nil {
		return err
	}
	path := filepath.Join(*dir, envseal.KeyFile)
	id, err := envseal.Rotate(path)
	if err != nil {
		return fmt.Errorf("%w (create one with `scheduler tls init --dir %s`)", err, *dir)
	}
	fmt.Fprintf(stdout, "added key %d to %s as the primary: copy the file to every scheduler member and restart them; "+
		"values sealed before still open\n", id, path)
	return nil
}

func tlsIssue(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("scheduler tls issue", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", cli.TLSDir(), "directory of the CA; the pair is written there")
	out := fs.String("out", "", "directory to write the pair to (default: --dir)")
	role := fs.String("role", "", "member, agent, gateway or operator (required)")
	name := fs.String("name", "", "the identity's name: member id, node id, gateway or operator name (required)")
	hosts := fs.String("host", "", "DNS names and IPs to add as SANs, comma-separated (for browsers; components verify the identity)")
	validFor := fs.Duration("valid-for", pki.DefaultLeafValidity, fmt.Sprintf("lifetime of the certificate, at most %v", pki.MaxLeafValidity))
	renewWithin := fs.Duration("renew-within", 0, "keep an existing pair that is valid under the CA for longer than this (0: always issue)")
	if err := cli.ParseFlagsOnly(fs, args, "tls issue"); err != nil {
		return err
	}
	r, err := pki.ParseRole(*role)
	if err != nil {
		return fmt.Errorf("%w: --role: %v", cli.ErrUsage, err)
	}
	id, err := pki.NewIdentity(r, *name)
	if err != nil {
		return fmt.Errorf("%w: --name: %v", cli.ErrUsage, err)
	}
	if *validFor <= 0 || *validFor > pki.MaxLeafValidity {
		return fmt.Errorf("%w: --valid-for %v: want a positive duration of at most %v", cli.ErrUsage, *validFor, pki.MaxLeafValidity)
	}
	var hs []string
	for h := range strings.SplitSeq(*hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hs = append(hs, h)
		}
	}
	ca, err := pki.LoadCA(*dir)
	if err != nil {
		return err
	}
	if *out == "" {
		*out = *dir
	}
	if *renewWithin > 0 {
		files := pki.DirFiles(*out, id)
		files.CA = filepath.Join(*dir, pki.CACertFile)
		if src, err := pki.Load(files, id, slog.New(slog.DiscardHandler)); err == nil && time.Until(src.NotAfter()) > *renewWithin {
			fmt.Fprintf(stdout, "kept %s: %s (valid until %s)\n", id, files.Cert, src.NotAfter().UTC().Format(time.RFC3339))
			return nil
		}
	}
	path, err := ca.IssueFiles(*out, id, pki.IssueOptions{ValidFor: *validFor, Hosts: hs})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "issued %s: %s (valid until %s)\n", id, path, time.Now().Add(*validFor).UTC().Format(time.RFC3339))
	return nil
}

func tlsShow(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("scheduler tls show", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cert := fs.String("cert", "", "certificate to verify (required; its key is FILE with .key for .crt)")
	key := fs.String("key", "", "its private key (default: the --cert path with .key)")
	ca := fs.String("ca", "", "cluster CA certificate (default: ca.crt beside --cert)")
	if err := cli.ParseFlagsOnly(fs, args, "tls show"); err != nil {
		return err
	}
	if *cert == "" {
		return fmt.Errorf("%w: --cert is required", cli.ErrUsage)
	}
	files := pki.Files{CA: *ca, Cert: *cert, Key: *key}
	if files.CA == "" {
		files.CA = filepath.Join(filepath.Dir(*cert), pki.CACertFile)
	}
	if files.Key == "" {
		files.Key = strings.TrimSuffix(*cert, ".crt") + ".key"
	}
	src, err := pki.Load(files, pki.Identity{}, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\t%s\tvalid until %s\n", src.Identity(), src.Identity().URI(), src.NotAfter().UTC().Format(time.RFC3339))
	return nil
}
