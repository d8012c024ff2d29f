package main

import (
	"context"
	"flag"
	"strconv"
)

// membersCmd is `schedctl members`: the Raft members, which one leads and
// the last index each applied.
type membersCmd struct{}

func (*membersCmd) synopsis() string    { return "members [-o json]" }
func (*membersCmd) flags(*flag.FlagSet) {}

func (*membersCmd) run(ctx context.Context, c *cli, args []string) (int, error) {
	if err := wantArgs(args); err != nil {
		return 0, err
	}
	sc, err := c.client()
	if err != nil {
		return 0, err
	}
	ms, err := sc.Members(ctx)
	if err != nil {
		return 0, err
	}
	if c.g.json() {
		return 0, printJSON(c.stdout, ms)
	}
	t := newTable(c.stdout, "ID", "ADDRESS", "HTTP ADDRESS", "LEADER", "VOTER", "LAST INDEX", "ERROR")
	for _, m := range ms {
		idx := ""
		if m.Error == "" {
			idx = strconv.FormatUint(m.LastIndex, 10)
		}
		t.row(m.ID, m.Address, m.HTTPAddress, strconv.FormatBool(m.Leader), strconv.FormatBool(m.Voter), idx, m.Error)
	}
	return 0, t.flush()
}
