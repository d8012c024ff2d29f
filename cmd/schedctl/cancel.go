package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/stepfollow"
)

// cancelCmd is `schedctl cancel ID [--wait D]`: it asks the scheduler to
// cancel a step and prints "cancel requested" once the scheduler accepted.
// With --wait it then prints "cancel confirmed" once the node reported the
// process gone, or "cancel unverified: REASON" (exit 1) when the node
// cannot confirm it; no confirmation within D is an error.
type cancelCmd struct {
	wait   time.Duration
	reason string
}

func (*cancelCmd) synopsis() string { return "cancel ID [--wait D] [--reason TEXT] [-o json]" }

func (k *cancelCmd) flags(fs *flag.FlagSet) {
	fs.DurationVar(&k.wait, "wait", 0, "wait up to this long for the node to confirm the process is gone, such as 1m")
	fs.StringVar(&k.reason, "reason", "", "why, recorded in the step's events")
}

func (k *cancelCmd) run(ctx context.Context, c *cli, args []string) (int, error) {
	if err := wantStepID(args); err != nil {
		return 0, err
	}
	if k.wait < 0 {
		return 0, fmt.Errorf("%w: --wait %v: must not be negative", errUsage, k.wait)
	}
	id := args[0]
	sc, err := c.client()
	if err != nil {
		return 0, err
	}
	st, err := sc.CancelStep(ctx, id, k.reason)
	if err != nil {
		return 0, fmt.Errorf("cancel step %s: %w", id, err)
	}
	if !c.g.json() {
		fmt.Fprintln(c.stdout, "cancel requested")
	}
	if k.wait > 0 {
		wctx, cancel := context.WithTimeout(ctx, k.wait)
		defer cancel()
		sess, wctx := stepfollow.Start(wctx, c.follow(sc, c.warnf("cancel")), st)
		st, err = sess.WaitFor(wctx, func(s api.Step) bool { return s.Cancel != nil && cancelSettled(s) })
		sess.Close()
		switch {
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			return 0, fmt.Errorf("cancel of step %s not confirmed within %v: the step is %s; see \"schedctl step %s\"",
				id, k.wait, st.State, id)
		case err != nil:
			return 0, err
		}
	}
	if c.g.json() {
		if err := printJSON(c.stdout, st); err != nil {
			return 0, err
		}
	}
	switch {
	case k.wait == 0 || st.Cancel == nil:
		return exitOK, nil
	case !st.Cancel.ConfirmedAt.IsZero():
		if !c.g.json() {
			fmt.Fprintln(c.stdout, "cancel confirmed")
		}
		return exitOK, nil
	}
	if !c.g.json() {
		fmt.Fprintf(c.stdout, "cancel unverified: %s\n", st.Cancel.Unverified)
	}
	return exitError, nil
}
