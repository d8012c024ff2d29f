package main

import (
	"strings"
	"testing"
	"time"
)

func samples(ms ...int) []sample {
	var out []sample
	for _, m := range ms {
		out = append(out, sample{toExit: time.Duration(m) * time.Millisecond})
	}
	return out
}

// TestCheckStacksRatios: the ratio guards compare with ctr's p50 from the
// same run, and fail past their limit.
func TestCheckStacksRatios(t *testing.T) {
	c := config{maxWarmP50Ratio: 0.5, maxWarmP99Ratio: 1.25, maxColdP50Ratio: 2}
	ctr := samples(600, 620, 640)
	if err := checkStacks(c, ctr, samples(640, 650, 660), samples(98, 100, 128), nil); err != nil {
		t.Fatalf("within the limits: %v", err)
	}
	for _, tc := range []struct {
		name       string
		cold, warm []sample
		want       string
	}{
		{"warm p50 as slow as a cold step", samples(640), samples(600, 620, 640), "warm submit to exit record: p50"},
		{"warm p99", samples(640), samples(90, 100, 900), "p99"},
		{"cold p50", samples(1300, 1300, 1300), samples(100), "cold submit to exit record: p50"},
	} {
		err := checkStacks(c, ctr, tc.cold, tc.warm, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: checkStacks() = %v; want an error naming %q", tc.name, err, tc.want)
		}
	}
	if err := checkStacks(c, nil, samples(640), samples(100), nil); err == nil {
		t.Error("a ratio guard without ctr samples passed")
	}
}
