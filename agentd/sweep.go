package agentd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// SweepOrphans destroys what agents that died left behind: their create
// leases, workspace filesystems, sandboxes and the sandboxes' trees. It logs what it finds and
// what fails, and goes on (`agentd run` sweeps before its step).
func (r *Runtime) SweepOrphans(ctx context.Context) {
	if _, err := r.SweepLeases(ctx); err != nil {
		r.logger.Warn("sweep create leases of dead agents", "error", err)
	}
	if _, err := r.SweepWorkspaces(ctx); err != nil {
		r.logger.Warn("sweep workspace filesystems of dead agents", "error", err)
	}
	orphans, err := r.Orphans(ctx)
	if err != nil {
		r.logger.Warn("look for orphaned sandboxes", "error", err)
		return
	}
	for _, o := range orphans {
		err := o.Sandbox.Destroy(ctx)
		if err == nil {
			err = r.removeTree(o.Sandbox.treeID())
		}
		r.logger.Warn("found sandbox of a dead agent and destroyed it",
			"step", o.Sandbox.ID(), "owner", o.Owner, "was_running", o.Running, "error", err)
	}
}

// removeTree removes the attempt's tree (workspace and library) named
// id, if any; "" (a pooled sandbox never claimed) has none.
func (r *Runtime) removeTree(id string) error {
	if id == "" {
		return nil
	}
	return os.RemoveAll(filepath.Join(treesDir(r.cfg), id))
}

// treeID names the tree of the sandbox's attempt: its step's sandbox id
// (a pooled sandbox's own id is not its step's); "" for a sandbox that
// never had a step.
func (s *Sandbox) treeID() string {
	if s.step.ID == "" {
		return ""
	}
	return s.step.sandboxID()
}

// Cleaned is what Cleanup removed, each a line for the operator.
type Cleaned struct {
	// Sandboxes are "SANDBOX (step STEP)", or "SANDBOX (warm pool, never
	// claimed)".
	Sandboxes []string
	// Workspaces and Networks are the workspace filesystems and sandbox
	// networks removed.
	Workspaces, Networks []string
	// Failed are what could not be removed; Cleanup went on past them.
	Failed []error
}

// Cleanup destroys every sandbox that agents of this runtime's node left
// behind (their agent is gone), their create leases, workspace filesystems
// and sandbox networks, and with removeNAT the node's shared NAT and
// filter table. It goes on past failures (done.Failed); the error is for
// not finding the orphans at all (`agentd cleanup`).
func (r *Runtime) Cleanup(ctx context.Context, removeNAT bool) (Cleaned, error) {
	var done Cleaned
	orphans, err := r.Orphans(ctx)
	if err != nil {
		return done, err
	}
	errs := &done.Failed
	for _, o := range orphans {
		if err := o.Sandbox.Destroy(ctx); err != nil {
			*errs = append(*errs, fmt.Errorf("destroy %s: %w", o.Sandbox.ID(), err))
			continue
		}
		if err := r.removeTree(o.Sandbox.treeID()); err != nil {
			*errs = append(*errs, fmt.Errorf("remove the tree of %s: %w", o.Sandbox.ID(), err))
		}
		if o.Sandbox.Step().ID == "" {
			done.Sandboxes = append(done.Sandboxes, fmt.Sprintf("%s (warm pool, never claimed)", o.Sandbox.ID()))
		} else {
			done.Sandboxes = append(done.Sandboxes, fmt.Sprintf("%s (step %s)", o.Sandbox.ID(), o.Sandbox.Step().ID))
		}
	}
	if _, err := r.SweepLeases(ctx); err != nil {
		*errs = append(*errs, err)
	}
	if done.Workspaces, err = r.SweepWorkspaces(ctx); err != nil {
		*errs = append(*errs, fmt.Errorf("sweep workspace filesystems: %w", err))
	}
	if done.Networks, err = r.SweepNetworks(ctx); err != nil {
		*errs = append(*errs, fmt.Errorf("sweep sandbox networks: %w", err))
	}
	if removeNAT {
		if err := r.RemoveNAT(ctx); err != nil {
			*errs = append(*errs, err)
		}
	}
	return done, nil
}
