package logstore

import (
	"context"
	"time"
)

// Run removes logs past their retention every Config.SweepInterval until
// ctx ends, and returns nil then. A log is past its retention once no Log
// holds it and Config.Retention has passed since its exit frame (or, for a
// log left unfinished, since its last frame).
func (s *Store) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	for {
		s.sweep(time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// sweep removes the logs past their retention at now.
func (s *Store) sweep(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, l := range s.logs {
		l.mu.Lock()
		expired := l.writer == nil && now.Sub(l.idleSince) >= s.cfg.Retention
		finished := l.finished
		l.mu.Unlock()
		if !expired {
			continue
		}
		delete(s.logs, id)
		if err := l.remove(); err != nil {
			s.logger.Warn("remove output log past retention", "step", id, "error", err)
			continue
		}
		s.logger.Debug("removed output log past retention", "step", id, "finished", finished)
	}
}
