// Command gateway is Rodon's API gateway (docs/GATEWAY.md): `gateway
// serve` serves the API, the web page and the step streams;
// `gateway bootstrap` creates the first owner.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

const usage = `usage: gateway COMMAND [FLAGS]

Commands:
  serve [FLAGS]       serve the API and the web page
  bootstrap [FLAGS]   create the first owner and print its one-time password

Run "gateway COMMAND -h" for its flags.
`

// Exit statuses.
const (
	exitError = 1
	exitUsage = 2
)

// errUsage marks a command-line error: the message is printed and the
// gateway exits 2.
var errUsage = errors.New("usage")

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	var err error
	switch args[0] {
	case "serve":
		err = serveCmd(args[1:], stderr)
	case "bootstrap":
		err = bootstrapCmd(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "gateway: unknown command %q\n%s", args[0], usage)
		return exitUsage
	}
	switch {
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "gateway %s: %s\n", args[0], strings.TrimPrefix(err.Error(), "usage: "))
		return exitUsage
	case err != nil:
		fmt.Fprintf(stderr, "gateway %s: %v\n", args[0], err)
		return exitError
	}
	return 0
}
