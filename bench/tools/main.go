// Command tools benchmarks an agent run's file tools (SPEC.md, "Agents,
// grants, tools and gates"; docs/design/agents.md) through the gateway on
// one fleet on 127.0.0.1 with mutual TLS between every component
// (benchfleet with no node: `scheduler serve --bootstrap` with the default
// local blob store, and `gateway serve` with HTTPS; file tools need no
// sandbox), each against the same operation on a local directory holding
// the same files, taken in the same run, alternating with it round by
// round, reported as calls per second and their ratio:
//
//   - Read: `POST /v1/runs/{id}/steps {"tool": "Read", "input": {"path":
//     "read.txt"}}` of a 10 KB text file with the run's grant, the answer
//     decoded, against os.ReadFile of the same file; and, to show what a
//     tool call's bookkeeping (its step appended and ended in the run
//     record, its events) adds, `GET /v1/workspaces/{id}/files/read.txt`
//     of the same file with the admin key, in the same round.
//   - Grep: `{"tool": "Grep", "input": {"pattern": ..., "path": "grep"}}`
//     over -files files of about 1 KB each (every tenth with a match),
//     against a walk of the same directory reading each file and matching
//     each line with Go's regexp. Both must count the same matches.
//
// Each round makes -calls calls of one kind through a fresh agent run
// (finished afterwards; its creation is not counted) and -calls of the
// local operation, gateway first on even rounds and local first on odd
// ones, after one warm-up round. All data is in temporary directories,
// removed at the end. It starts no sandbox, but it shares the machine
// with the host tests, so hold the lock:
//
//	go build -o bin/ ./cmd/... && flock /tmp/rodon-host.lock go run ./bench/tools -runs 5 -calls 50 -out docs/bench-tools-latest.md
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/rodon-compute/rodon/internal/benchfleet"
)

type config struct {
	runs, calls, files int
	bin, out           string
	minRead, minGrep   float64
}

func main() {
	var c config
	flag.IntVar(&c.runs, "runs", 5, "rounds of each measurement, after one warm-up round")
	flag.IntVar(&c.calls, "calls", 50, "calls of each kind in a round (one agent run's tool calls)")
	flag.IntVar(&c.files, "files", 1000, "files the Grep searches")
	flag.StringVar(&c.bin, "bin", "bin", "directory of the scheduler and gateway binaries")
	flag.StringVar(&c.out, "out", "", "also write the markdown report to this file")
	flag.Float64Var(&c.minRead, "min-read-ratio", 0, "fail if the median ratio of Read calls per second through the gateway to os.ReadFile's is below this (0: report only)")
	flag.Float64Var(&c.minGrep, "min-grep-ratio", 0, "fail if the median ratio of Grep calls per second through the gateway to the local walk's is below this (0: report only)")
	flag.Parse()
	if c.runs < 1 || c.calls < 1 || c.files < 10 {
		fmt.Fprintln(os.Stderr, "tools: -runs and -calls must be at least 1, -files at least 10")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	report, err := run(ctx, c)
	stop()
	os.Exit(benchfleet.Finish("tools", c.out, report, err))
}
