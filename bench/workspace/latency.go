package main

import (
	"context"
	"fmt"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// latencySample is one run of the latency measurement: `true` with the
// empty workspace and without one, submission to terminal record.
type latencySample struct {
	empty, none time.Duration
}

// latencies runs `true` with and without the empty workspace, -n times
// after a warm-up, which goes first alternating run by run.
func (b *bench) latencies(ctx context.Context) error {
	for i := -1; i < b.c.n; i++ {
		var s latencySample
		withWS := func() (err error) { s.empty, err = b.latency(ctx, b.empty); return err }
		without := func() (err error) { s.none, err = b.latency(ctx, ""); return err }
		order := []func() error{withWS, without}
		if i%2 != 0 {
			order = []func() error{without, withWS}
		}
		for _, fn := range order {
			if err := fn(); err != nil {
				return fmt.Errorf("run %d: %w", i+1, err)
			}
		}
		if i >= 0 {
			b.lat = append(b.lat, s)
		}
	}
	return nil
}

// latency submits `true` (with workspace ws unless empty) and returns the
// time until the scheduler answers its terminal record; it waits for the
// step's cleanup before returning.
func (b *bench) latency(ctx context.Context, ws string) (time.Duration, error) {
	start := time.Now()
	st, err := b.submit(ctx, api.StepRequest{Image: "base", Args: []string{"true"}, CPU: 1, MemoryBytes: 512 << 20, Workspace: ws})
	if err != nil {
		return 0, err
	}
	if st, err = b.wait(ctx, st.ID); err != nil {
		return 0, err
	}
	d := time.Since(start)
	if err := succeeded(st); err != nil {
		return 0, err
	}
	return d, b.cleanedUp(ctx, st.ID)
}
