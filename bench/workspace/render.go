package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/internal/benchstat"
	"github.com/rodon-compute/rodon/internal/size"
)

// result is the report and the ratios the guards check.
type result struct {
	text               string
	upRatio, downRatio float64 // gateway / cp, medians of throughput
	emptyRatio         float64 // empty workspace / none, medians of latency
	delta              deltaResult
}

// check applies c's guards to r.
func (r result) check(c config) error {
	var errs []string
	if c.minUpload > 0 && r.upRatio < c.minUpload {
		errs = append(errs, fmt.Sprintf("the median upload throughput is %.2f of cp's, under the limit of %.2f", r.upRatio, c.minUpload))
	}
	if c.minDown > 0 && r.downRatio < c.minDown {
		errs = append(errs, fmt.Sprintf("the median download throughput is %.2f of cp's, under the limit of %.2f", r.downRatio, c.minDown))
	}
	if c.checkDelta {
		if err := r.delta.check(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if c.maxEmpty > 0 && r.emptyRatio > c.maxEmpty {
		errs = append(errs, fmt.Sprintf("the median latency of a step with an empty workspace is %.2f times that of one without, over the limit of %.2f", r.emptyRatio, c.maxEmpty))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// columns splits transfer samples into the gateway's times and cp's.
func columns(ss []transferSample) (gw, cp []time.Duration) {
	for _, s := range ss {
		gw, cp = append(gw, s.gw), append(cp, s.cp)
	}
	return gw, cp
}

func (b *bench) render(took time.Duration) result {
	c := b.c
	med := benchstat.Median
	rate := func(d time.Duration) float64 { return float64(c.size) / 1e6 / d.Seconds() }
	spread := func(ds []time.Duration) string {
		return fmt.Sprintf("%.0f (%.0f–%.0f) MB/s", rate(med(ds)), rate(benchstat.Quantile(ds, 1)), rate(benchstat.Quantile(ds, 0)))
	}
	faster := func(num, den []time.Duration) float64 { return float64(med(den)) / float64(med(num)) }
	upGW, upCP := columns(b.up)
	downGW, downCP := columns(b.down)
	var empty, none []time.Duration
	for _, s := range b.lat {
		empty, none = append(empty, s.empty), append(none, s.none)
	}
	r := result{upRatio: faster(upGW, upCP), downRatio: faster(downGW, downCP),
		emptyRatio: float64(med(empty)) / float64(med(none)), delta: b.delta}

	var w strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&w, "### Workspaces: transfers through the gateway vs `cp`, the bytes a step moves, step latency (%s, host %s)\n\n", time.Now().UTC().Format(time.RFC3339), host)
	fmt.Fprintf(&w, "One fleet on 127.0.0.1 with mutual TLS between every component (one scheduler member with the local blob store in its data directory, "+
		"one `agentd serve --network none`, one gateway with HTTPS). File of %s (%d bytes) of random bytes; %d runs of each transfer after one warm-up run, "+
		"the gateway and `cp` alternating which goes first. Counted for both: from the start of the request (of `cp`) to its answer (its exit), "+
		"then `sync`; a `sync` before each is not counted. Every upload is a new blob (the run's number in its first bytes). MB = 10^6 bytes.\n\n",
		size.Format(c.size), c.size, c.runs)
	fmt.Fprintf(&w, "| transfer | through the gateway | `cp` of the same bytes | gateway / cp, medians |\n|---|---|---|---|\n")
	fmt.Fprintf(&w, "| upload, `PUT /v1/workspaces/{id}/files/big.bin` streamed from a file | %s | %s | **%.2f** |\n", spread(upGW), spread(upCP), r.upRatio)
	fmt.Fprintf(&w, "| download, `GET .../files/big.bin` into a file | %s | %s | **%.2f** |\n\n", spread(downGW), spread(downCP), r.downRatio)

	d := b.delta
	est := func(m stepMoves) string {
		if m.estimated {
			return " (manifest sizes estimated from the tree route)"
		}
		return ""
	}
	fmt.Fprintf(&w, "The bytes a step moves, on the workspace of big.bin and a %d-byte small.bin (%d bytes in all); both steps run `%s` in `base`; "+
		"step A from the head with the node's blob cache cold, step B from A's revision (as a run's next step). "+
		"Node: agentd's `%s` and `%s`; store: the scheduler's blob requests (`%s`, `%s`), each the difference before and after the step:\n\n",
		smallBytes, d.workspace, changeSmall[2], nodeFetched, nodeUploaded, storeGets, storePuts)
	fmt.Fprintf(&w, "| step | fetched by the node | uploaded | blob GETs | blob PUTs | moved / workspace | allowed (changed file and manifest, each way) |\n|---|---|---|---|---|---|---|\n")
	for _, row := range []struct {
		name string
		m    stepMoves
	}{{"A (cold cache)", d.a}, {"**B (the next step)**", d.b}} {
		f, u := row.m.limit()
		fmt.Fprintf(&w, "| %s | %s | %s | %d | %d | %.4f %% | ≤ %d B fetched, ≤ %d B uploaded%s |\n", row.name, bytesOf(row.m.fetched), bytesOf(row.m.uploaded),
			row.m.gets, row.m.puts, 100*float64(row.m.fetched+row.m.uploaded)/float64(max(d.workspace, 1)), f, u, est(row.m))
	}
	fmt.Fprintln(&w)

	fmt.Fprintf(&w, "Step latency of `true`, from the submission to the scheduler to its terminal record (the exit record, after the node's upload), "+
		"%d runs each after one warm-up run, alternating which goes first, each step's cleanup awaited before the next; median (p95):\n\n", c.n)
	p95 := func(ds []time.Duration) string {
		return fmt.Sprintf("%s (%s)", benchstat.MS(med(ds)), benchstat.MS(benchstat.Quantile(ds, 0.95)))
	}
	fmt.Fprintf(&w, "| step | latency |\n|---|---|\n| without a workspace | %s |\n| with an empty workspace of the store | %s |\n", p95(none), p95(empty))
	fmt.Fprintf(&w, "| **ratio of medians, empty workspace / none** | **%.2f** |\n\n", r.emptyRatio)
	fmt.Fprintf(&w, "Wall time of the measurements (warm-ups included): %.0f s.\n\n", took.Seconds())
	fmt.Fprintf(&w, "Command: `go build -o bin/ ./cmd/... && flock /tmp/rodon-host.lock go run ./bench/workspace %s`\n", strings.Join(os.Args[1:], " "))
	r.text = w.String()
	return r
}

// bytesOf is n in bytes, and in the units of internal/size from 1 MiB.
func bytesOf(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%d B (%s)", n, size.Format(n))
}
