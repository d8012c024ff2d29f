package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/rodon-compute/rodon/internal/cli"
	"github.com/rodon-compute/rodon/scheduler"
)

// boundFlags are the bounds of `scheduler serve` on how long anything
// may wait or be kept (docs/PROTOCOL.md, "Steps that cannot wait forever"
// and "Retention"): every one has a default, a minimum and a maximum.
type boundFlags struct {
	queueTimeout  time.Duration
	startTimeout  time.Duration
	createTimeout time.Duration
	stepRetention time.Duration
	http          scheduler.HTTPTimeouts
}

// bound is one bound flag's value and range.
type bound struct {
	name     string
	v        *time.Duration
	min, max time.Duration
	help     string
}

func (b *boundFlags) list() []bound {
	return []bound{
		{"queue-timeout", &b.queueTimeout, time.Second, scheduler.MaxQueueTimeout,
			"how long a step may wait in the queue for capacity before it expires"},
		{"start-timeout", &b.startTimeout, 100 * time.Millisecond, scheduler.MaxStartTimeout,
			"how long a placed step may wait for its node to report it starting; then an idempotent step is placed again and any other fails"},
		{"create-timeout", &b.createTimeout, 100 * time.Millisecond, scheduler.MaxCreateTimeout,
			"how long after its placement a step may take to be running (its image pulled, its sandbox started); then as --start-timeout"},
		{"step-retention", &b.stepRetention, time.Second, scheduler.MaxStepRetention,
			"how long an ended step stays in the replicated state; then the leader compacts it out (404 from then on)"},
		{"http-header-timeout", &b.http.Header, 100 * time.Millisecond, scheduler.MaxHTTPTimeout,
			"how long a client may take for the TLS handshake and a request's headers"},
		{"http-timeout", &b.http.Request, 100 * time.Millisecond, scheduler.MaxHTTPTimeout,
			"how long a request's body and answer may take, on every route but the long polls (which get their wait more) and the snapshots"},
		{"snapshot-timeout", &b.http.Snapshot, 100 * time.Millisecond, scheduler.MaxHTTPTimeout,
			"how long saving or restoring a snapshot (GET /v1/snapshot, POST /v1/snapshot/restore) may take"},
		{"http-idle-timeout", &b.http.Idle, 100 * time.Millisecond, scheduler.MaxHTTPTimeout,
			"how long a kept-alive connection may wait for its next request"},
	}
}

func (b *boundFlags) register(fs *flag.FlagSet, d scheduler.Config) {
	b.queueTimeout, b.startTimeout, b.createTimeout, b.stepRetention = d.QueueTimeout, d.StartTimeout, d.CreateTimeout, d.StepRetention
	b.http = d.HTTP
	for _, f := range b.list() {
		fs.DurationVar(f.v, f.name, *f.v, fmt.Sprintf("%s (%v to %v)", f.help, f.min, f.max))
	}
}

// apply checks the bounds and sets them in c; every error names the flag.
func (b *boundFlags) apply(c *scheduler.Config) error {
	for _, f := range b.list() {
		if *f.v < f.min || *f.v > f.max {
			return fmt.Errorf("%w: --%s %v: want %v to %v", cli.ErrUsage, f.name, *f.v, f.min, f.max)
		}
	}
	if b.createTimeout < b.startTimeout {
		return fmt.Errorf("%w: --create-timeout %v: must be at least --start-timeout %v", cli.ErrUsage, b.createTimeout, b.startTimeout)
	}
	c.QueueTimeout, c.StartTimeout, c.CreateTimeout, c.StepRetention = b.queueTimeout, b.startTimeout, b.createTimeout, b.stepRetention
	c.HTTP = b.http
	return nil
}
