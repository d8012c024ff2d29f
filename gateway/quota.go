package gateway

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// Quotas bound what one workspace and one principal (an account or an API
// key: the run's creator) may have going at once (docs/GATEWAY.md,
// "Quotas"). A run over a quota is refused with 429, Retry-After and the
// quota named.
type Quotas struct {
	// LiveRunsPerWorkspace and LiveRunsPerPrincipal cap the runs not
	// settled yet (running, or a cancel not confirmed). They are kept
	// exactly, by compare-and-set on one counter record per workspace
	// and per principal, however many gateways serve.
	LiveRunsPerWorkspace int
	LiveRunsPerPrincipal int
	// QueuedStepsPerWorkspace and QueuedStepsPerPrincipal cap the steps
	// submitted that no node has started yet (queued or placed), checked
	// against the scheduler when a run is created (each live run has at
	// most one step in the scheduler, so they never exceed the live
	// runs).
	QueuedStepsPerWorkspace int
	QueuedStepsPerPrincipal int
}

// DefaultQuotas are the quotas of `gateway serve`; MaxQuotas the largest
// it accepts.
var (
	DefaultQuotas = Quotas{LiveRunsPerWorkspace: 50, LiveRunsPerPrincipal: 20, QueuedStepsPerWorkspace: 20, QueuedStepsPerPrincipal: 10}
	MaxQuotas     = Quotas{LiveRunsPerWorkspace: 1000, LiveRunsPerPrincipal: 1000, QueuedStepsPerWorkspace: 1000, QueuedStepsPerPrincipal: 1000}
)

// Check reports the first quota outside 1 to its maximum, naming its flag.
func (q Quotas) Check() error {
	for _, c := range []struct {
		flag   string
		v, max int
	}{
		{"quota-live-runs-per-workspace", q.LiveRunsPerWorkspace, MaxQuotas.LiveRunsPerWorkspace},
		{"quota-live-runs-per-principal", q.LiveRunsPerPrincipal, MaxQuotas.LiveRunsPerPrincipal},
		{"quota-queued-steps-per-workspace", q.QueuedStepsPerWorkspace, MaxQuotas.QueuedStepsPerWorkspace},
		{"quota-queued-steps-per-principal", q.QueuedStepsPerPrincipal, MaxQuotas.QueuedStepsPerPrincipal},
	} {
		if c.v < 1 || c.v > c.max {
			return fmt.Errorf("%s %d: want 1 to %d", c.flag, c.v, c.max)
		}
	}
	return nil
}

// quotaRetryAfter is the Retry-After of a quota refusal: runs end on
// their own time, so this is a polite poll interval.
const quotaRetryAfter = 10 * time.Second

// quotaRecord counts one workspace's or principal's live runs (kind
// "quota", id "ws.WS" or "by.ACTOR"): the ids, so that a counter left
// behind by a gateway that died can be reconciled with the runs.
type quotaRecord struct {
	Runs []string `json:"runs"`
}

func wsQuotaID(ws string) string    { return "ws." + ws }
func byQuotaID(actor string) string { return "by." + actor }

// quotaExceeded is the refusal of a run over a quota.
func quotaExceeded(format string, args ...any) error {
	return &httpError{Status: http.StatusTooManyRequests, Code: api.CodeQuotaExceeded,
		Message: fmt.Sprintf(format, args...), RetryAfter: quotaRetryAfter}
}

// admit checks run against the quotas and counts it as live in its
// workspace's and its creator's counters. release uncounts it: the caller
// calls it when the run could not be created.
func (g *Gateway) admit(ctx context.Context, run *runRecord) (release func(), err error) {
	q := g.cfg.Quotas
	ws, by := run.Workspace, run.CreatedBy
	if err := g.checkQueued(ctx, wsQuotaID(ws), q.QueuedStepsPerWorkspace, "workspace "+ws); err != nil {
		return nil, err
	}
	if err := g.checkQueued(ctx, byQuotaID(by.ID), q.QueuedStepsPerPrincipal, by.Kind+" "+by.ID); err != nil {
		return nil, err
	}
	if err := g.countRun(ctx, wsQuotaID(ws), run.ID, q.LiveRunsPerWorkspace, "workspace "+ws); err != nil {
		return nil, err
	}
	if err := g.countRun(ctx, byQuotaID(by.ID), run.ID, q.LiveRunsPerPrincipal, by.Kind+" "+by.ID); err != nil {
		uncountRun(ctx, g.store, wsQuotaID(ws), run.ID)
		return nil, err
	}
	return func() {
		if err := releaseRun(context.WithoutCancel(ctx), g.store, ws, by.ID, run.ID); err != nil {
			g.log.Warn("uncount a run not created", "run", run.ID, "error", err)
		}
	}, nil
}

// quotaCASTries bounds the compare-and-set tries on one quota counter:
// every creation of a workspace's runs writes it, so concurrent creations
// collide, and each try after a collision waits a little (casPause).
const quotaCASTries = 12

// casPause waits before compare-and-set try+1: a random time up to 2^try
// ms (at most 128 ms), so that writers who collided do not collide again.
func casPause(ctx context.Context, try int) error {
	d := time.Duration(rand.Int64N(int64(time.Millisecond) << min(try, 7)))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// countRun adds run to counter id unless it holds quota runs already.
func (g *Gateway) countRun(ctx context.Context, id, run string, quota int, who string) error {
	for try := range quotaCASTries {
		var q quotaRecord
		version, err := getRecord(ctx, g.store, kindQuota, id, &q)
		if err != nil && !IsNotFound(err) {
			return err
		}
		if slices.Contains(q.Runs, run) {
			return nil
		}
		if len(q.Runs) >= quota {
			g.metrics.quotaRefusals.WithLabelValues("live_runs").Inc()
			return quotaExceeded("%s has %d live runs, its quota: wait for one to end (or cancel one)", who, len(q.Runs))
		}
		q.Runs = append(q.Runs, run)
		if _, err := putRecord(ctx, g.store, kindQuota, id, version, &q); err != nil {
			if IsConflict(err) {
				if err := casPause(ctx, try); err != nil {
					return err
				}
				continue
			}
			return err
		}
		return nil
	}
	return errUnavailable
}

// uncountRun removes run from counter id (deleting an empty counter).
func uncountRun(ctx context.Context, store Store, id, run string) error {
	for try := range quotaCASTries {
		var q quotaRecord
		version, err := getRecord(ctx, store, kindQuota, id, &q)
		if IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		i := slices.Index(q.Runs, run)
		if i < 0 {
			return nil
		}
		q.Runs = slices.Delete(q.Runs, i, i+1)
		if len(q.Runs) == 0 {
			err = store.DeleteRecord(ctx, kindQuota, id, version)
		} else {
			_, err = putRecord(ctx, store, kindQuota, id, version, &q)
		}
		if IsConflict(err) || IsNotFound(err) {
			if err := casPause(ctx, try); err != nil {
				return err
			}
			continue
		}
		return err
	}
	return fmt.Errorf("quota counter %s kept changing", id)
}

// releaseRun uncounts run from its workspace's and its creator's
// counters.
func releaseRun(ctx context.Context, store Store, ws, by, run string) error {
	var errs []error
	if ws != "" {
		errs = append(errs, uncountRun(ctx, store, wsQuotaID(ws), run))
	}
	if by != "" {
		errs = append(errs, uncountRun(ctx, store, byQuotaID(by), run))
	}
	return errors.Join(errs...)
}

// queuedStates are the scheduler's states of a step no node has started.
var queuedStates = []string{api.StepQueued, api.StepPlaced}

// checkQueued refuses a new run when the live runs of counter id have
// quota steps queued already. With fewer live runs than the quota there
// is nothing to read: each has at most one step in the scheduler.
func (g *Gateway) checkQueued(ctx context.Context, id string, quota int, who string) error {
	var q quotaRecord
	if _, err := getRecord(ctx, g.store, kindQuota, id, &q); err != nil {
		if IsNotFound(err) {
			return nil
		}
		return err
	}
	if len(q.Runs) < quota {
		return nil
	}
	var mu sync.Mutex
	queued := 0
	err := forEachLimit(ctx, q.Runs, 8, func(ctx context.Context, runID string) error {
		var run runRecord
		if _, err := getRecord(ctx, g.store, kindRun, runID, &run); err != nil {
			if IsNotFound(err) {
				return nil
			}
			return err
		}
		for _, s := range run.Steps {
			if s.Status != stepSubmitted {
				continue
			}
			st, err := g.steps.Step(ctx, s.ID)
			if err != nil {
				if IsNotFound(err) {
					return nil
				}
				return err
			}
			if slices.Contains(queuedStates, st.State) {
				mu.Lock()
				queued++
				mu.Unlock()
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if queued >= quota {
		g.metrics.quotaRefusals.WithLabelValues("queued_steps").Inc()
		return quotaExceeded("%s has %d queued steps, its quota: wait for nodes to start them", who, queued)
	}
	return nil
}

// reconcileQuotas removes from every quota counter the runs that are
// settled or were never made (a gateway died between counting a run and
// creating it, or between settling it and uncounting it). It returns how
// many it removed.
func (g *Gateway) reconcileQuotas(ctx context.Context) (int, error) {
	removed := 0
	err := eachRecord(ctx, g.store, kindQuota, "", func(r versioned[quotaRecord]) (bool, error) {
		for _, runID := range r.Value.Runs {
			stale, err := g.staleCount(ctx, runID)
			if err != nil {
				return false, err
			}
			if stale {
				if err := uncountRun(ctx, g.store, r.ID, runID); err != nil {
					return false, err
				}
				removed++
			}
		}
		return true, nil
	})
	return removed, err
}

// staleCount reports whether a counter's run id no longer counts: no live
// marker (the Driver uncounts a run before it drops its marker) and
// either settled or missing for longer than a creation takes.
func (g *Gateway) staleCount(ctx context.Context, runID string) (bool, error) {
	if _, err := g.store.GetRecord(ctx, kindRunLive, runID); err == nil || !IsNotFound(err) {
		return false, err
	}
	var run runRecord
	_, err := getRecord(ctx, g.store, kindRun, runID, &run)
	switch {
	case err == nil:
		return run.settled(), nil
	case !IsNotFound(err):
		return false, err
	}
	created, ok := timeOfID(runID, prefixRun)
	return !ok || g.now().Sub(created) > staleLive, nil
}

// forEachLimit calls f for each item with at most n calls at a time, and
// returns the first error.
func forEachLimit[T any](ctx context.Context, items []T, n int, f func(context.Context, T) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for _, it := range items {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(ctx, it); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		})
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// timeOfID returns the time encoded in an id made by newTimeID.
func timeOfID(id, prefix string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok || len(rest) < timeIDLen {
		return time.Time{}, false
	}
	var v uint64
	for _, c := range []byte(rest[:timeIDLen]) {
		i := strings.IndexByte(sortable, c)
		if i < 0 {
			return time.Time{}, false
		}
		v = v<<5 | uint64(i)
	}
	return time.UnixMilli(int64(1<<50 - 1 - v)).UTC(), true
}
