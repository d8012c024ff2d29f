package scheduler

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

// watchLeadership runs the leader loops while this member leads: it starts
// them when it gains leadership and stops them (and waits for them) when it
// loses it or ctx ends.
func (s *Server) watchLeadership(ctx context.Context) error {
	ch, err := s.raft.LeaderCh(ctx)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, ErrStopped) {
			return nil // Run reports why Raft stopped
		}
		return err
	}
	var stop func()
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for {
		// The channel keeps only the latest change: read the state itself.
		switch leading := s.raft.IsLeader(); {
		case leading && stop == nil:
			s.logger.Info("leadership gained: starting leader loops")
			stop = s.lead(ctx)
			s.warnLocalStore()
		case !leading && stop != nil:
			s.logger.Info("leadership lost: stopping leader loops")
			stop()
			stop = nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil
		}
	}
}

// lead starts the leader loops and returns the function that stops them
// and waits for them to end.
func (s *Server) lead(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	since := s.now()
	s.mu.Lock()
	s.pending = nil
	s.mu.Unlock()

	var wg sync.WaitGroup
	b := newBatcher(s.raft, s.batchFormat)
	wg.Go(func() { b.run(ctx) })
	s.batcher.Store(b)
	wg.Go(func() {
		// Apply what the previous leader committed before acting on it.
		if err := s.raft.Barrier(ctx); err != nil {
			if ctx.Err() == nil {
				s.logger.Warn("leader barrier failed", "error", err)
			}
			return
		}
		// Heartbeats are kept in memory once the state holds every
		// entry committed before this term (which every agent's view
		// comes from): see handleHeartbeat.
		s.beats.Store(newHeartbeats())
		s.establish(ctx)
		for _, loop := range s.leaderLoops(since) {
			wg.Go(func() { s.loop(ctx, loop) })
		}
	})
	return func() {
		s.batcher.CompareAndSwap(b, nil)
		s.beats.Store(nil)
		cancel()
		wg.Wait()
	}
}

// leaderLoop is one loop of the leader: a pass returns when the next is
// due for the clock (see loop); a change of one of the wake topics calls
// for a pass at once, and so does one of the idle topics when the pass
// returned no time (it had nothing pending that the clock could make due).
type leaderLoop struct {
	name       string
	fn         func(context.Context) time.Time
	wake, idle []topic
}

// leaderLoops are the loops the leader runs; since is when it took
// office.
//
// Why each waits for what it does: placement for a step to place
// (queued) or room for one (capacity, nodes); node_ttl and drain for a
// node's record and their deadlines; queue_expiry for a step queued (as
// the design has it: its deadline is later than those computed, but for
// a change of the leader's clock); start_timeout for its deadlines only
// while it has any (a new placement's deadline is never earlier than
// those of the attempts already placed, see checkStarts), else for a
// placement; compaction likewise for a step that ends (one that ends
// later is compacted later).
func (s *Server) leaderLoops(since time.Time) []leaderLoop {
	var (
		queued   = topic{kind: topicQueued}
		placed   = topic{kind: topicPlaced}
		capacity = topic{kind: topicCapacity}
		nodes    = topic{kind: topicNodes}
		ended    = topic{kind: topicEnded}
	)
	return []leaderLoop{
		{name: "placement", fn: s.placeQueued, wake: []topic{queued, capacity, nodes}},
		{name: "node_ttl", fn: func(ctx context.Context) time.Time { return s.checkNodes(ctx, since) }, wake: []topic{nodes}},
		{name: "drain", fn: s.checkDrains, wake: []topic{nodes}},
		{name: "queue_expiry", fn: s.expireQueued, wake: []topic{queued}},
		{name: "start_timeout", fn: s.checkStarts, idle: []topic{placed}},
		{name: "compaction", fn: s.compactSteps, idle: []topic{ended}},
	}
}

// establish records this member's addresses for the followers that
// forward to it, and drops the records of members no longer in the Raft
// configuration.
func (s *Server) establish(ctx context.Context) {
	st := s.fsm.State()
	if m, ok := st.Member(s.cfg.ID); !ok || m.RaftAddress != s.cfg.RaftAddr || m.HTTPAddress != s.cfg.HTTPAddr || m.Version != cluster.MemberVersion {
		_, err := s.raft.Apply(ctx, cluster.SetMember{ID: s.cfg.ID, RaftAddress: s.cfg.RaftAddr, HTTPAddress: s.cfg.HTTPAddr, Version: cluster.MemberVersion, At: s.now()})
		if err != nil && ctx.Err() == nil {
			s.logger.Warn("record own member addresses", "error", err)
		}
	}
	members, err := s.raft.Members(ctx)
	if err != nil {
		return
	}
	inConfig := make(map[string]bool, len(members))
	for _, m := range members {
		inConfig[m.ID] = true
	}
	for _, m := range st.Members() {
		if !inConfig[m.ID] {
			if _, err := s.raft.Apply(ctx, cluster.RemoveMember{ID: m.ID, At: s.now()}); err != nil && ctx.Err() == nil {
				s.logger.Warn("drop record of a removed member", "peer", m.ID, "error", err)
			}
		}
	}
}

// loop runs one leader loop until ctx ends: l.fn does a pass and returns
// when the next pass is due for the clock (zero: only when one of its
// topics changes); a pass also runs after a change of one of l.wake, or
// of l.idle after a pass that returned zero. The topics are watched
// before the pass reads the state, so that no change is missed.
func (s *Server) loop(ctx context.Context, l leaderLoop) {
	logger := s.logger.With("loop", l.name)
	logger.Debug("leader loop started")
	s.loops.Add(1)
	defer s.loops.Add(-1)
	st := s.fsm.State()
	chans := make([]<-chan struct{}, 0, len(l.wake)+len(l.idle))
	for ctx.Err() == nil {
		chans = chans[:0]
		for _, t := range l.wake {
			chans = append(chans, st.watch(t))
		}
		n := len(chans)
		for _, t := range l.idle {
			chans = append(chans, st.watch(t))
		}
		next := l.fn(ctx)
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if !next.IsZero() {
			wctx, cancel = context.WithDeadline(ctx, next)
			chans = chans[:n]
		}
		_ = waitTopics(wctx, chans)
		cancel()
	}
	logger.Debug("leader loop stopped")
}
