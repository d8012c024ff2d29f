// Command agentd is Rodon's node agent. `agentd run` runs one step in a fresh
// gVisor sandbox on this node; `agentd probe` checks that the node can
// enforce Rodon's isolation and limits.
package main

import (
	"io"
	"os"

	"github.com/rodon-compute/rodon/internal/cli"
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
	exitUsage    = cli.ExitUsage
	exitInternal = 125
	exitNotFound = 127
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	return cli.Main("agentd", usage, map[string]cli.Command{
		"run":     runCmd,
		"serve":   serveCmd,
		"cleanup": cleanupCmd,
		"probe":   probeCmd,
	}, exitInternal, args, stdout, stderr)
}
