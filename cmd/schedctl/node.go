package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// drainCmd is `schedctl node drain ID [--deadline D] [--detach]`: the node
// takes no new steps; those still running at the deadline are cancelled.
// It returns once the drain is complete: no live step on the node and
// every sandbox of its steps reported cleaned up (`schedctl nodes` shows
// draining meanwhile). With --detach it returns once the scheduler accepted
// the drain.
type drainCmd struct {
	deadline time.Duration
	detach   bool
}

func (*drainCmd) synopsis() string { return "node drain ID [--deadline D] [--detach] [-o json]" }

func (d *drainCmd) flags(fs *flag.FlagSet) {
	fs.DurationVar(&d.deadline, "deadline", 0, "cancel the steps still running after this long, such as 10m (0: wait for them)")
	fs.BoolVar(&d.detach, "detach", false, "return once the drain is requested instead of when it is complete")
}

// drainPoll is how often a waiting drain reads the node.
const drainPoll = 500 * time.Millisecond

func (d *drainCmd) run(ctx context.Context, c *cli, args []string) (int, error) {
	if err := wantNodeID(args); err != nil {
		return 0, err
	}
	if d.deadline < 0 {
		return 0, fmt.Errorf("%w: --deadline %v: must not be negative", errUsage, d.deadline)
	}
	sc, err := c.client()
	if err != nil {
		return 0, err
	}
	n, err := sc.DrainNode(ctx, args[0], d.deadline)
	if err != nil {
		return 0, fmt.Errorf("drain node %s: %w", args[0], err)
	}
	if !d.detach && !c.g.json() {
		fmt.Fprintf(c.stdout, "node %s draining (%d steps running)\n", n.ID, n.Running)
	}
	for !d.detach && (n.Drain == nil || !n.Drain.Complete) {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("drain node %s: interrupted before it completed (the drain goes on)", args[0])
		case <-time.After(drainPoll):
		}
		if n, err = sc.Node(ctx, args[0]); err != nil {
			return 0, fmt.Errorf("drain node %s: %w", args[0], err)
		}
		if n.State != "draining" {
			return 0, fmt.Errorf("drain node %s: node is %s now, the drain was ended", args[0], n.State)
		}
	}
	if !d.detach && !c.g.json() {
		fmt.Fprintf(c.stdout, "node %s drained: no steps left, sandboxes cleaned up\n", n.ID)
	}
	return 0, showNode(c, n)
}

// undrainCmd is `schedctl node undrain ID`: the node takes steps again.
type undrainCmd struct{}

func (*undrainCmd) synopsis() string    { return "node undrain ID [-o json]" }
func (*undrainCmd) flags(*flag.FlagSet) {}

func (*undrainCmd) run(ctx context.Context, c *cli, args []string) (int, error) {
	if err := wantNodeID(args); err != nil {
		return 0, err
	}
	sc, err := c.client()
	if err != nil {
		return 0, err
	}
	n, err := sc.UndrainNode(ctx, args[0])
	if err != nil {
		return 0, fmt.Errorf("undrain node %s: %w", args[0], err)
	}
	return 0, showNode(c, n)
}

func showNode(c *cli, n api.Node) error {
	if c.g.json() {
		return printJSON(c.stdout, n)
	}
	return printNode(c.stdout, n)
}
