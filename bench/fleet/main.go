// Command fleet benchmarks the scheduler, each measurement twice in the
// same run: with mutual TLS between every component (a cluster CA made in
// a temporary directory) and in plaintext (--plaintext everywhere, on
// loopback), the baseline TLS is compared against:
//
//   - scheduler throughput (issue 14): a 3-member cluster on loopback (real
//     scheduler processes) with in-process fake agents (agentd/agentdtest)
//     that accept assignments without running containers and send their
//     reports together; whole step lifecycles (submitted, placed, reported
//     running and exited) committed per second, against the rate of the
//     cheapest replicated write (a heartbeat that changes the node's
//     health) on the same cluster, with the Raft entries and commands they
//     took (the FSM's rodon_scheduler_fsm_entries_total and _items_total)
//     and a check that every accepted step has exactly one start and one
//     exited record of attempt 1 (it fails otherwise). A plaintext and a
//     TLS cluster are up side by side and measured in turn; -min-lifecycles
//     guards the TLS one;
//   - end-to-end latency of `schedctl run -- true` against `agentd run --
//     true` in the same run (a one-member scheduler and a real agentd for
//     each mode, up side by side), runs alternating; the scheduler's cost is
//     the difference of the medians.
//
// Usage (as root, after scripts/install-deps, bundles/build and go build -o
// bin/ ./cmd/...; the latency part runs a real agentd, so hold the host
// lock where other tests check the host for leftovers):
//
//	flock /tmp/rodon-host.lock go run ./bench/fleet -steps 20000 -latency-runs 20
//
// The throughput part alone needs neither root nor containerd:
//
//	go run ./bench/fleet -steps 20000 -latency-runs 0
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/internal/benchtls"
	"github.com/rodon-compute/rodon/internal/pki"
)

type config struct {
	steps, agents, runs, clients int
	bin                          string
	maxAdded                     time.Duration
	maxAddedRatio                float64
	minLifecycles                float64
}

func main() {
	var c config
	flag.IntVar(&c.steps, "steps", 20000, "steps to push through each 3-member cluster")
	flag.IntVar(&c.clients, "clients", 32, "goroutines that submit steps, and send heartbeats, at once")
	flag.Float64Var(&c.minLifecycles, "min-lifecycles", 0, "fail if, with mutual TLS, fewer whole step lifecycles than this commit per second (0: report only)")
	flag.IntVar(&c.agents, "agents", 4, "fake agents")
	flag.IntVar(&c.runs, "latency-runs", 20, "runs of each command for the latency comparison (0 skips it)")
	flag.StringVar(&c.bin, "bin", "bin", "directory of the scheduler, agentd and schedctl binaries")
	flag.DurationVar(&c.maxAdded, "max-added", 0, "fail if, with mutual TLS, schedctl run's median exceeds agentd run's by more than this (0: report only)")
	flag.Float64Var(&c.maxAddedRatio, "max-added-ratio", 0, "fail if, with mutual TLS, schedctl run's queued-to-exited median exceeds agentd run's by more than this fraction of agentd run's, measured in the same run (0: report only)")
	out := flag.String("out", "", "also write the markdown report to this file")
	flag.Parse()
	report, err := run(c)
	fmt.Print(report)
	if *out != "" && report != "" {
		if werr := os.WriteFile(*out, []byte(report), 0o644); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

func run(c config) (string, error) {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "### Scheduler, mutual TLS vs plaintext (%s, host %s)\n\n", time.Now().UTC().Format(time.RFC3339), host)
	dir, err := os.MkdirTemp("", "bench-fleet")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	tlsMode, plain, err := benchtls.Setup(c.bin, dir+"/tls")
	if err != nil {
		return "", err
	}
	ids := []pki.Identity{operator, {Role: pki.RoleAgent, Name: latencyNode(tlsMode)}}
	for i := range 3 {
		ids = append(ids, pki.Identity{Role: pki.RoleMember, Name: fmt.Sprintf("m%d", i+1)})
	}
	for i := range c.agents {
		ids = append(ids, pki.Identity{Role: pki.RoleAgent, Name: fakeNode(i)})
	}
	if err := tlsMode.Issue(ids); err != nil {
		return "", err
	}
	start := time.Now()
	if err := throughput(&b, c, dir, plain, tlsMode); err != nil {
		return b.String(), err
	}
	tpTime := time.Since(start)
	var latTime time.Duration
	if c.runs > 0 {
		start = time.Now()
		err = latency(&b, c, dir, plain, tlsMode)
		latTime = time.Since(start)
	}
	fmt.Fprintf(&b, "Wall time: throughput %.0f s, latency %.0f s.\n\n", tpTime.Seconds(), latTime.Seconds())
	fmt.Fprintf(&b, "Command: `go build -o bin/ ./cmd/... && flock /tmp/rodon-host.lock go run ./bench/fleet %s`\n", strings.Join(os.Args[1:], " "))
	return b.String(), err
}

// ratio formats a TLS / plaintext ratio.
func ratio(tls, plain float64) string { return fmt.Sprintf("%.2f", tls/plain) }
