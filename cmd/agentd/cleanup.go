package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/cli"
)

// cleanupCmd is `agentd cleanup [--node-id ID]`: destroy the sandboxes that
// agents of this node left behind (their agent is gone). scripts/down uses
// it after stopping agentd, which otherwise leaves running steps to its
// next start.
func cleanupCmd(args []string, stdout, stderr io.Writer) (int, error) {
	var f runtimeFlags
	var node string
	fs := newFlagSet("cleanup", stderr)
	f.register(fs)
	fs.StringVar(&node, "node-id", "", "node whose sandboxes to destroy (empty: those of agentd run)")
	var removeNAT bool
	fs.BoolVar(&removeNAT, "remove-nat", false, "also remove the node's shared NAT and filter table (when no agent will run here)")
	if err := parseFlags(fs, args); err != nil {
		return 0, err
	}
	if node != "" {
		if err := cluster.ValidateNodeID(cluster.NodeID(node)); err != nil {
			return 0, fmt.Errorf("%w: --node-id: %v", cli.ErrUsage, err)
		}
	}
	f.node = node
	ctx, rt, _, closeRT, err := f.open(stderr)
	if err != nil {
		return 0, err
	}
	defer closeRT()
	done, err := rt.Cleanup(ctx, removeNAT)
	if err != nil {
		return 0, err
	}
	for _, d := range done.Sandboxes {
		fmt.Fprintf(stdout, "destroyed %s\n", d)
	}
	if len(done.Workspaces) > 0 {
		fmt.Fprintf(stdout, "removed workspace filesystems %s\n", strings.Join(done.Workspaces, " "))
	}
	if len(done.Networks) > 0 {
		fmt.Fprintf(stdout, "removed sandbox networks %s\n", strings.Join(done.Networks, " "))
	}
	for _, err := range done.Failed {
		fmt.Fprintf(stderr, "agentd cleanup: %v\n", err)
	}
	if len(done.Failed) > 0 {
		return 1, nil
	}
	return 0, nil
}
