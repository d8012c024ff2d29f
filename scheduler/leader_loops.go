package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

// Each pass of a leader loop reads the state, applies what is due, and
// returns when the next pass is due for the clock (zero: only on the next
// change of one of the loop's topics, see leaderLoops). A failed Apply is
// logged and retried on a pass a second later at the latest; after
// leadership is lost, the loops are stopped.

// placeQueued places the queued steps, oldest first, each on the node
// Place picks given the reservations so far, in one pass over one read of
// the state: the pass's own decisions count in its local reservations. A
// step that no node could ever take fails (step_unplaceable); one that
// fits nowhere now waits for the next change of the state (a step ending,
// a node registering), and says why in a waiting event when the reason
// changed (steps_waiting). The pass's commands go into as few entries as
// they may (applyAll). The FSM checks each placement again: one refused
// because the state changed since the read (a node went down, a cancel
// arrived) is retried on the next pass.
func (s *Server) placeQueued(ctx context.Context) time.Time {
	st := s.fsm.State()
	queued := st.Steps(StepFilter{State: cluster.StateQueued})
	if len(queued) == 0 {
		return time.Time{}
	}
	nodes, used, _ := st.Placement()
	var (
		cmds   []cluster.Command
		placed = make(map[int]cluster.Step) // by index in cmds
		waits  []cluster.Wait
	)
	for _, step := range queued {
		node, err := Place(nodes, used, step.Spec)
		var ce *CapacityError
		switch {
		case errors.As(err, &ce) && ce.Unplaceable != nil:
			s.logger.Info("step unplaceable", "step", step.ID, "reason", ce.Reason)
			cmds = append(cmds, cluster.StepUnplaceable{Step: step.ID, Attempt: step.Attempts, Cause: *ce.Unplaceable,
				Reason: ce.Reason, At: s.now()})
			s.setPending(step.ID, "")
			continue
		case err != nil:
			// Capacity exhausted: retried when the state changes. The
			// reason is kept for the step's expiry, should it come.
			s.setPending(step.ID, err.Error())
			if ce != nil && ce.Wait != lastWait(&step) {
				msg := "waiting: " + ce.Reason
				if len(msg) > maxWaitMessage {
					msg = msg[:maxWaitMessage-3] + "..."
				}
				waits = append(waits, cluster.Wait{Step: step.ID, Attempt: step.Attempts, Reason: ce.Wait, Message: msg})
			}
			continue
		}
		s.setPending(step.ID, "")
		reserved := step
		reserved.State = cluster.StatePlaced
		u := used[node]
		u.add(&reserved, 1)
		used[node] = u
		placed[len(cmds)] = step
		cmds = append(cmds, cluster.PlaceStep{Step: step.ID, Node: node, At: s.now()})
	}
	for len(waits) > 0 {
		n := min(len(waits), maxWaits)
		cmds = append(cmds, cluster.StepsWaiting{Waits: waits[:n], At: s.now()})
		waits = waits[n:]
	}
	var next time.Time
	results, err := s.applyAll(ctx, cmds)
	if err != nil {
		s.loopError(ctx, "place steps", err, "commands", len(cmds), "applied", len(results))
		next = s.now().Add(time.Second)
	}
	for i, res := range results {
		step, isPlace := placed[i]
		err, _ := res.(error)
		switch {
		case err != nil && isPlace:
			s.setPending(step.ID, err.Error())
			s.loopError(ctx, "place step", err, "step", step.ID)
			// The change that refused it woke the loop already; this
			// bounds the wait should it be one no topic names.
			next = earliest(next, s.now().Add(time.Second))
		case err != nil:
			s.loopError(ctx, "record placement outcome", err, "command", cmds[i].CommandType())
		case isPlace:
			s.metrics.placement.Observe(cmds[i].(cluster.PlaceStep).At.Sub(step.Phases.Queued).Seconds())
		}
	}
	return next
}

// applyAll logs cmds, which must be batchable, in order and in as few
// entries as it may: batches of at most maxBatchItems items when every
// member knows them, else one entry each. It returns each command's result
// or business error (an error value) in results; err is a failure of the
// log itself (not the leader, leadership lost), after which the commands
// from the failed entry on have no result.
func (s *Server) applyAll(ctx context.Context, cmds []cluster.Command) (results []any, err error) {
	if len(cmds) == 0 {
		return nil, nil
	}
	results = make([]any, 0, len(cmds))
	f := s.batchFormat(ctx)
	if f == batchNone {
		for _, c := range cmds {
			b, err := cluster.Encode(c)
			if err != nil {
				return results, err
			}
			res, err := s.raft.applyRaw(ctx, c.CommandType(), b)
			if err != nil {
				return results, err
			}
			results = append(results, res)
		}
		return results, nil
	}
	for len(cmds) > 0 {
		n := min(len(cmds), maxBatchItems)
		items := make([]cluster.BatchItem, n)
		for i, c := range cmds[:n] {
			if items[i], err = newBatchItem(f, c); err != nil {
				return results, err
			}
		}
		t, entry := encodeBatch(f, items)
		res, err := s.raft.applyRaw(ctx, t, entry)
		if err != nil {
			return results, err
		}
		br, ok := res.(*BatchResult)
		if !ok || len(br.Results) != n {
			return results, fmt.Errorf("batch of %d items answered %T", n, res)
		}
		results = append(results, br.Results...)
		cmds = cmds[n:]
	}
	return results, nil
}

// checkStarts takes back the attempts their node did not start in time:
// a step still placed (its node did not report it starting) StartTimeout
// after its placement, or still starting (its sandbox not running)
// CreateTimeout after it. An idempotent one is queued again, any other
// fails (start_timeout).
func (s *Server) checkStarts(ctx context.Context) time.Time {
	st := s.fsm.State()
	var next time.Time
	var cmds []cluster.Command
	for _, b := range []struct {
		state cluster.StepState
		bound time.Duration
		what  string
	}{
		{cluster.StatePlaced, s.cfg.StartTimeout, "report it starting"},
		{cluster.StateStarting, s.cfg.CreateTimeout, "start its sandbox"},
	} {
		for _, step := range st.Steps(StepFilter{State: b.state}) {
			due := step.Phases.Placed.Add(b.bound)
			now := s.now()
			if now.Before(due) {
				// The loop waits for no other change while it has a
				// time: a placed attempt that starts meanwhile is due
				// later (CreateTimeout >= StartTimeout, see Config).
				next = earliest(next, due)
				continue
			}
			reason := fmt.Sprintf("node %s did not %s within %v of its placement (attempt %d)", step.Node, b.what, b.bound, step.Attempts)
			s.logger.Warn("step not started in time", "step", step.ID, "node", step.Node, "reason", reason)
			cmds = append(cmds, cluster.StartTimeout{Step: step.ID, Node: step.Node, Attempt: step.Attempts,
				State: b.state, Reason: reason, At: now})
		}
	}
	if s.applyPass(ctx, "take back a step not started", cmds) {
		next = earliest(next, s.now().Add(time.Second))
	}
	return next
}

// compactSteps removes from the replicated state the terminal steps that
// ended more than StepRetention ago, maxCompact per compact_steps entry
// (each is followed by another pass at once), and is due again when the
// oldest remaining one's retention ends.
func (s *Server) compactSteps(ctx context.Context) time.Time {
	oldest, ok := s.fsm.State().OldestEnded()
	if !ok {
		return time.Time{} // nothing ended: a change of the state wakes the loop
	}
	now := s.now()
	before := now.Add(-s.cfg.StepRetention)
	if !oldest.Before(before) {
		return oldest.Add(s.cfg.StepRetention).Add(time.Millisecond)
	}
	res, err := s.raft.Apply(ctx, cluster.CompactSteps{Before: before, Limit: maxCompact, At: now})
	if err != nil {
		s.loopError(ctx, "compact steps", err)
		return now.Add(time.Second)
	}
	n := 0
	if r, ok := res.(*CompactResult); ok {
		n = r.Dropped
	}
	s.metrics.compacted.Add(float64(n))
	s.metrics.compactionRun.Set(float64(now.UnixNano()) / 1e9)
	s.logger.Info("terminal steps compacted", "steps", n, "ended_before", before, "retention", s.cfg.StepRetention)
	if n == 0 {
		return now.Add(time.Second) // none could go: not at once again
	}
	return now // due again at once: more may be past their retention
}

// checkNodes declares down the nodes silent for longer than the TTL. A
// node's silence counts from its last heartbeat (in the leader's memory or
// the log), or from when this member became the leader (since), whichever
// is later: a new leader gives every
// node a full TTL, since it cannot know what the previous one heard.
func (s *Server) checkNodes(ctx context.Context, since time.Time) time.Time {
	ttl := s.cfg.NodeTTL
	var next time.Time
	var cmds []cluster.Command
	for _, n := range s.fsm.State().Nodes() {
		if n.State == cluster.NodeDown {
			continue
		}
		last := later(n.LastHeartbeat, since)
		if hb := s.beats.Load(); hb != nil {
			if at, _, ok := hb.last(n.ID); ok {
				last = later(last, at)
			}
		}
		due := last.Add(ttl)
		now := s.now()
		if now.Before(due) {
			next = earliest(next, due)
			continue
		}
		reason := fmt.Sprintf("no heartbeat for %v (ttl %v)", now.Sub(last).Round(time.Millisecond), ttl)
		s.logger.Warn("node lost", "node", n.ID, "reason", reason)
		cmds = append(cmds, cluster.MarkNodeLost{Node: n.ID, Reason: reason, At: now})
	}
	if s.applyPass(ctx, "mark node lost", cmds) {
		next = earliest(next, s.now().Add(time.Second))
	}
	return next
}

// checkDrains cancels the live steps of draining nodes whose deadline has
// passed.
func (s *Server) checkDrains(ctx context.Context) time.Time {
	st := s.fsm.State()
	var next time.Time
	var cmds []cluster.Command
	for _, n := range st.Nodes() {
		if n.Drain == nil || n.Drain.Deadline.IsZero() || n.State == cluster.NodeDown {
			continue
		}
		now := s.now()
		if now.Before(n.Drain.Deadline) {
			next = earliest(next, n.Drain.Deadline)
			continue
		}
		for _, step := range st.Assignments(n.ID) {
			if step.Cancel != nil {
				continue
			}
			reason := fmt.Sprintf("node %s was drained and its deadline %s passed", n.ID, n.Drain.Deadline.Format(time.RFC3339))
			cmds = append(cmds, cluster.RequestCancel{Step: step.ID, Reason: reason, At: now})
		}
	}
	if s.applyPass(ctx, "cancel step at drain deadline", cmds) {
		next = earliest(next, s.now().Add(time.Second))
	}
	return next
}

// expireQueued ends the steps queued for longer than QueueTimeout.
func (s *Server) expireQueued(ctx context.Context) time.Time {
	var next time.Time
	var cmds []cluster.Command
	for _, step := range s.fsm.State().Steps(StepFilter{State: cluster.StateQueued}) {
		due := step.Phases.Queued.Add(s.cfg.QueueTimeout)
		now := s.now()
		if now.Before(due) {
			next = earliest(next, due)
			continue
		}
		reason := fmt.Sprintf("not placed within the queue timeout of %v", s.cfg.QueueTimeout)
		if why := s.pendingReason(step.ID); why != "" {
			reason += ": " + why
		}
		cmds = append(cmds, cluster.Expire{Step: step.ID, Reason: reason, At: now})
	}
	results, err := s.applyAll(ctx, cmds)
	if err != nil {
		s.loopError(ctx, "expire steps", err, "steps", len(cmds))
		next = earliest(next, s.now().Add(time.Second))
	}
	for i, res := range results {
		id := cmds[i].(cluster.Expire).Step
		if err, ok := res.(error); ok {
			s.loopError(ctx, "expire step", err, "step", id)
			next = earliest(next, s.now().Add(time.Second))
			continue
		}
		s.setPending(id, "")
	}
	return next
}

// applyPass logs the commands of a leader loop's pass (applyAll) and logs
// what failed as what; it reports whether anything did, for the pass to
// be retried soon.
func (s *Server) applyPass(ctx context.Context, what string, cmds []cluster.Command) (failed bool) {
	results, err := s.applyAll(ctx, cmds)
	if err != nil {
		s.loopError(ctx, what, err, "commands", len(cmds), "applied", len(results))
		failed = true
	}
	for i, res := range results {
		if err, ok := res.(error); ok {
			s.loopError(ctx, what, err, "command", cmds[i].CommandType())
			failed = true
		}
	}
	return failed
}

// setPending records why step id could not be placed; "" forgets it.
func (s *Server) setPending(id cluster.StepID, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if reason == "" {
		delete(s.pending, id)
		return
	}
	if s.pending == nil {
		s.pending = make(map[cluster.StepID]string)
	}
	s.pending[id] = reason
}

func (s *Server) pendingReason(id cluster.StepID) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending[id]
}

// loopError logs a failed Apply of a leader loop: not at all when the loop
// is stopping or the member no longer leads, at debug level when the state
// changed under the pass.
func (s *Server) loopError(ctx context.Context, what string, err error, args ...any) {
	switch {
	case ctx.Err() != nil || errors.Is(err, ErrNotLeader) || errors.Is(err, ErrStopped):
	case errors.Is(err, ErrTransition) || errors.Is(err, ErrTerminal) || errors.Is(err, ErrNotFound) ||
		errors.Is(err, ErrCapacityExhausted) || errors.Is(err, ErrUnavailable):
		// The state changed since the pass read it; the next pass sees it.
		s.logger.Debug(what, append(args, "error", err)...)
	default:
		s.logger.Warn(what, append(args, "error", err)...)
	}
}

// earliest returns the earlier of two times, where zero means none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}
