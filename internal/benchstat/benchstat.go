// Package benchstat holds the small statistics the benchmarks in bench/
// report: quantiles of durations and their formatting.
package benchstat

import (
	"fmt"
	"slices"
	"time"
)

// Quantile returns the q-quantile (0 to 1) of ds by the nearest rank; ds is
// not modified. It panics on an empty ds.
func Quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1)+0.5)]
}

// Median is Quantile(ds, 0.5).
func Median(ds []time.Duration) time.Duration { return Quantile(ds, 0.5) }

// MS formats d in whole milliseconds ("42 ms"); below 10 ms with one
// decimal ("6.5 ms").
func MS(d time.Duration) string {
	f := float64(d) / float64(time.Millisecond)
	if f < 10 {
		return fmt.Sprintf("%.1f ms", f)
	}
	return fmt.Sprintf("%.0f ms", f)
}
