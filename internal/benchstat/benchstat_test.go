package benchstat

import (
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3}
	for q, want := range map[float64]time.Duration{0: 1, 0.5: 3, 1: 5, 0.95: 5} {
		if got := Quantile(ds, q); got != want {
			t.Errorf("Quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if ds[0] != 5 {
		t.Errorf("Quantile modified its input: %v", ds)
	}
	if got := MS(6500 * time.Microsecond); got != "6.5 ms" {
		t.Errorf("MS(6.5ms) = %q", got)
	}
	if got := MS(42 * time.Millisecond); got != "42 ms" {
		t.Errorf("MS(42ms) = %q", got)
	}
}
