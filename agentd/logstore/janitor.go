package logstore

import (
	"context"
	"slices"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

// Run removes logs past their retention, and past the budget, every
// Config.SweepInterval and whenever a log finishes, until ctx ends, and
// returns nil then. A log is past its retention once no Log holds it and
// Config.Retention has passed since its exit frame (or, for a log left
// unfinished, since its last frame). While all logs together take more
// than Config.Budget, the logs no Log holds are removed, the longest idle
// first.
func (s *Store) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	for {
		s.sweep(time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-s.kickc:
		}
	}
}

// sweep removes the logs past their retention at now, then the oldest idle
// ones while the store is over its budget.
func (s *Store) sweep(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	type idle struct {
		l     *stepLog
		since time.Time
		bytes int64
	}
	var total int64
	var candidates []idle
	for id, l := range s.logs {
		l.mu.Lock()
		free := l.writer == nil
		expired := free && now.Sub(l.idleSince) >= s.cfg.Retention
		finished, since, bytes := l.finished, l.idleSince, l.diskBytesLocked()
		l.mu.Unlock()
		if !expired {
			total += bytes
			if free {
				candidates = append(candidates, idle{l, since, bytes})
			}
			continue
		}
		s.removeLocked(id, l, "retention", finished)
	}
	if total <= s.cfg.Budget {
		return
	}
	slices.SortFunc(candidates, func(a, b idle) int { return a.since.Compare(b.since) })
	for _, c := range candidates {
		if total <= s.cfg.Budget {
			break
		}
		s.removeLocked(c.l.id, c.l, "budget", true)
		total -= c.bytes
	}
}

// removeLocked removes the log l of id for the reason given. The caller
// holds s.mu.
func (s *Store) removeLocked(id cluster.StepID, l *stepLog, why string, finished bool) {
	delete(s.logs, id)
	if err := l.remove(); err != nil {
		s.logger.Warn("remove output log", "step", id, "why", why, "error", err)
		return
	}
	s.logger.Debug("removed output log", "step", id, "why", why, "finished", finished)
}
