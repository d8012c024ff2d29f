// Package ticker runs periodic work: the loops of heartbeats, maintenance
// passes and re-checks, written once.
package ticker

import (
	"context"
	"time"
)

// Every calls f once per period d, the first time after d, until ctx ends
// or f returns false. A call that takes longer than d delays the next one
// (ticks do not pile up).
func Every(ctx context.Context, d time.Duration, f func() bool) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !f() {
			return
		}
	}
}
