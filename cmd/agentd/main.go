// Command agentd is Rodon's node agent. `agentd run` runs one step in a fresh
// gVisor sandbox on this node; `agentd probe` checks that the node can
// enforce Rodon's isolation and limits.
package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

const usage = `usage: agentd COMMAND [FLAGS]

Commands:
  serve [FLAGS]            run the node agent: register with the scheduler, run assigned steps
  run [FLAGS] -- ARGV...   run one step in a fresh sandbox on this node
  probe [FLAGS]            run the node's capability probe (canary sandbox, cgroup limits)
  cleanup [--node-id ID]   destroy sandboxes that a stopped agent of this node left behind

Run "agentd COMMAND -h" for a command's flags.
`

// Exit statuses of agentd itself (a step's own code is passed through).
const (
	exitUsage    = 2
	exitInternal = 125
	exitNotFound = 127
)

// errUsage marks a command-line error: the message is printed with the
// usage hint and agentd exits 2.
var errUsage = errors.New("usage")

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	var code int
	var err error
	switch args[0] {
	case "run":
		code, err = runCmd(args[1:], stdout, stderr)
	case "serve":
		code, err = serveCmd(args[1:], stdout, stderr)
	case "cleanup":
		code, err = cleanupCmd(args[1:], stdout, stderr)
	case "probe":
		code, err = probeCmd(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "agentd: unknown command %q\n%s", args[0], usage)
		return exitUsage
	}
	switch {
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "agentd %s: %s\n", args[0], strings.TrimPrefix(err.Error(), "usage: "))
		return exitUsage
	case err != nil:
		fmt.Fprintf(stderr, "agentd %s: %v\n", args[0], err)
		return exitInternal
	}
	return code
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", errUsage, level)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})), nil
}
