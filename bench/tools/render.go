package main

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/internal/benchstat"
)

// result is the report and the ratios the guards check.
type result struct {
	text                 string
	readRatio, grepRatio float64 // medians of gateway / local calls per second
}

// check applies c's guards to r.
func (r result) check(c config) error {
	var errs []string
	if c.minRead > 0 && r.readRatio < c.minRead {
		errs = append(errs, fmt.Sprintf("Read through the gateway made %.4g of os.ReadFile's calls per second, under the limit of %.4g", r.readRatio, c.minRead))
	}
	if c.minGrep > 0 && r.grepRatio < c.minGrep {
		errs = append(errs, fmt.Sprintf("Grep through the gateway made %.4g of the local walk's calls per second, under the limit of %.4g", r.grepRatio, c.minGrep))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// rates are the calls per second of each sample's gateway and local
// side, and the ratios.
func rates(ss []sample, calls int) (gw, local, ratio []float64) {
	for _, s := range ss {
		gw = append(gw, float64(calls)/s.gw.Seconds())
		local = append(local, float64(calls)/s.local.Seconds())
		ratio = append(ratio, s.ratio())
	}
	return gw, local, ratio
}

// median is the median of xs by the nearest rank, as benchstat's.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func spread(xs []float64, format string) string {
	return fmt.Sprintf(format+" ("+format+"–"+format+")", median(xs), slices.Min(xs), slices.Max(xs))
}

func (b *bench) render(took time.Duration) result {
	c := b.c
	var r result
	var out strings.Builder
	fmt.Fprintf(&out, "# bench/tools\n\n")
	fmt.Fprintf(&out, "`go run ./bench/tools -runs %d -calls %d -files %d`, %s, %s/%s, %d CPUs, %s measured.\n\n",
		c.runs, c.calls, c.files, time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), took.Round(time.Second))
	fmt.Fprintf(&out, "One scheduler member (local blob store) and one gateway on 127.0.0.1, mutual TLS, HTTPS; no node. ")
	fmt.Fprintf(&out, "Each round: %d tool calls through a fresh agent run's grant against %d local operations on the same files, alternating which goes first; medians of %d rounds after one warm-up (min–max in brackets).\n\n", c.calls, c.calls, c.runs)
	fmt.Fprintf(&out, "| call | through the gateway | locally | gateway / local | per gateway call | the file by the files API |\n|---|---|---|---|---|---|\n")
	for _, k := range []struct {
		name, local string
		ss          []sample
		ratio       *float64
	}{
		{"Read of a 10 KB file", "os.ReadFile", b.read, &r.readRatio},
		{fmt.Sprintf("Grep over %d files (%d matches)", c.files, b.matches), "WalkDir + regexp", b.grep, &r.grepRatio},
	} {
		gw, local, ratio := rates(k.ss, c.calls)
		*k.ratio = median(ratio)
		var per, files []time.Duration
		for _, s := range k.ss {
			per = append(per, s.gw/time.Duration(c.calls))
			if s.files > 0 {
				files = append(files, s.files/time.Duration(c.calls))
			}
		}
		plain := "—"
		if len(files) > 0 {
			plain = benchstat.MS(benchstat.Median(files)) + " per GET"
		}
		fmt.Fprintf(&out, "| %s | %s calls/s | %s calls/s (%s) | %s | %s | %s |\n", k.name, spread(gw, "%.0f"), spread(local, "%.0f"), k.local,
			spread(ratio, "%.4f"), benchstat.MS(benchstat.Median(per)), plain)
	}
	r.text = out.String()
	return r
}
