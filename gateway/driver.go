package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// Driver moves runs forward: it submits each step once the one before it
// exited 0, ends a run when a step does not, and settles cancels. Every
// gateway runs one; they share the work through the record store. A
// driver never holds state a peer needs: each decision is read from the
// run record and the scheduler and written back by compare-and-set, and a
// step's id is fixed by its run and index, so two drivers that race submit
// a step once (the second submission is a harmless conflict) and write the
// run once (the loser reads it again).
type Driver struct {
	// store is scoped by the context's tenant: a pass lists the live
	// runs of every tenant from its raw store and advances each with
	// withTenant of the tenant its id names.
	store    *tenantStore
	steps    Steps
	interval time.Duration
	now      func() time.Time
	log      *slog.Logger
	nodes    *nodeNames
	// files is the scheduler's workspace API (nil without one): the
	// revisions of an agent run's Bash steps are read for their events.
	files Files
	// library returns the account library's workspace, given to every
	// step.
	library func(context.Context) (string, error)
	// clusterURL is where nodes fetch the secrets of the steps it submits
	// (Config.ClusterURL); empty refuses a step with secrets.
	clusterURL string
	// wake asks Run for a pass now; buffered, never closed.
	wake chan struct{}
}

// casTries bounds the compare-and-set retries of one advance.
const casTries = 5

// staleLive is how old a run_live marker without its run may get before a
// pass deletes it (the run's creation failed after the marker).
const staleLive = time.Minute

func newDriver(store *tenantStore, steps Steps, nodes *nodeNames, library func(context.Context) (string, error), interval time.Duration, now func() time.Time, logger *slog.Logger) *Driver {
	files, _ := steps.(Files)
	return &Driver{store: store, steps: steps, files: files, nodes: nodes, library: library, interval: interval, now: now,
		log: logger.With("component", "driver"), wake: make(chan struct{}, 1)}
}

// Wake asks for a pass as soon as possible. It never blocks.
func (d *Driver) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run passes over every unsettled run every interval and when woken, and
// watches the live step of each so that a change wakes it. It returns nil
// when ctx ends, after its watchers stopped.
func (d *Driver) Run(ctx context.Context) error {
	ticker := time.NewTicker(d.interval)
	defer ticker.Stop()
	var wg sync.WaitGroup
	watchers := map[string]context.CancelFunc{}
	defer func() {
		for _, cancel := range watchers {
			cancel()
		}
		wg.Wait()
	}()
	for {
		watch := d.Pass(ctx)
		for id, cancel := range watchers {
			if !watch[id] {
				cancel()
				delete(watchers, id)
			}
		}
		for id := range watch {
			if watchers[id] == nil {
				wctx, cancel := context.WithCancel(ctx)
				watchers[id] = cancel
				wg.Go(func() { d.watch(wctx, id) })
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case <-d.wake:
		}
	}
}

// watch long-polls step id and wakes the driver on each change, until ctx
// ends.
func (d *Driver) watch(ctx context.Context, id string) {
	var index uint64
	for ctx.Err() == nil {
		st, err := d.steps.WaitStep(ctx, id, index, 30*time.Second)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		if index != 0 && st.ModifyIndex > index {
			d.Wake()
		}
		index = st.ModifyIndex
	}
}

// Pass advances every unsettled run once and returns the steps to watch
// (live steps, and steps whose cancel is not confirmed yet). Errors are
// logged: the next pass tries again.
func (d *Driver) Pass(ctx context.Context) map[string]bool {
	watch := map[string]bool{}
	type live struct {
		tenant string
		rec    versioned[liveRecord]
	}
	var recs []live
	err := eachRecord(ctx, d.store.Store, kindRunLive, "", func(r versioned[liveRecord]) (bool, error) {
		tenant, id, ok := splitTenant(r.ID)
		if !ok {
			return true, nil // from before tenants: migrate.go moves it
		}
		r.ID = id
		recs = append(recs, live{tenant, r})
		return true, nil
	})
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("list live runs", "error", err)
		}
		return watch
	}
	for _, l := range recs {
		if ctx.Err() != nil {
			break
		}
		ctx, rec := withTenant(ctx, l.tenant), l.rec
		run, err := d.advance(ctx, rec.ID)
		switch {
		case IsNotFound(err):
			// The run's creation failed after its marker.
			if d.now().Sub(rec.Value.CreatedAt) > staleLive {
				d.settle(ctx, rec, rec.Value.Workspace, rec.Value.By)
			}
			continue
		case err != nil:
			d.log.Warn("advance run", "run", rec.ID, "error", err)
			continue
		}
		if run.settled() {
			d.settle(ctx, rec, run.Workspace, run.CreatedBy.ID)
			continue
		}
		for _, s := range run.Steps {
			if s.Status == stepSubmitted || s.Status == stepEnded && s.View != nil && !s.Final {
				watch[s.ID] = true
			}
		}
		if run.CancelStep != "" {
			watch[run.CancelStep] = true
		}
	}
	return watch
}

// settle uncounts a settled run from its quotas, then drops its marker
// (when the first fails the marker stays, and the next pass tries again).
func (d *Driver) settle(ctx context.Context, rec versioned[liveRecord], ws, by string) {
	if err := releaseRun(ctx, d.store, ws, by, rec.ID); err != nil {
		d.log.Warn("uncount settled run from its quotas", "run", rec.ID, "error", err)
		return
	}
	d.dropLive(ctx, rec.ID, rec.Version)
}

func (d *Driver) dropLive(ctx context.Context, id string, version uint64) {
	if err := d.store.DeleteRecord(ctx, kindRunLive, id, version); err != nil && !IsNotFound(err) && !IsConflict(err) {
		d.log.Warn("drop live run marker", "run", id, "error", err)
	}
}

// advance reads run id, moves it forward as far as it can now and writes
// it back, reading it again when another driver wrote first.
func (d *Driver) advance(ctx context.Context, id string) (runRecord, error) {
	for range casTries {
		var run runRecord
		version, err := getRecord(ctx, d.store, kindRun, id, &run)
		if err != nil {
			return run, err
		}
		if run.settled() {
			return run, nil
		}
		var changed bool
		var events []api.RunEvent
		if run.Agent != nil {
			changed, events, err = d.evolveAgent(ctx, &run)
		} else {
			changed, err = d.evolve(ctx, &run)
		}
		if changed {
			reserveEvents(&run, events, d.now())
			fitRecord(&run)
			if _, perr := putRecord(ctx, d.store, kindRun, id, version, &run); perr != nil {
				if IsConflict(perr) {
					continue
				}
				return run, errors.Join(err, perr)
			}
			writeEvents(ctx, d.store, d.log, id, events)
		}
		return run, err
	}
	return runRecord{}, fmt.Errorf("advance run %s: the record kept changing; retry", id)
}

// evolve moves run forward in memory, submitting, reading and cancelling
// steps in the scheduler as needed. It reports whether run changed.
func (d *Driver) evolve(ctx context.Context, run *runRecord) (changed bool, err error) {
	now := d.now()
	// cancelled is set when the cancel ended a step that did not exit 0.
	cancelled := false
	if run.State == api.RunRunning && run.Cancel != nil {
		for i := range run.Steps {
			if run.Steps[i].Status == stepPending {
				run.Steps[i].Status, changed = stepSkipped, true
			}
		}
	}
	for i := 0; run.State == api.RunRunning && i < len(run.Steps); i++ {
		s := &run.Steps[i]
		switch s.Status {
		case stepEnded, stepSkipped:
			continue
		case stepPending:
			// Any node may run any step: the first starts from the
			// workspace's head (fixed by the scheduler at submission),
			// each next one from the revision the one before made, or
			// the one it started from when it changed nothing.
			base := ""
			if i > 0 {
				b, err := d.baseAfter(ctx, run.Steps[i-1])
				if err != nil {
					return changed, err
				}
				base = b
			}
			refused, err := d.submit(ctx, run, s, base)
			switch {
			case err != nil:
				return changed, err
			case refused != "":
				run.Errors = append(run.Errors, truncateUTF8(fmt.Sprintf("step %d was refused by the scheduler: %s", i, refused), maxViewText))
				s.Status = stepSkipped
				d.end(run, api.RunFailed, i+1, now)
				return true, nil
			}
			s.Status, changed = stepSubmitted, true
			i-- // look at it at once
		case stepSubmitted:
			st, err := d.steps.Step(ctx, s.ID)
			if IsNotFound(err) {
				run.Errors = append(run.Errors, fmt.Sprintf("step %d is unknown to the scheduler (was its state restored from an older snapshot?)", i))
				s.Status, s.EndedAt, s.Final = stepEnded, now, true
				s.View = keptView(*s, nil, nil)
				s.View.State = api.StepUnknown
				d.end(run, api.RunFailed, i+1, now)
				return true, nil
			}
			if err != nil {
				return changed, fmt.Errorf("read step %s: %w", s.ID, err)
			}
			if !st.Terminal() {
				if run.Cancel != nil {
					if run.CancelStep != s.ID {
						run.CancelStep, changed = s.ID, true
					}
					if st.Cancel == nil {
						if _, err := d.steps.CancelStep(ctx, s.ID, "run cancelled"); err != nil && !IsConflict(err) {
							return changed, fmt.Errorf("cancel step %s: %w", s.ID, err)
						}
					}
				}
				return changed, nil
			}
			s.Status, changed = stepEnded, true
			s.View, s.Final, s.EndedAt = keptView(*s, &st, d.nodes.known(ctx, st.Node)), viewFinal(&st), now
			if st.State == api.StepExited && st.ExitCode != nil && *st.ExitCode == 0 {
				continue
			}
			if run.Cancel != nil {
				// The cancel ended it (or it ended meanwhile): the rest
				// are skipped already, and the run is cancelled even when
				// this was its last step.
				run.CancelStep, cancelled = s.ID, true
				continue
			}
			run.Errors = append(run.Errors, truncateUTF8(fmt.Sprintf("step %d %s", i, outcome(st, d.nodes.known(ctx, st.Node))), maxViewText))
			d.end(run, api.RunFailed, i+1, now)
			return true, nil
		}
	}
	if run.State == api.RunRunning {
		state := api.RunSucceeded
		if cancelled {
			state = api.RunCancelled
		}
		for _, s := range run.Steps {
			if s.Status == stepSkipped {
				state = api.RunCancelled
			}
		}
		d.end(run, state, len(run.Steps), now)
		changed = true
	}
	if c, err := d.settleCancel(ctx, run, now); err != nil || c {
		return changed || c, err
	}
	c, err := d.settleViews(ctx, run, now)
	return changed || c, err
}

// submit submits pending step s of run from revision base (empty: the
// workspace's head at submission). A step submitted already (by this
// driver before a crash, or by another) is no error; a step the scheduler
// refuses is answered by its refusal, scrubbed.
func (d *Driver) submit(ctx context.Context, run *runRecord, s *runStepRecord, base string) (refused string, err error) {
	req := s.Spec
	req.ID, req.Workspace, req.BaseRevision = s.ID, run.Workspace, base
	if req.Library, err = d.library(ctx); err != nil {
		return "", err
	}
	if run.Agent != nil && len(run.Agent.Secrets) > 0 {
		// A Bash step of an agent whose grant names secrets: its node
		// fetches them with a ticket made for this submission only.
		if d.clusterURL == "" {
			return "the run's secrets cannot be delivered: this gateway has no cluster URL (gateway serve --cluster-url)", nil
		}
		req.Secrets, err = issueSecretTicket(ctx, d.store, d.now(), s.ID, run.Agent.Secrets, d.clusterURL)
		if errors.Is(err, errSecretsNoTenant) {
			return err.Error(), nil
		} else if err != nil {
			return "", err
		}
	}
	_, err = d.steps.SubmitStep(ctx, req)
	var ce *client.Error
	if req.Secrets != nil && (IsConflict(err) || errors.As(err, &ce) && ce.Code == api.CodeBadRequest) {
		// Submitted before, with its own ticket, or refused: this ticket
		// serves nothing. (After any other error the step may have been
		// submitted with it: it stays until it expires.)
		if derr := dropSecretTicket(ctx, d.store, req.Secrets.Ticket); derr != nil {
			d.log.Warn("drop an unused secrets ticket; maintenance deletes it when it expires", "step", s.ID, "error", derr)
		}
	}
	switch {
	case err == nil || IsConflict(err):
		return "", nil
	case errors.As(err, &ce) && ce.Code == api.CodeBadRequest:
		return Scrub(ce.Message, d.nodes.known(ctx)...), nil
	}
	return "", fmt.Errorf("submit step %s: %w", s.ID, err)
}

// settleViews reads again the ended steps whose kept view is not final
// (their sandbox's clean-up or their cancel's confirmation may come after
// their exit), until it is, or viewSettle after the step ended; a step the
// scheduler no longer has keeps its view as it is.
func (d *Driver) settleViews(ctx context.Context, run *runRecord, now time.Time) (bool, error) {
	changed := false
	for i := range run.Steps {
		s := &run.Steps[i]
		if s.Status != stepEnded || s.View == nil || s.Final {
			continue
		}
		st, err := d.steps.Step(ctx, s.ID)
		switch {
		case IsNotFound(err):
			s.Final, changed = true, true
			continue
		case err != nil:
			return changed, fmt.Errorf("read step %s: %w", s.ID, err)
		}
		v := keptView(*s, &st, d.nodes.known(ctx, st.Node))
		final := viewFinal(&st) || now.Sub(s.EndedAt) >= viewSettle
		if final != s.Final || !sameJSON(v, s.View) {
			s.View, s.Final, changed = v, final, true
		}
	}
	return changed, nil
}

func sameJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// end ends run in state and skips its steps from index from on.
func (d *Driver) end(run *runRecord, state string, from int, now time.Time) {
	run.State, run.EndedAt = state, now
	for j := from; j < len(run.Steps); j++ {
		if run.Steps[j].Status == stepPending {
			run.Steps[j].Status = stepSkipped
		}
	}
}

// settleCancel confirms the cancel of an ended run once the scheduler
// confirmed its step's (or could not verify it). A cancel that found no
// live step is confirmed at once: no process was left.
func (d *Driver) settleCancel(ctx context.Context, run *runRecord, now time.Time) (bool, error) {
	if run.live() || run.Cancel == nil || run.settled() {
		return false, nil
	}
	if run.CancelStep == "" {
		run.Cancel.ConfirmedAt = now
		return true, nil
	}
	st, err := d.steps.Step(ctx, run.CancelStep)
	if err != nil {
		return false, fmt.Errorf("read step %s: %w", run.CancelStep, err)
	}
	switch {
	case st.Cancel != nil && !st.Cancel.ConfirmedAt.IsZero():
		run.Cancel.ConfirmedAt = st.Cancel.ConfirmedAt
	case st.Cancel != nil && st.Cancel.Unverified != "":
		run.Cancel.Unverified = Scrub(st.Cancel.Unverified, d.nodes.known(ctx, st.Node)...)
	case st.Cancel == nil && st.State == api.StepLost:
		// Its node stopped answering: nobody saw the process go.
		run.Cancel.Unverified = "the step's node stopped answering; whether its process is gone is not known"
	case st.Cancel == nil && st.Terminal():
		// It ended by itself before the cancel reached it: its exit is
		// the runtime's word that the process is gone. A step that never
		// started (failed, expired) had no process.
		run.Cancel.ConfirmedAt = st.Phases.Exited
		if run.Cancel.ConfirmedAt.IsZero() {
			run.Cancel.ConfirmedAt = now
		}
	default:
		return false, nil
	}
	return true, nil
}

// baseAfter is the revision a step after prev starts from: the one prev
// made, else (prev changed nothing) the one prev started from, as the
// scheduler fixed it.
func (d *Driver) baseAfter(ctx context.Context, prev runStepRecord) (string, error) {
	if prev.View != nil && prev.View.Revision != "" {
		return prev.View.Revision, nil
	}
	st, err := d.steps.Step(ctx, prev.ID)
	if err != nil {
		return "", fmt.Errorf("read step %s: %w", prev.ID, err)
	}
	if st.Revision != "" {
		return st.Revision, nil
	}
	return st.Spec.BaseRevision, nil
}

// outcome says how a step that did not exit 0 ended, for a run's errors.
func outcome(st api.Step, known []string) string {
	switch {
	case st.State == api.StepExited && st.ExitCode != nil:
		return fmt.Sprintf("exited with code %d (terminated by %s)", *st.ExitCode, st.TerminatedBy)
	case st.Reason != "":
		return fmt.Sprintf("%s: %s", st.State, Scrub(st.Reason, known...))
	}
	return st.State
}
