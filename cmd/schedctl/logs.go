package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"

	"github.com/rodon-compute/rodon/internal/stepfollow"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// logsCmd is `schedctl logs [-f] ID`: a step's output, from the node that
// runs (or ran) it, written byte for byte to stdout and stderr as the step
// wrote it. Without -f it prints what exists and ends; with -f it follows
// until the step's exit. With -o json it prints the stream's frames, one
// JSON object per line, instead.
type logsCmd struct {
	follow bool
}

func (*logsCmd) synopsis() string { return "logs [-f] ID [-o json]" }

func (l *logsCmd) flags(fs *flag.FlagSet) {
	fs.BoolVar(&l.follow, "f", false, "follow the output until the step ends")
}

func (l *logsCmd) run(ctx context.Context, c *cli, args []string) (int, error) {
	if err := wantStepID(args); err != nil {
		return 0, err
	}
	id := args[0]
	sc, err := c.client()
	if err != nil {
		return 0, err
	}
	st, err := sc.Step(ctx, id)
	if err != nil {
		return 0, err
	}
	warn := c.warnf("logs")
	cfg := c.follow(sc, warn)
	if !l.follow {
		loc, err := sc.StreamLocation(ctx, id)
		switch {
		case err != nil && (st.Node == "" || client.IsStatus(err, http.StatusNotFound, http.StatusConflict)):
			warn("step %s has no output to show: it is %s", id, st.State)
			return exitOK, nil
		case err != nil:
			return 0, err
		}
		_, err = stepfollow.Dump(ctx, cfg, id, loc)
		return 0, err
	}
	sess, ctx := stepfollow.Start(ctx, cfg, st)
	_, err = sess.Follow(ctx)
	sess.Close()
	if errors.Is(err, stepfollow.ErrNoStream) {
		if cur, _ := sess.Current(); cur.Node == "" {
			warn("step %s has no output: it is %s", id, cur.State)
			return exitOK, nil
		}
		return 0, fmt.Errorf("output incomplete: %w", err)
	}
	return 0, err
}
