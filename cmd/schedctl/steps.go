package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// stepStates are the states a step can be in, in lifecycle order.
var stepStates = []string{"queued", "placed", "starting", "running", "exited", "failed", "cancelled", "lost", "expired"}

// stepsCmd is `schedctl steps [--state S] [--node ID]`: the steps, filtered
// by state and node.
type stepsCmd struct {
	state  string
	node   string
	limit  int
	cursor string
}

func (*stepsCmd) synopsis() string {
	return "steps [--state S] [--node ID] [--limit N [--cursor C]] [-o json]"
}

func (s *stepsCmd) flags(fs *flag.FlagSet) {
	fs.StringVar(&s.state, "state", "", "only steps in this state: "+strings.Join(stepStates, ", "))
	fs.StringVar(&s.node, "node", "", "only steps placed on this node")
	fs.IntVar(&s.limit, "limit", 0, fmt.Sprintf("show one page of at most N steps (at most %d; 0: every step, read page after page); "+
		"the cursor of the next page is printed on stderr", client.MaxPageLimit))
	fs.StringVar(&s.cursor, "cursor", "", "with --limit: the page that starts at this cursor (printed by the previous page)")
}

func (s *stepsCmd) run(ctx context.Context, c *cli, args []string) (int, error) {
	if err := wantArgs(args); err != nil {
		return 0, err
	}
	switch {
	case s.state != "" && !slices.Contains(stepStates, s.state):
		return 0, fmt.Errorf("%w: --state %q: want one of %s", errUsage, s.state, strings.Join(stepStates, ", "))
	case s.limit < 0 || s.limit > client.MaxPageLimit:
		return 0, fmt.Errorf("%w: --limit %d: want 1 to %d steps, or 0 for all", errUsage, s.limit, client.MaxPageLimit)
	case s.cursor != "" && s.limit == 0:
		return 0, fmt.Errorf("%w: --cursor needs --limit: it names a page of that size", errUsage)
	}
	sc, err := c.client()
	if err != nil {
		return 0, err
	}
	var steps []api.Step
	if s.limit > 0 {
		var next string
		steps, next, err = sc.StepsPage(ctx, s.state, s.node, s.limit, s.cursor)
		if err == nil && next != "" {
			c.warnf("steps")("more steps: schedctl steps --limit %d --cursor %s", s.limit, next)
		}
	} else {
		steps, err = sc.Steps(ctx, client.StepFilter{State: s.state, Node: s.node})
	}
	if err != nil {
		return 0, err
	}
	if c.g.json() {
		if steps == nil {
			steps = []api.Step{}
		}
		return 0, printJSON(c.stdout, steps)
	}
	now := c.now()
	t := newTable(c.stdout, "ID", "STATE", "EXIT", "TERMINATED BY", "NODE", "ATTEMPTS", "CANCEL", "AGE", "COMMAND")
	for _, st := range steps {
		t.row(st.ID, st.State, fmtExitCode(st.ExitCode), st.TerminatedBy, st.Node, strconv.Itoa(st.Attempts),
			fmtCancel(st.Cancel), fmtAge(now, st.Phases.Queued), fmtArgv(st.Spec.Args, 40))
	}
	return 0, t.flush()
}

func fmtExitCode(code *int) string {
	if code == nil {
		return ""
	}
	return strconv.Itoa(*code)
}

// fmtCancel describes a step's cancel: requested, confirmed or unverified.
func fmtCancel(c *api.Cancel) string {
	switch {
	case c == nil:
		return ""
	case !c.ConfirmedAt.IsZero():
		return "confirmed"
	case c.Unverified != "":
		return "unverified"
	}
	return "requested"
}

// fmtArgv writes a command line, shell-quoted where needed and cut to max
// characters (0: no limit).
func fmtArgv(argv []string, max int) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`|&;<>()*?[]{}~#!") {
			a = strconv.Quote(a)
		}
		q[i] = a
	}
	s := strings.Join(q, " ")
	if max > 0 && len(s) > max {
		s = s[:max-3] + "..."
	}
	return s
}
