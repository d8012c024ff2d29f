// Command netsetup measures what a step's own network costs, in one run so
// that machine noise hits every figure alike:
//
//   - set-up plus tear-down of one sandbox network (namespace, veth pair,
//     addresses, routes, the egress filter attached, then all removed), n
//     times through netpolicy.Egress, as agentd does it;
//   - the latency of `agentd run -- true` with that network, against the
//     same step with --no-internet (loopback only), alternating.
//
// The node side lives in a network namespace the benchmark makes and
// removes; it has no uplink, and the step sends nothing.
//
// Usage (as root, after scripts/install-deps and bundles/build):
//
//	go run ./bench/netsetup -n 100 -steps 20 -max-setup-teardown 50ms -out docs/bench-net-latest.md
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/vishvananda/netns"

	"github.com/rodon-compute/rodon/internal/benchstat"
	"github.com/rodon-compute/rodon/netpolicy"
)

func main() {
	n := flag.Int("n", 100, "network set-up and tear-down cycles")
	steps := flag.Int("steps", 20, "steps of each kind (with network, --no-internet)")
	agentd := flag.String("agentd", "bin/agentd", "agentd binary")
	maxST := flag.Duration("max-setup-teardown", 0, "fail if the median set-up plus tear-down exceeds this (0: report only)")
	out := flag.String("out", "", "also write the markdown report to this file")
	flag.Parse()
	report, err := run(*n, *steps, *agentd, *maxST)
	fmt.Print(report)
	if *out != "" && report != "" {
		if werr := os.WriteFile(*out, []byte(report), 0o644); werr != nil {
			fmt.Fprintln(os.Stderr, "netsetup:", werr)
			os.Exit(1)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "netsetup:", err)
		os.Exit(1)
	}
}

func run(n, steps int, agentd string, maxST time.Duration) (string, error) {
	var b strings.Builder
	nsName, cleanup, err := nodeNamespace()
	if err != nil {
		return "", err
	}
	defer cleanup()
	nsPath := "/run/netns/" + nsName

	e, err := netpolicy.NewEgress(netpolicy.EgressConfig{Net: netpolicy.Config{HostNS: nsPath}}, slog.New(slog.DiscardHandler))
	if err != nil {
		return "", err
	}
	ctx := context.Background()
	var setup, teardown, total []time.Duration
	for i := range n {
		id := fmt.Sprintf("bench-%d", i)
		t0 := time.Now()
		sb, err := e.Setup(ctx, id)
		if err != nil {
			e.Close()
			return "", err
		}
		t1 := time.Now()
		if err := e.Teardown(ctx, sb); err != nil {
			e.Close()
			return "", err
		}
		t2 := time.Now()
		setup, teardown, total = append(setup, t1.Sub(t0)), append(teardown, t2.Sub(t1)), append(total, t2.Sub(t0))
	}
	e.RemoveNAT(ctx)
	e.Close()

	fmt.Fprintf(&b, "### Sandbox network set-up and tear-down (%s, host %s, n=%d)\n\n", time.Now().UTC().Format("2006-01-02"), hostname(), n)
	b.WriteString("| | median | p95 |\n|---|---|---|\n")
	for _, r := range []struct {
		name string
		ds   []time.Duration
	}{{"set-up (netns, veth, addresses, routes, filter attached)", setup}, {"tear-down (filter detached, veth and netns removed)", teardown}, {"**set-up + tear-down**", total}} {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.name, benchstat.MS(benchstat.Median(r.ds)), benchstat.MS(benchstat.Quantile(r.ds, 0.95)))
	}
	var failure error
	if med := benchstat.Median(total); maxST > 0 && med > maxST {
		failure = fmt.Errorf("median set-up plus tear-down %v is over the limit of %v", med, maxST)
	}

	if steps <= 0 {
		return b.String(), failure
	}
	var withNet, without []time.Duration
	for i := range steps * 2 {
		args := []string{"run", "--node-netns", nsPath, "--dns", "none", "--log-level", "error"}
		if i%2 == 1 {
			args = append(args, "--no-internet")
		}
		args = append(args, "--", "true")
		t0 := time.Now()
		out, err := exec.Command(agentd, args...).CombinedOutput()
		d := time.Since(t0)
		if err != nil {
			return b.String(), fmt.Errorf("agentd %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if i < 2 {
			continue // warm-up of each kind
		}
		if i%2 == 1 {
			without = append(without, d)
		} else {
			withNet = append(withNet, d)
		}
	}
	fmt.Fprintf(&b, "\n### Step latency with its own network vs --no-internet (`agentd run -- true`, n=%d each, alternating)\n\n", len(withNet))
	b.WriteString("| step | median | p95 |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| --no-internet (loopback only) | %s | %s |\n", benchstat.MS(benchstat.Median(without)), benchstat.MS(benchstat.Quantile(without, 0.95)))
	fmt.Fprintf(&b, "| own network, egress filter | %s | %s |\n", benchstat.MS(benchstat.Median(withNet)), benchstat.MS(benchstat.Quantile(withNet, 0.95)))
	fmt.Fprintf(&b, "| **ratio of medians** | **%.2f** | |\n", float64(benchstat.Median(withNet))/float64(benchstat.Median(without)))
	return b.String(), failure
}

// nodeNamespace makes the named namespace standing in for the node's.
func nodeNamespace() (string, func(), error) {
	var r [3]byte
	rand.Read(r[:])
	name := "benchnode-" + hex.EncodeToString(r[:])
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return "", nil, err
	}
	defer orig.Close()
	h, err := netns.NewNamed(name)
	if err != nil {
		return "", nil, fmt.Errorf("create namespace %s (needs root): %w", name, err)
	}
	h.Close()
	if err := netns.Set(orig); err != nil {
		return "", nil, err
	}
	return name, func() { netns.DeleteNamed(name) }, nil
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}
