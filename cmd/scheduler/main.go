// Command scheduler is Rodon's scheduler: `scheduler serve` runs one member
// of the Raft-replicated scheduler cluster and its HTTP API
// (docs/PROTOCOL.md).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

const usage = `usage: scheduler COMMAND [FLAGS]

Commands:
  serve [FLAGS]   run a scheduler member

Run "scheduler serve -h" for its flags.
`

// Exit statuses.
const (
	exitError = 1
	exitUsage = 2
)

// errUsage marks a command-line error: the message is printed and the
// scheduler exits 2.
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
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "scheduler: unknown command %q\n%s", args[0], usage)
		return exitUsage
	}
	switch {
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "scheduler %s: %s\n", args[0], strings.TrimPrefix(err.Error(), "usage: "))
		return exitUsage
	case err != nil:
		fmt.Fprintf(stderr, "scheduler %s: %v\n", args[0], err)
		return exitError
	}
	return 0
}
