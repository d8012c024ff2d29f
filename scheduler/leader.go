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
	b := newBatcher(s.raft, s.batchesAllowed)
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
			wg.Go(func() { s.loop(ctx, loop.name, loop.fn) })
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
// due for the clock (see loop).
type leaderLoop struct {
	name string
	fn   func(context.Context) time.Time
}

// leaderLoops are the loops the leader runs; since is when it took
// office.
func (s *Server) leaderLoops(since time.Time) []leaderLoop {
	return []leaderLoop{
		{"placement", s.placeQueued},
		{"node_ttl", func(ctx context.Context) time.Time { return s.checkNodes(ctx, since) }},
		{"drain", s.checkDrains},
		{"queue_expiry", s.expireQueued},
		{"start_timeout", s.checkStarts},
		{"compaction", s.compactSteps},
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

// loop runs one leader loop until ctx ends: fn does a pass and returns when
// the next pass is due for the clock (zero: only when the state changes);
// a pass also runs after every change of the state.
func (s *Server) loop(ctx context.Context, name string, fn func(context.Context) time.Time) {
	logger := s.logger.With("loop", name)
	logger.Debug("leader loop started")
	s.loops.Add(1)
	defer s.loops.Add(-1)
	st := s.fsm.State()
	for ctx.Err() == nil {
		idx := st.Index()
		next := fn(ctx)
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if !next.IsZero() {
			wctx, cancel = context.WithDeadline(ctx, next)
		}
		_, _ = st.WaitIndex(wctx, idx)
		cancel()
	}
	logger.Debug("leader loop stopped")
}
