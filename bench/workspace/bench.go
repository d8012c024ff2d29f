package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/benchfleet"
	"github.com/rodon-compute/rodon/internal/benchtls"
	"github.com/rodon-compute/rodon/internal/pki"
)

// bench is the benchmark's fleet, its clients and what it measured.
type bench struct {
	c  config
	f  *benchfleet.Fleet
	gw *benchfleet.Client
	// member is an HTTP client of the scheduler's listener, as the
	// operator (for its /metrics).
	member *http.Client
	// dir holds the source file and cp's copies, on the disk of the
	// fleet's data (both under the system's temporary directory).
	dir string
	// ws is the workspace of the uploads and the delta steps; empty one
	// that is never written.
	ws, empty string

	// steps is every step submitted, to let them end and be cleaned up
	// before agentd stops.
	steps []string

	up, down []transferSample
	delta    deltaResult
	lat      []latencySample
}

// fleetOptions name the fleet's directory and node workspace-PID-tls. A
// file larger than the gateway's default upload limit (1 GiB) needs a
// larger one.
func fleetOptions(c config) benchfleet.Options {
	o := benchfleet.Options{Prefix: "workspace"}
	if c.size > 1<<30 {
		o.GatewayArgs = []string{"--max-file-size", strconv.FormatInt(c.size, 10)}
	}
	return o
}

func run(ctx context.Context, c config) (report string, err error) {
	o := fleetOptions(c)
	mode, _, remove, err := benchfleet.Certificates(c.bin, o)
	defer remove()
	if err != nil {
		return "", err
	}
	f, err := benchfleet.Start(ctx, c.bin, mode, o)
	if f == nil {
		return "", err
	}
	b := &bench{c: c, f: f, dir: filepath.Join(f.Dir, "files")}
	defer func() {
		b.drain()
		if cerr := f.Close(err != nil); cerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up the fleet: %w", cerr))
		}
	}()
	if err != nil {
		return "", fmt.Errorf("start the fleet: %w", err)
	}
	if err := b.setUp(ctx, mode); err != nil {
		return "", err
	}

	start := time.Now()
	if err := b.transfers(ctx); err != nil {
		return "", err
	}
	if b.delta, err = b.deltaSteps(ctx); err != nil {
		return "", fmt.Errorf("delta steps: %w", err)
	}
	if err := b.latencies(ctx); err != nil {
		return "", fmt.Errorf("step latency: %w", err)
	}
	r := b.render(time.Since(start))
	return r.text, r.check(c)
}

// setUp signs in (the owner made with `gateway bootstrap`, then an admin
// API key), makes the two workspaces and the source file.
func (b *bench) setUp(ctx context.Context, mode benchtls.Mode) error {
	var err error
	if b.gw, err = b.f.SignIn(ctx); err != nil {
		return err
	}
	for _, ws := range []*string{&b.ws, &b.empty} {
		var w struct {
			ID string `json:"id"`
		}
		if err := b.gw.Do(ctx, http.MethodPost, "/v1/workspaces", map[string]string{"name": "bench"}, &w); err != nil {
			return err
		}
		*ws = w.ID
	}
	t, err := mode.Transport(benchfleet.Operator, pki.AllowRoles(pki.RoleMember))
	if err != nil {
		return err
	}
	b.member = &http.Client{Transport: t, Timeout: 30 * time.Second}
	if err := os.Mkdir(b.dir, 0o700); err != nil {
		return err
	}
	return writeRandom(filepath.Join(b.dir, srcName), b.c.size)
}

// submit queues a step on the scheduler and remembers it for drain.
func (b *bench) submit(ctx context.Context, req api.StepRequest) (api.Step, error) {
	st, err := b.f.Sched.SubmitStep(ctx, req)
	if err == nil {
		b.steps = append(b.steps, st.ID)
	}
	return st, err
}

// wait waits until step id is terminal and returns that record, as soon
// as the scheduler has it (long polls).
func (b *bench) wait(ctx context.Context, id string) (api.Step, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var index uint64
	for {
		st, err := b.f.Sched.WaitStep(ctx, id, index, 30*time.Second)
		if err != nil {
			return st, fmt.Errorf("wait for step %s: %w", id, err)
		}
		if st.Terminal() {
			return st, nil
		}
		index = st.ModifyIndex
	}
}

// succeeded checks that a terminal step exited 0.
func succeeded(st api.Step) error {
	switch {
	case st.State != api.StepExited:
		return fmt.Errorf("step %s ended %s: %s", st.ID, st.State, st.Reason)
	case st.ExitCode == nil || *st.ExitCode != 0:
		code := "none"
		if st.ExitCode != nil {
			code = fmt.Sprint(*st.ExitCode)
		}
		return fmt.Errorf("step %s exited with code %s, want 0: %s", st.ID, code, st.Reason)
	}
	return nil
}

// cleanedUp waits until step id's sandbox is gone, so that the next
// measurement does not share the machine with its cleanup.
func (b *bench) cleanedUp(ctx context.Context, id string) error {
	return benchfleet.WaitFor(ctx, time.Minute, "step "+id+" to be cleaned up", func() bool {
		st, err := b.f.Sched.Step(ctx, id)
		return err == nil && st.Terminal() && !st.Phases.CleanedUp.IsZero()
	})
}

// drain cancels every step not ended and waits until each has ended and
// its sandbox is cleaned up (with a fresh context: ctx may be the
// cancelled one), so that agentd stops with nothing running.
func (b *bench) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, id := range b.steps {
		if st, err := b.f.Sched.Step(ctx, id); err == nil && !st.Terminal() {
			b.f.Sched.CancelStep(ctx, id, "benchmark ending")
		}
		if err := b.cleanedUp(ctx, id); err != nil {
			fmt.Fprintln(os.Stderr, "workspace:", err)
		}
	}
}
