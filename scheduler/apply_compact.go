package scheduler

import (
	"fmt"

	"github.com/rodon-compute/rodon/cluster"
)

// maxCompact bounds the steps one compact_steps entry removes, so that no
// apply holds the state for long.
const maxCompact = 1000

// CompactResult is the result of a compact_steps entry.
type CompactResult struct {
	// Dropped counts the steps removed.
	Dropped int
}

// applyCompactSteps removes up to c.Limit terminal steps that ended before
// c.Before, those that ended first first (see cluster.CompactSteps). It
// reads nothing but the command and the state: which steps go follows from
// their recorded end times, never from a clock.
func (st *State) applyCompactSteps(_ uint64, c *cluster.CompactSteps) any {
	if c.Limit < 1 || c.Limit > maxCompact {
		return fmt.Errorf("compact steps: limit %d: want 1 to %d: %w", c.Limit, maxCompact, ErrInvalid)
	}
	var drop []*cluster.Step
	st.ended.Ascend(func(s *cluster.Step) bool {
		if len(drop) == c.Limit || !endedAt(s).Before(c.Before) {
			return false
		}
		drop = append(drop, s)
		return true
	})
	for _, s := range drop {
		st.removeStep(s)
	}
	return &CompactResult{Dropped: len(drop)}
}
