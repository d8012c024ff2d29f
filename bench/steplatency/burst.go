package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/benchstat"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// burstResult is one burst of steps submitted at once (issue 14, Done 3).
type burstResult struct {
	n, failed, hits, readyBefore int
	toExit                       []time.Duration // submit to exit record, leader clock
	wall                         time.Duration   // first submission to the last step's end
}

// runBurst submits c.burst steps (`true`) at once to stack s, twice: the
// first teaches the pool the demand (its size follows the most claims it
// saw in a second, within its budget); once the pool has grown (or has not
// grown for 20 s, at most 3 minutes), the second is measured.
func runBurst(ctx context.Context, c config, s *stack) (burstResult, error) {
	cl, err := client.New(s.url, client.Options{RetryFor: 30 * time.Second})
	if err != nil {
		return burstResult{}, err
	}
	if _, err := oneBurst(ctx, c, cl, "teach"); err != nil {
		return burstResult{}, fmt.Errorf("teaching burst: %w", err)
	}
	prev, still := -1, time.Now()
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		v := s.poolReady()
		if v >= c.burst {
			break
		}
		if v != prev {
			prev, still = v, time.Now()
		} else if time.Since(still) > 20*time.Second {
			break
		}
	}
	ready := s.poolReady()
	r, err := oneBurst(ctx, c, cl, "measure")
	r.readyBefore = ready
	return r, err
}

// oneBurst submits c.burst steps concurrently and waits for each to end.
func oneBurst(ctx context.Context, c config, cl *client.Client, name string) (burstResult, error) {
	r := burstResult{n: c.burst}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, c.burst)
	start := time.Now()
	for i := range c.burst {
		id := fmt.Sprintf("burst-%s-%d-%d", name, os.Getpid(), i)
		wg.Go(func() {
			// 32 MiB and -burst-cpu each: a hundred fit the node.
			req := api.StepRequest{ID: id, Image: "base", Args: []string{"true"}, CPU: c.burstCPU, MemoryBytes: 32 << 20}
			if _, err := cl.SubmitStep(ctx, req); err != nil {
				errs[i] = err
				return
			}
			st, err := waitEnd(ctx, cl, id)
			if err != nil {
				errs[i] = err
				return
			}
			var exit time.Time
			warm := false
			for _, e := range st.Events {
				switch e.Kind {
				case api.EventExited:
					exit = e.Time
				case api.EventSandboxWarm:
					warm = true
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if st.State != "exited" || st.ExitCode == nil || *st.ExitCode != 0 || exit.IsZero() {
				r.failed++
				return
			}
			if warm {
				r.hits++
			}
			r.toExit = append(r.toExit, exit.Sub(st.Phases.Queued))
		})
	}
	wg.Wait()
	r.wall = time.Since(start)
	return r, errors.Join(errs...)
}

// waitEnd long-polls step id until it is terminal (at most 5 minutes).
func waitEnd(ctx context.Context, cl *client.Client, id string) (api.Step, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var index uint64
	for {
		st, err := cl.WaitStep(ctx, id, index, 30*time.Second)
		if err != nil {
			return st, fmt.Errorf("wait for step %s: %w", id, err)
		}
		if st.Terminal() {
			return st, nil
		}
		index = st.ModifyIndex
	}
}

func renderBurst(r burstResult, c config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nBurst: %d steps (`true`, %g CPU, 32 MiB) submitted at once through the scheduler's client to the warm stack's one node (`--cpu %s --warm-pool-memory %s --warm-pool-min %d`), "+
		"after a first burst of the same size that taught the pool the demand; %d sandboxes were ready when it started. Submit to exit record as above.\n\n", r.n, c.burstCPU, c.stackCPU, c.poolMemory, c.poolMin, r.readyBefore)
	fmt.Fprintf(&b, "| burst | value |\n|---|---|\n| submit to exit record p50 | %s |\n| **p99** | **%s** |\n| failed | %d |\n| pool hits | %d of %d |\n| all ended after | %s |\n",
		benchstat.MS(benchstat.Quantile(r.toExit, .5)), benchstat.MS(benchstat.Quantile(r.toExit, .99)), r.failed, r.hits, r.n, benchstat.MS(r.wall))
	return b.String()
}
