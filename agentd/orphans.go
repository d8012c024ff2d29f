package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/defaults"
	"github.com/containerd/errdefs"

	"github.com/rodon-compute/rodon/cluster"
)

// An Orphan is a sandbox whose agent died: containerd still has it, and
// nobody owns it. Adopt it to destroy it or report on it.
type Orphan struct {
	Sandbox *Sandbox
	// Owner is the dead agent ("pid:starttime").
	Owner string
	// Running reports whether the step's process was still running when
	// the orphan was found.
	Running bool
}

// Orphans finds the sandboxes in containerd that carry agentd's labels and
// whose owner is no longer alive, and takes them over: each Orphan's
// Sandbox belongs to the caller, who must Destroy it.
func (r *Runtime) Orphans(ctx context.Context) ([]Orphan, error) {
	ctx = r.nsCtx(ctx)
	cs, err := r.client.Containers(ctx, fmt.Sprintf("labels.%q==true", LabelManaged))
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	var out []Orphan
	for _, c := range cs {
		labels, err := c.Labels(ctx)
		if err != nil {
			if errdefs.IsNotFound(err) {
				continue
			}
			return out, fmt.Errorf("labels of %s: %w", c.ID(), err)
		}
		owner := labels[LabelOwner]
		if labels[LabelNode] != r.cfg.Node || owner == r.owner || ownerAlive(owner) {
			continue
		}
		attempt, _ := strconv.Atoi(labels[LabelAttempt])
		wsBytes, _ := strconv.ParseInt(labels[LabelWorkspaceBytes], 10, 64)
		sb := &Sandbox{
			rt:        r,
			step:      Step{ID: cluster.StepID(labels[LabelStep]), Workspace: labels[LabelWorkspace], Attempt: attempt, WorkspaceBytes: wsBytes},
			wsDir:     filepath.Join(workspacesDir(r.cfg), c.ID()),
			ctlDir:    filepath.Join(ctlDir(r.cfg), c.ID()),
			container: c,
			hasNet:    labels[LabelNetwork] != "",
		}
		// Its workspace filesystem, if mounted, counts in the reservations
		// until Destroy unmounts it.
		if img := imagePath(sb.wsDir); fileExists(img) {
			r.mu.Lock()
			r.images[img] = max(wsBytes, allocatedBytes(img))
			r.mu.Unlock()
			sb.wsMounted = true
		}
		o := Orphan{Sandbox: sb, Owner: owner}
		if t, err := c.Task(ctx, nil); err == nil {
			sb.task = t
			if p, err := t.LoadProcess(ctx, execID, nil); err == nil {
				sb.proc = p
				if st, err := p.Status(ctx); err == nil && st.Status == containerd.Running {
					o.Running = true
				}
			}
		} else if !errdefs.IsNotFound(err) {
			return out, fmt.Errorf("task of %s: %w", c.ID(), err)
		}
		out = append(out, o)
	}
	return out, nil
}

// Resume makes an orphan's Wait report its step's exit again (the exit
// status is kept by the shim until the process is deleted). Output the step
// writes from now on is not collected. A sandbox with a network gets its
// egress filter attached again; until then its veth carries nothing.
func (s *Sandbox) Resume(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return errors.New("resume: the step's process is gone")
	}
	// A process created and never started (the agent died in between)
	// would never exit: the step did not run, and is not adopted.
	if st, err := s.proc.Status(s.rt.nsCtx(ctx)); err != nil {
		return fmt.Errorf("resume: status of the step's process: %w", err)
	} else if st.Status == containerd.Created {
		return errors.New("resume: the step's process was created but never started")
	}
	if err := s.adoptNetwork(); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	ch, err := s.proc.Wait(context.WithoutCancel(s.rt.nsCtx(ctx)))
	if err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	s.exitCh = ch
	s.stdout = &countingWriter{w: io.Discard}
	s.stderr = &countingWriter{w: io.Discard}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Step returns what the sandbox knows of its step (from its labels, for an
// orphan).
func (s *Sandbox) Step() Step { return s.step }

// createLeaseExpiry bounds how long the snapshot of a sandbox whose Create
// never finished can outlive its agent if no later agent sweeps it.
const createLeaseExpiry = time.Hour

// createLease protects what Create makes (the sandbox's snapshot) until
// its container holds it: containerd's garbage collector removes it once
// the lease is gone, so an agent killed in between leaks nothing. The
// lease carries the owner, for SweepLeases.
func (r *Runtime) createLease(ctx context.Context) (context.Context, leases.Lease, error) {
	l, err := r.client.LeasesService().Create(ctx,
		leases.WithRandomID(),
		leases.WithExpiration(createLeaseExpiry),
		leases.WithLabels(map[string]string{LabelManaged: "true", LabelOwner: r.owner}))
	if err != nil {
		return ctx, l, fmt.Errorf("create lease: %w", err)
	}
	return leases.WithLease(ctx, l.ID), l, nil
}

// dropLease deletes a create lease; with sync, containerd also removes
// what only the lease held before it returns.
func (r *Runtime) dropLease(ctx context.Context, l leases.Lease, sync bool) error {
	var opts []leases.DeleteOpt
	if sync {
		opts = append(opts, leases.SynchronousDelete)
	}
	if err := r.client.LeasesService().Delete(ctx, l, opts...); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete lease %s: %w", l.ID, err)
	}
	return nil
}

// SweepLeases deletes the create leases of agents that died, with the
// snapshots of the Creates they never finished, and then every active
// snapshot that neither a container nor a lease holds. Leases of live
// agents (sharing this containerd) are left alone. It returns the number
// of leases deleted.
func (r *Runtime) SweepLeases(ctx context.Context) (int, error) {
	ctx = r.nsCtx(ctx)
	ls := r.client.LeasesService()
	all, err := ls.List(ctx, fmt.Sprintf("labels.%q==true", LabelManaged))
	if err != nil {
		return 0, fmt.Errorf("list leases: %w", err)
	}
	n := 0
	var errs []error
	for _, l := range all {
		owner := l.Labels[LabelOwner]
		if owner == r.owner || ownerAlive(owner) {
			continue
		}
		// What the lease holds is removed explicitly, not left to the
		// garbage collector's schedule.
		if err := r.removeLeased(ctx, l); err != nil {
			errs = append(errs, err)
		}
		if err := r.dropLease(ctx, l, true); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	if err := r.removeUnheldSnapshots(ctx); err != nil {
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

// removeUnheldSnapshots removes the active snapshots of the namespace that
// neither a container nor a lease holds: what containerd's garbage
// collector would remove on its own schedule, removed now so that a killed
// agent's leftovers are gone when its successor starts.
func (r *Runtime) removeUnheldSnapshots(ctx context.Context) error {
	held := map[string]bool{}
	all, err := r.client.LeasesService().List(ctx)
	if err != nil {
		return fmt.Errorf("list leases: %w", err)
	}
	for _, l := range all {
		res, err := r.client.LeasesService().ListResources(ctx, l)
		if err != nil {
			return fmt.Errorf("list resources of lease %s: %w", l.ID, err)
		}
		for _, rs := range res {
			if strings.HasPrefix(rs.Type, "snapshots/") {
				held[rs.ID] = true
			}
		}
	}
	cs, err := r.client.Containers(ctx)
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	for _, c := range cs {
		held[c.ID()] = true
		if info, err := c.Info(ctx, containerd.WithoutRefreshedMetadata); err == nil && info.SnapshotKey != "" {
			held[info.SnapshotKey] = true
		}
	}
	sn := r.client.SnapshotService(defaults.DefaultSnapshotter)
	var stale []string
	if err := sn.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		if info.Kind == snapshots.KindActive && !held[info.Name] {
			stale = append(stale, info.Name)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("list snapshots: %w", err)
	}
	var errs []error
	for _, key := range stale {
		if err := sn.Remove(ctx, key); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove snapshot %s: %w", key, err))
			continue
		}
		r.logger.Info("removed a snapshot nothing held", "snapshot", key)
	}
	return errors.Join(errs...)
}

// removeLeased removes the snapshots a create lease holds that no
// container uses.
func (r *Runtime) removeLeased(ctx context.Context, l leases.Lease) error {
	res, err := r.client.LeasesService().ListResources(ctx, l)
	if err != nil {
		return fmt.Errorf("list resources of lease %s: %w", l.ID, err)
	}
	var errs []error
	for _, rs := range res {
		snapshotter, ok := strings.CutPrefix(rs.Type, "snapshots/")
		if !ok {
			continue
		}
		if _, err := r.client.LoadContainer(ctx, rs.ID); err == nil {
			continue // the container holds it now
		}
		if err := r.client.SnapshotService(snapshotter).Remove(ctx, rs.ID); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove snapshot %s of lease %s: %w", rs.ID, l.ID, err))
		}
	}
	return errors.Join(errs...)
}
