package main

import (
	"context"
	"flag"
	"fmt"
)

// removePeerCmd is `schedctl raft remove-peer ID`: it removes a member
// from the Raft configuration, such as one that is gone for good.
type removePeerCmd struct{}

func (*removePeerCmd) synopsis() string    { return "raft remove-peer ID [-o json]" }
func (*removePeerCmd) flags(*flag.FlagSet) {}

func (*removePeerCmd) run(ctx context.Context, c *cli, args []string) (int, error) {
	if err := wantArgs(args, "ID"); err != nil {
		return 0, err
	}
	sc, err := c.client()
	if err != nil {
		return 0, err
	}
	if err := sc.RemoveMember(ctx, args[0]); err != nil {
		return 0, fmt.Errorf("remove peer %s: %w", args[0], err)
	}
	if c.g.json() {
		return 0, printJSON(c.stdout, map[string]string{"removed": args[0]})
	}
	_, err = fmt.Fprintf(c.stdout, "removed peer %s\n", args[0])
	return 0, err
}
