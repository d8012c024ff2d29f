package ticker

import (
	"context"
	"testing"
	"time"
)

func TestEvery(t *testing.T) {
	start := time.Now()
	n := 0
	Every(t.Context(), 10*time.Millisecond, func() bool {
		n++
		return n < 3
	})
	if n != 3 {
		t.Errorf("f called %d times, want 3 (it returned false on the third)", n)
	}
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Errorf("three periods of 10ms took %v", took)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	Every(ctx, time.Millisecond, func() bool {
		t.Error("f called after ctx ended")
		return true
	})
}
