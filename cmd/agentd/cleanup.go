package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/rodon-compute/rodon/cluster"
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
			return 0, fmt.Errorf("%w: --node-id: %v", errUsage, err)
		}
	}
	f.node = node
	ctx, rt, _, closeRT, err := f.open(stderr)
	if err != nil {
		return 0, err
	}
	defer closeRT()
	orphans, err := rt.Orphans(ctx)
	if err != nil {
		return 0, err
	}
	failed := 0
	for _, o := range orphans {
		if err := o.Sandbox.Destroy(ctx); err != nil {
			fmt.Fprintf(stderr, "agentd cleanup: destroy %s: %v\n", o.Sandbox.ID(), err)
			failed++
			continue
		}
		fmt.Fprintf(stdout, "destroyed %s (step %s)\n", o.Sandbox.ID(), o.Sandbox.Step().ID)
	}
	if _, err := rt.SweepLeases(ctx); err != nil {
		fmt.Fprintf(stderr, "agentd cleanup: %v\n", err)
		failed++
	}
	if removed, err := rt.SweepWorkspaces(ctx); err != nil {
		fmt.Fprintf(stderr, "agentd cleanup: sweep workspace filesystems: %v\n", err)
		failed++
	} else if len(removed) > 0 {
		fmt.Fprintf(stdout, "removed workspace filesystems %s\n", strings.Join(removed, " "))
	}
	if removed, err := rt.SweepNetworks(ctx); err != nil {
		fmt.Fprintf(stderr, "agentd cleanup: sweep sandbox networks: %v\n", err)
		failed++
	} else if len(removed) > 0 {
		fmt.Fprintf(stdout, "removed sandbox networks %s\n", strings.Join(removed, " "))
	}
	if removeNAT && f.net.mode == "egress" {
		if err := rt.RemoveNAT(ctx); err != nil {
			fmt.Fprintf(stderr, "agentd cleanup: %v\n", err)
			failed++
		}
	}
	if failed > 0 {
		return 1, nil
	}
	return 0, nil
}
