package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/rodon-compute/rodon/api"
)

// nodesCmd is `schedctl nodes`: every node with its address, state,
// degraded reasons, capacity and running steps.
type nodesCmd struct{}

func (*nodesCmd) synopsis() string    { return "nodes [-o json]" }
func (*nodesCmd) flags(*flag.FlagSet) {}

func (*nodesCmd) run(ctx context.Context, c *cli, args []string) (int, error) {
	if err := wantArgs(args); err != nil {
		return 0, err
	}
	sc, err := c.client()
	if err != nil {
		return 0, err
	}
	ns, err := sc.Nodes(ctx)
	if err != nil {
		return 0, err
	}
	if c.g.json() {
		if ns == nil {
			ns = []api.Node{}
		}
		return 0, printJSON(c.stdout, ns)
	}
	return 0, printNodes(c.stdout, ns)
}

func printNodes(w io.Writer, ns []api.Node) error {
	t := newTable(w, "ID", "ADDRESS", "STATE", "DEGRADED REASONS", "CPU", "MEMORY", "RUNNING", "WARM", "DRAIN")
	for _, n := range ns {
		t.row(n.ID, n.Address, n.State, strings.Join(n.DegradedReasons, "; "),
			fmtCPU(n.Capacity.CPU), fmtBytes(n.Capacity.MemoryBytes), strconv.Itoa(n.Running), fmtWarm(n.Pool), fmtDrain(n.Drain))
	}
	return t.flush()
}

// fmtWarm describes a node's warm pool for a table cell: ready sandboxes
// out of ready and being made; empty (shown "-") without a pool.
func fmtWarm(p *api.WarmPool) string {
	if p == nil {
		return ""
	}
	return fmt.Sprintf("%d/%d", p.Ready, p.Ready+p.Creating)
}

// fmtDrain describes a node's drain for a table cell.
func fmtDrain(d *api.Drain) string {
	switch {
	case d == nil:
		return ""
	case d.Complete:
		return "complete"
	case !d.Deadline.IsZero():
		return "until " + fmtTime(d.Deadline)
	}
	return "waiting"
}

// printNode writes one node as "key: value" lines.
func printNode(w io.Writer, n api.Node) error {
	fmt.Fprintf(w, "node %s: %s\n", n.ID, n.State)
	if len(n.DegradedReasons) > 0 {
		fmt.Fprintf(w, "degraded: %s\n", strings.Join(n.DegradedReasons, "; "))
	}
	if n.Drain != nil {
		fmt.Fprintf(w, "drain: requested %s", fmtTime(n.Drain.RequestedAt))
		if !n.Drain.Deadline.IsZero() {
			fmt.Fprintf(w, ", deadline %s", fmtTime(n.Drain.Deadline))
		}
		if n.Drain.Complete {
			fmt.Fprint(w, ", complete")
		}
		fmt.Fprintln(w)
	}
	if n.Pool != nil {
		fmt.Fprintf(w, "warm pool: %s ready, %d classes, %s of %s\n", fmtWarm(n.Pool), n.Pool.Classes,
			fmtBytes(n.Pool.MemoryBytes), fmtBytes(n.Pool.BudgetBytes))
	}
	if n.MaxLimits != (api.Limits{}) {
		fmt.Fprintf(w, "max limits: %s\n", fmtLimits(n.MaxLimits))
	}
	_, err := fmt.Fprintf(w, "running: %d\n", n.Running)
	return err
}
