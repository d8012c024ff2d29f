package stepfollow

import (
	"context"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// longPoll is how long one GET /v1/steps/{id}?index=N waits for a change.
const longPoll = 30 * time.Second

// watch keeps the latest record of one step by long-polling the
// scheduler, and wakes whoever waits for a change. Run polls until its
// context ends; the other methods may be called from any goroutine.
type watch struct {
	sc *client.Client
	id string
	// warn reports trouble reaching the scheduler (it keeps trying).
	warn func(format string, args ...any)

	mu sync.Mutex
	// step is the latest record.
	step api.Step
	// err is set when the step cannot be watched any more (it is gone).
	err error
	// changed is closed, and replaced, when step or err change.
	changed chan struct{}
}

func newWatch(sc *client.Client, first api.Step, warn func(string, ...any)) *watch {
	return &watch{sc: sc, id: first.ID, warn: warn, step: first, changed: make(chan struct{})}
}

// Run long-polls the step until ctx ends.
func (w *watch) Run(ctx context.Context) {
	delay := time.Duration(0)
	failing := false
	for ctx.Err() == nil {
		if err := sleep(ctx, delay); err != nil {
			return
		}
		w.mu.Lock()
		old := w.step.ModifyIndex
		w.mu.Unlock()
		start := time.Now()
		s, err := w.sc.WaitStep(ctx, w.id, old, longPoll)
		switch {
		case ctx.Err() != nil:
			return
		case client.IsNotFound(err):
			w.update(nil, err)
			return
		case err != nil:
			if !failing {
				w.warn("watch step %s: %v (retrying)", w.id, err)
				failing = true
			}
			delay = min(max(2*delay, 500*time.Millisecond), 5*time.Second)
			continue
		}
		failing = false
		// A member that answers at once with nothing new must not make
		// this a busy loop.
		delay = 0
		if s.ModifyIndex == old && time.Since(start) < 100*time.Millisecond {
			delay = 250 * time.Millisecond
		}
		w.update(&s, nil)
	}
}

func (w *watch) update(s *api.Step, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.err = err
	} else {
		if s.ModifyIndex < w.step.ModifyIndex {
			return // an older member's view; keep the newer record
		}
		if s.ModifyIndex == w.step.ModifyIndex && s.State == w.step.State {
			return
		}
		w.step = *s
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// Current returns the latest record and a channel closed at its next
// change.
func (w *watch) Current() (api.Step, <-chan struct{}, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.step, w.changed, w.err
}

// WaitFor returns the first record for which ok holds.
func (w *watch) WaitFor(ctx context.Context, ok func(api.Step) bool) (api.Step, error) {
	for {
		s, changed, err := w.Current()
		if err != nil {
			return s, err
		}
		if ok(s) {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-changed:
		}
	}
}

// waitChange waits until changed (from Current) is closed or d passes.
func waitChange(ctx context.Context, changed <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-changed:
	case <-t.C:
	}
	return nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
