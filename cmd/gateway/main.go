// Command gateway is Rodon's API gateway (docs/GATEWAY.md): `gateway
// serve` serves the API, the web page and the step streams;
// `gateway bootstrap` creates the first owner; `gateway account` creates
// and lists accounts; `gateway keys` makes and rotates the root key of the
// secrets.
package main

import (
	"io"
	"os"

	"github.com/rodon-compute/rodon/internal/cli"
)

const usage = `usage: gateway COMMAND [FLAGS]

Commands:
  serve [FLAGS]       serve the API and the web page
  bootstrap [FLAGS]   create the first account and owner, and print its one-time password
  account create|list [FLAGS]
                      create an account with its owner, or list the accounts
  keys COMMAND        make (init-root) or rotate (rotate-root) the root key of the secrets

Run "gateway COMMAND -h" for its flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	return cli.Main("gateway", usage, map[string]cli.Command{
		"serve": func(args []string, _, stderr io.Writer) (int, error) { return 0, serveCmd(args, stderr) },
		"bootstrap": func(args []string, stdout, stderr io.Writer) (int, error) {
			return 0, bootstrapCmd(args, stdout, stderr)
		},
		"account": func(args []string, stdout, stderr io.Writer) (int, error) {
			return 0, accountCmd(args, stdout, stderr)
		},
		"keys": keysCmd,
	}, cli.ExitError, args, stdout, stderr)
}
