// Command scheduler is Rodon's scheduler: `scheduler serve` runs one member
// of the Raft-replicated scheduler cluster and its HTTP API
// (docs/PROTOCOL.md).
package main

import (
	"io"
	"os"

	"github.com/rodon-compute/rodon/internal/cli"
)

const usage = `usage: scheduler COMMAND [FLAGS]

Commands:
  serve [FLAGS]   run a scheduler member
  tls init|issue|rotate-env-key
                  make the cluster CA and env key, issue certificates

A member speaks mutual TLS with its certificate, member/--node-id, from
--tls-dir (RODON_TLS_DIR, default /etc/rodon/tls; make it with "scheduler tls");
--plaintext turns TLS off for tests on loopback.

Run "scheduler serve -h" or "scheduler tls -h" for their flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	return cli.Main("scheduler", usage, map[string]cli.Command{
		"serve": func(args []string, _, stderr io.Writer) (int, error) { return 0, serveCmd(args, stderr) },
		"tls":   tlsCmd,
	}, cli.ExitError, args, stdout, stderr)
}
