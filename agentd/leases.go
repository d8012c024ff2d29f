package agentd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/defaults"
	"github.com/containerd/errdefs"
)

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
// agent's leftovers are gone when its successor starts. Snapshots of live
// agents' Creates in flight are left alone (see maybeInFlight).
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
		if info.Kind == snapshots.KindActive && !held[info.Name] && !r.maybeInFlight(info, time.Now()) {
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

// unlabelledSnapshotGrace is how long a snapshot that names no owner is
// taken to be a create in flight by something other than an agent.
const unlabelledSnapshotGrace = time.Minute

// maybeInFlight reports whether an unheld active snapshot may belong to a
// Create still under way, in this agent or another live one sharing the
// namespace: between the listings above, a Create can prepare its
// snapshot under a lease listed before it held anything, and make its
// container after the containers were listed. Agents label the snapshots
// they prepare with their owner; one whose owner still runs is left to it.
func (r *Runtime) maybeInFlight(info snapshots.Info, now time.Time) bool {
	if owner, ok := info.Labels[LabelOwner]; ok {
		return owner == r.owner || ownerAlive(owner)
	}
	return now.Sub(info.Created) < unlabelledSnapshotGrace
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
