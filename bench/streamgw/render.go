package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/internal/benchstat"
)

// stats are one fleet's samples as columns.
type stats struct {
	gwStored, directStored, agentStored []time.Duration
	gwLive, directLive, step            []time.Duration
	gwLag, directLag                    []time.Duration
	fbGW, fbDirect                      []time.Duration
	late, redials                       int
}

func statsOf(b *bench) stats {
	var s stats
	for _, t := range b.tp {
		s.gwStored, s.directStored, s.agentStored = append(s.gwStored, t.gwStored), append(s.directStored, t.directStored), append(s.agentStored, t.agentStored)
		s.gwLive, s.directLive, s.step = append(s.gwLive, t.gwLive), append(s.directLive, t.directLive), append(s.step, t.step)
		s.gwLag, s.directLag = append(s.gwLag, t.gwLag), append(s.directLag, t.directLag)
		s.redials += t.redials
	}
	for _, f := range b.fb {
		s.fbGW, s.fbDirect = append(s.fbGW, f.gw), append(s.fbDirect, f.direct)
		if f.lateConnect {
			s.late++
		}
		s.redials += f.redials
	}
	return s
}

// render is the report of both fleets and the ratio the guard checks:
// with mutual TLS, the gateway's median throughput on a finished step
// over schedctl's.
func render(c config, bs []*bench, took time.Duration) (string, float64) {
	p, t := statsOf(bs[plainIdx]), statsOf(bs[tlsIdx])
	med := benchstat.Median
	// rate is MB/s over d; ratio of rates is the inverse ratio of times.
	rate := func(d time.Duration) float64 { return float64(c.mb) / d.Seconds() }
	mbps := func(d time.Duration) string { return fmt.Sprintf("%.0f MB/s", rate(d)) }
	spread := func(ds []time.Duration) string {
		return fmt.Sprintf("%.0f (%.0f–%.0f) MB/s", rate(med(ds)), rate(benchstat.Quantile(ds, 1)), rate(benchstat.Quantile(ds, 0)))
	}
	faster := func(num, den []time.Duration) float64 { return float64(med(den)) / float64(med(num)) }
	// msf is d in milliseconds, rounded to 0.1 ms (so that a difference
	// under 0.05 ms is +0.0, not -0.0).
	msf := func(d time.Duration) float64 {
		return float64(d.Round(100*time.Microsecond)) / float64(time.Millisecond)
	}

	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "### Step output: gateway websocket vs `schedctl logs -f`, mutual TLS vs plaintext (%s, host %s)\n\n", time.Now().UTC().Format(time.RFC3339), host)
	fmt.Fprintf(&b, "Two fleets on 127.0.0.1, up side by side, each one scheduler member, one `agentd serve --network none` and one gateway: "+
		"one in plaintext (`--plaintext` everywhere, the baseline), one with mutual TLS (every component with its certificate from a CA made for the run; "+
		"the gateway's public listener on HTTPS with a certificate of the same CA, so the websocket is `wss://`). "+
		"%d runs of each measurement on each fleet after one warm-up run, which fleet goes first alternating run by run. "+
		"Throughput step: `head -c %d /dev/zero | tr '\\0' x` in `base` (%d MB of stdout).\n\n", c.runs, int64(c.mb)*1_000_000, c.mb)

	ratio := faster(t.gwStored, t.directStored)
	fmt.Fprintf(&b, "Throughput of a finished step's stored log, each run reading the same step each way, one after the other, the order reversed every other run "+
		"(from starting the reader to the exit frame, connection set-up and decoding of every frame included); median (slowest–fastest):\n\n")
	fmt.Fprintf(&b, "| reader | plaintext | mutual TLS | TLS / plaintext, medians |\n|---|---|---|---|\n")
	fmt.Fprintf(&b, "| `schedctl logs -f` (agent's NDJSON stream, direct) | %s | %s | **%.2f** |\n", spread(p.directStored), spread(t.directStored), faster(t.directStored, p.directStored))
	fmt.Fprintf(&b, "| gateway websocket, `from=0` | %s | %s | **%.2f** |\n", spread(p.gwStored), spread(t.gwStored), faster(t.gwStored, p.gwStored))
	fmt.Fprintf(&b, "| **ratio of medians, gateway / direct** | %.2f | **%.2f** | |\n", faster(p.gwStored, p.directStored), ratio)
	fmt.Fprintf(&b, "| the agent's NDJSON stream read in this process (no schedctl process, no stdout pipe) | %s | %s | %.2f |\n",
		spread(p.agentStored), spread(t.agentStored), faster(t.agentStored, p.agentStored))
	fmt.Fprintf(&b, "| ratio of medians, gateway / agent's stream in this process (the relay's own cost) | %.2f | %.2f | |\n\n",
		faster(p.gwStored, p.agentStored), faster(t.gwStored, t.agentStored))

	fmt.Fprintf(&b, "While the step runs: both readers started at once as soon as the step's id is known, reading concurrently "+
		"(rate from the step's first output to the exit frame; lag from the step's exit, phases.exited, to the exit frame); medians:\n\n")
	fmt.Fprintf(&b, "| reader | plaintext rate | lag | mutual TLS rate | lag | TLS / plaintext, rates |\n|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| the step itself (first output to exit) | %s | | %s | | %.2f |\n", mbps(med(p.step)), mbps(med(t.step)), faster(t.step, p.step))
	fmt.Fprintf(&b, "| `schedctl logs -f` | %s | %s | %s | %s | %.2f |\n", mbps(med(p.directLive)), benchstat.MS(med(p.directLag)),
		mbps(med(t.directLive)), benchstat.MS(med(t.directLag)), faster(t.directLive, p.directLive))
	fmt.Fprintf(&b, "| gateway websocket | %s | %s | %s | %s | %.2f |\n", mbps(med(p.gwLive)), benchstat.MS(med(p.gwLag)),
		mbps(med(t.gwLive)), benchstat.MS(med(t.gwLag)), faster(t.gwLive, p.gwLive))
	fmt.Fprintf(&b, "| ratio of median rates, gateway / direct | %.2f | | %.2f | | |\n\n", faster(p.gwLive, p.directLive), faster(t.gwLive, t.directLive))

	fmt.Fprintf(&b, "First byte: a step runs `sleep 0.5; echo first-byte; sleep 2`; both readers start as soon as its id is known; "+
		"latency from the step's phases.first_output (the node's time for the line) to the bytes arriving in the reader; median (slowest):\n\n")
	fb := func(ds []time.Duration) string {
		return fmt.Sprintf("%s (%s)", benchstat.MS(med(ds)), benchstat.MS(benchstat.Quantile(ds, 1)))
	}
	fmt.Fprintf(&b, "| reader | plaintext | mutual TLS | TLS / plaintext, medians | TLS − plaintext, medians |\n|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| `schedctl logs -f` | %s | %s | %.2f | %+.1f ms |\n", fb(p.fbDirect), fb(t.fbDirect),
		float64(med(t.fbDirect))/float64(med(p.fbDirect)), msf(med(t.fbDirect)-med(p.fbDirect)))
	fmt.Fprintf(&b, "| gateway websocket | %s | %s | %.2f | %+.1f ms |\n", fb(p.fbGW), fb(t.fbGW),
		float64(med(t.fbGW))/float64(med(p.fbGW)), msf(med(t.fbGW)-med(p.fbGW)))
	fmt.Fprintf(&b, "| **difference of medians, gateway − direct** | %+.1f ms | **%+.1f ms** | | |\n\n",
		msf(med(p.fbGW)-med(p.fbDirect)), msf(med(t.fbGW)-med(t.fbDirect)))

	fmt.Fprintf(&b, "Gateway websocket opened after the line was written: %d of %d first-byte runs in plaintext, %d of %d with TLS. "+
		"Websockets closed 4404 before any frame and opened again (step placed, its log not open yet): %d in plaintext, %d with TLS. "+
		"Wall time of the measurements (both fleets, warm-ups included): %.0f s.\n\n",
		p.late, len(p.fbGW), t.late, len(t.fbGW), p.redials, t.redials, took.Seconds())
	fmt.Fprintf(&b, "Command: `go build -o bin/ ./cmd/... && flock /tmp/rodon-host.lock go run ./bench/streamgw %s`\n", strings.Join(os.Args[1:], " "))
	return b.String(), ratio
}
