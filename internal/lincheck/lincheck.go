// Package lincheck checks histories of scheduler API calls for
// linearizability with porcupine. The model is one step's lifecycle seen
// through the API: a submit creates the step, and reads observe its state,
// which only ever moves forward (queued, placed, starting, running, then one
// terminal state, or back to queued as a new attempt). Transitions made by
// the system itself (placement, agents' reports) happen between client
// operations, so the model lets a read advance the state, never move it
// back, and never see a step that no submit has created.
package lincheck

import (
	"fmt"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is the kind of a recorded operation.
type Kind int

// Operation kinds.
const (
	Submit Kind = iota
	Read
)

// Input is what a client asked.
type Input struct {
	Kind Kind
	Step string
}

// Output is what it got. For a Submit, OK reports the step was created (a
// retry that finds it created already is OK too); for a Read, Found reports
// whether the step existed and Rank how far along its lifecycle it was.
// Unknown marks a call whose outcome the client never learned (a timeout):
// it may or may not have taken effect.
type Output struct {
	OK      bool
	Found   bool
	Attempt int
	Rank    int
	Unknown bool
}

// Rank orders a step's (attempt, state) so that the lifecycle only moves
// forward: later attempts rank above earlier ones.
func Rank(attempt int, state string) int {
	r := map[string]int{"queued": 1, "placed": 2, "starting": 3, "running": 4,
		"exited": 5, "failed": 5, "cancelled": 5, "lost": 5, "expired": 5}[state]
	return attempt*10 + r
}

type stepState struct {
	exists bool
	rank   int
}

// Model is the porcupine model of the API, partitioned by step.
var Model = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range h {
			s := op.Input.(Input).Step
			if _, ok := by[s]; !ok {
				order = append(order, s)
			}
			by[s] = append(by[s], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, s := range order {
			out = append(out, by[s])
		}
		return out
	},
	Init: func() any { return stepState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(stepState), input.(Input), output.(Output)
		switch in.Kind {
		case Submit:
			if out.Unknown {
				return true, stepState{exists: true, rank: max(st.rank, Rank(1, "queued"))}
			}
			if !out.OK {
				return true, st // refused: nothing changed
			}
			if st.exists {
				return true, st // an idempotent retry
			}
			return true, stepState{exists: true, rank: Rank(1, "queued")}
		case Read:
			if out.Unknown {
				return true, st
			}
			if !out.Found {
				return !st.exists, st
			}
			if !st.exists || out.Rank < st.rank {
				return false, st
			}
			return true, stepState{exists: true, rank: out.Rank}
		}
		return false, st
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		if in.Kind == Submit {
			return fmt.Sprintf("submit(%s) -> %+v", in.Step, out)
		}
		return fmt.Sprintf("read(%s) -> %+v", in.Step, out)
	},
}

// History records operations from many goroutines.
type History struct {
	mu    sync.Mutex
	start time.Time
	ops   []porcupine.Operation
}

// NewHistory starts an empty history.
func NewHistory() *History { return &History{start: time.Now()} }

// Call marks the start of an operation; call the returned function with its
// output when it returns.
func (h *History) Call(client int, in Input) func(Output) {
	call := time.Since(h.start).Nanoseconds()
	return func(out Output) {
		ret := time.Since(h.start).Nanoseconds()
		if out.Unknown {
			// An operation whose outcome is unknown may take effect
			// at any later time.
			ret = 1 << 62
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	}
}

// Len returns the number of recorded operations.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// Check reports whether the history is linearizable, giving up after
// timeout (an unknown result is reported as an error).
func (h *History) Check(timeout time.Duration) error {
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	h.mu.Unlock()
	switch porcupine.CheckOperationsTimeout(Model, ops, timeout) {
	case porcupine.Ok:
		return nil
	case porcupine.Illegal:
		return fmt.Errorf("history of %d operations is not linearizable", len(ops))
	default:
		return fmt.Errorf("linearizability check of %d operations did not finish within %v", len(ops), timeout)
	}
}
