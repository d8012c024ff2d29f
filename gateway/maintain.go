package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/internal/ticker"
)

// maintainBudget bounds the records one maintenance pass deletes of each
// kind: the rest waits for the next pass.
const maintainBudget = 1000

// MaintainResult is what one maintenance pass removed.
type MaintainResult struct {
	// Runs counts the run records deleted past retention.
	Runs int
	// Signins counts the expired sign-in records deleted.
	Signins int
	// QuotaCounts counts the runs uncounted from quota counters they no
	// longer belonged in.
	QuotaCounts int
	// GrantKeys counts the expired grant key records deleted.
	GrantKeys int
	// SecretTickets counts the expired secrets delivery tickets deleted.
	SecretTickets int
}

// Maintain runs one maintenance pass: run records past Config.RunRetention
// are deleted with their index entries (a run not settled yet is kept),
// expired sign-ins are deleted, quota counters are reconciled with the
// runs, grant keys past their last grant's expiry are deleted, and so are
// expired secrets delivery tickets. Every
// gateway runs it (Serve, every MaintenanceInterval); every
// deletion is a compare-and-set on the version just read, so gateways
// racing delete each record once, and a pass cut short is taken up by the
// next one.
func (g *Gateway) Maintain(ctx context.Context) (MaintainResult, error) {
	start := time.Now()
	var res MaintainResult
	var errs []error
	n, err := g.eachTenant(ctx, g.expireRuns)
	res.Runs = n
	errs = append(errs, err)
	n, err = g.expireSignins(ctx)
	res.Signins = n
	errs = append(errs, err)
	n, err = g.eachTenant(ctx, g.reconcileQuotas)
	res.QuotaCounts = n
	errs = append(errs, err)
	n, err = g.expireGrantKeys(ctx)
	res.GrantKeys = n
	errs = append(errs, err)
	n, err = g.expireSecretTickets(ctx)
	res.SecretTickets = n
	errs = append(errs, err)
	err = errors.Join(errs...)

	m := g.metrics
	m.maintDuration.Observe(time.Since(start).Seconds())
	m.maintDeleted.WithLabelValues("runs").Add(float64(res.Runs))
	m.maintDeleted.WithLabelValues("signins").Add(float64(res.Signins))
	m.maintDeleted.WithLabelValues("quota_counts").Add(float64(res.QuotaCounts))
	m.maintDeleted.WithLabelValues("grant_keys").Add(float64(res.GrantKeys))
	m.maintDeleted.WithLabelValues("secret_tickets").Add(float64(res.SecretTickets))
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.maintPasses.WithLabelValues(result).Inc()
	return res, err
}

// eachTenant runs f in every tenant (withTenant) and adds up its counts;
// a tenant's error does not stop the others.
func (g *Gateway) eachTenant(ctx context.Context, f func(context.Context) (int, error)) (int, error) {
	total := 0
	var errs []error
	err := eachRecord(ctx, g.raw, kindTenant, "", func(t versioned[tenantRecord]) (bool, error) {
		n, err := f(withTenant(ctx, t.ID))
		total += n
		if err != nil {
			errs = append(errs, fmt.Errorf("tenant %s: %w", t.ID, err))
		}
		return ctx.Err() == nil, nil
	})
	return total, errors.Join(append(errs, err)...)
}

// maintainLoop runs Maintain every MaintenanceInterval until ctx ends.
func (g *Gateway) maintainLoop(ctx context.Context) {
	ticker.Every(ctx, g.cfg.MaintenanceInterval, func() bool {
		res, err := g.Maintain(ctx)
		if err != nil && ctx.Err() == nil {
			g.log.Warn("maintenance pass", "error", err)
		}
		if res != (MaintainResult{}) {
			g.log.Info("maintenance pass", "runs_deleted", res.Runs, "signins_deleted", res.Signins, "quota_counts_removed", res.QuotaCounts, "grant_keys_deleted", res.GrantKeys,
				"secret_tickets_deleted", res.SecretTickets)
		}
		return true
	})
}

// expireRuns deletes the runs created before the retention, oldest first,
// reading the retention index (kind run_expiry, oldest first) until an
// entry is younger. The run record goes first, then its workspace index
// entry, then its retention entry: a pass cut short leaves the retention
// entry, and the next pass finishes the job.
func (g *Gateway) expireRuns(ctx context.Context) (int, error) {
	cutoff := g.now().Add(-g.cfg.RunRetention)
	deleted, seen := 0, 0
	cursor := ""
	for seen < maintainBudget {
		recs, next, err := g.store.ListRecordsPage(ctx, kindRunExpiry, "", min(defaultPageLimit, maintainBudget-seen), cursor)
		if err != nil {
			return deleted, err
		}
		entries, err := decodeRecords[runIndexRecord](kindRunExpiry, recs)
		if err != nil {
			return deleted, err
		}
		for _, e := range entries {
			seen++
			if !e.Value.CreatedAt.Before(cutoff) {
				return deleted, nil
			}
			done, err := g.expireRun(ctx, e)
			if err != nil {
				return deleted, err
			}
			if done {
				deleted++
			}
		}
		if next == "" || next == cursor || len(recs) == 0 {
			break
		}
		cursor = next
	}
	return deleted, nil
}

// expireRun deletes the run of retention entry e and its index entries,
// unless the run is not settled yet (or another gateway is changing it).
func (g *Gateway) expireRun(ctx context.Context, e versioned[runIndexRecord]) (bool, error) {
	_, runID, ok := strings.Cut(e.ID, ".")
	if !ok {
		return false, nil
	}
	if _, err := g.store.GetRecord(ctx, kindRunLive, runID); err == nil || !IsNotFound(err) {
		return false, err // the Driver still has work on it
	}
	var run runRecord
	version, err := getRecord(ctx, g.store, kindRun, runID, &run)
	switch {
	case err == nil:
		if !run.settled() {
			return false, nil
		}
		if err := g.store.DeleteRecord(ctx, kindRun, runID, version); err != nil {
			if IsConflict(err) || IsNotFound(err) {
				return false, nil // changed meanwhile, or another gateway's pass
			}
			return false, err
		}
	case !IsNotFound(err):
		return false, err
	}
	if err := g.deleteRunEvents(ctx, runID); err != nil {
		return false, err
	}
	if err := g.deleteRunProposals(ctx, runID); err != nil {
		return false, err
	}
	if err := deleteAny(ctx, g.store, kindRunWS, wsIndexID(e.Value.Workspace, runID)); err != nil {
		return false, err
	}
	if err := g.store.DeleteRecord(ctx, kindRunExpiry, e.ID, e.Version); err != nil {
		if IsNotFound(err) || IsConflict(err) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// deleteRunEvents deletes the events of run (an agent run's; its record
// is gone), a page at a time.
func (g *Gateway) deleteRunEvents(ctx context.Context, run string) error {
	for range maintainBudget {
		recs, _, err := g.store.ListRecordsPage(ctx, kindRunEvent, run+".", storePage, "")
		if err != nil || len(recs) == 0 {
			return err
		}
		for _, r := range recs {
			if err := g.store.DeleteRecord(ctx, kindRunEvent, r.ID, r.Version); err != nil && !IsNotFound(err) && !IsConflict(err) {
				return err
			}
		}
	}
	return nil
}

// deleteAny deletes record kind/id at whatever version it has: for
// entries that never change once written.
func deleteAny(ctx context.Context, s Store, kind, id string) error {
	rec, err := s.GetRecord(ctx, kind, id)
	if err == nil {
		err = s.DeleteRecord(ctx, kind, id, rec.Version)
	}
	if err != nil && !IsNotFound(err) && !IsConflict(err) {
		return err
	}
	return nil
}

// expireSignins deletes expired sign-in records, a page at a time, going
// on where the last pass stopped (sign-ins are keyed by digest, in no
// order of time).
func (g *Gateway) expireSignins(ctx context.Context) (int, error) {
	now := g.now()
	deleted, seen := 0, 0
	g.maintMu.Lock()
	cursor := g.signinCursor
	g.maintMu.Unlock()
	defer func() {
		g.maintMu.Lock()
		g.signinCursor = cursor
		g.maintMu.Unlock()
	}()
	for seen < maintainBudget {
		recs, next, err := g.store.ListRecordsPage(ctx, kindSignin, "", min(defaultPageLimit, maintainBudget-seen), cursor)
		if err != nil {
			return deleted, err
		}
		seen += len(recs)
		sessions, err := decodeRecords[signinRecord](kindSignin, recs)
		if err != nil {
			return deleted, err
		}
		for _, s := range sessions {
			if now.Before(s.Value.ExpiresAt) {
				continue
			}
			if err := g.store.DeleteRecord(ctx, kindSignin, s.ID, s.Version); err != nil {
				if IsNotFound(err) || IsConflict(err) {
					continue
				}
				return deleted, err
			}
			deleted++
		}
		if next == "" || next == cursor || len(recs) == 0 {
			cursor = "" // start over next pass
			break
		}
		cursor = next
	}
	return deleted, nil
}

// expireGrantKeys deletes the grant key records whose last grant expired
// (grantkeys.go): a few per day, so one budget of pages covers them.
func (g *Gateway) expireGrantKeys(ctx context.Context) (int, error) {
	return expireRecords(ctx, g.store, kindGrantKey, g.now(), func(k grantKeyRecord) time.Time { return k.Expires })
}

// expireRecords deletes the records of kind (a global kind of few records)
// whose expiry is not after now, reading at most maintainBudget of them; a
// record changed or deleted meanwhile is left to the next pass.
func expireRecords[T any](ctx context.Context, store Store, kind string, now time.Time, expiry func(T) time.Time) (int, error) {
	deleted, seen := 0, 0
	cursor := ""
	for seen < maintainBudget {
		recs, next, err := store.ListRecordsPage(ctx, kind, "", min(defaultPageLimit, maintainBudget-seen), cursor)
		if err != nil {
			return deleted, err
		}
		seen += len(recs)
		vs, err := decodeRecords[T](kind, recs)
		if err != nil {
			return deleted, err
		}
		for _, v := range vs {
			if now.Before(expiry(v.Value)) {
				continue
			}
			if err := store.DeleteRecord(ctx, kind, v.ID, v.Version); err != nil {
				if IsNotFound(err) || IsConflict(err) {
					continue
				}
				return deleted, err
			}
			deleted++
		}
		if next == "" || next == cursor || len(recs) == 0 {
			break
		}
		cursor = next
	}
	return deleted, nil
}
