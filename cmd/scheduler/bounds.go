package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/rodon-compute/rodon/scheduler"
)

// boundFlags are the bounds of `scheduler serve` on how long anything
// may wait (docs/PROTOCOL.md, "Steps that cannot wait forever"): every one
// has a default and must be positive.
type boundFlags struct {
	queueTimeout  time.Duration
	startTimeout  time.Duration
	createTimeout time.Duration
}

func (b *boundFlags) register(fs *flag.FlagSet, d scheduler.Config) {
	fs.DurationVar(&b.queueTimeout, "queue-timeout", d.QueueTimeout,
		"how long a step may wait in the queue for capacity before it expires")
	fs.DurationVar(&b.startTimeout, "start-timeout", d.StartTimeout,
		"how long a placed step may wait for its node to report it starting; then an idempotent step is placed again and any other fails")
	fs.DurationVar(&b.createTimeout, "create-timeout", d.CreateTimeout,
		"how long after its placement a step may take to be running (its image pulled, its sandbox started); then as --start-timeout")
}

// apply checks the bounds and sets them in c; every error names the flag.
func (b *boundFlags) apply(c *scheduler.Config) error {
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"--queue-timeout", b.queueTimeout}, {"--start-timeout", b.startTimeout}, {"--create-timeout", b.createTimeout}} {
		if f.v <= 0 {
			return fmt.Errorf("%w: %s %v: must be a positive duration such as 10m", errUsage, f.name, f.v)
		}
	}
	if b.createTimeout < b.startTimeout {
		return fmt.Errorf("%w: --create-timeout %v: must be at least --start-timeout %v", errUsage, b.createTimeout, b.startTimeout)
	}
	c.QueueTimeout, c.StartTimeout, c.CreateTimeout = b.queueTimeout, b.startTimeout, b.createTimeout
	return nil
}
