package gateway

import (
	"testing"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/grammartest"
)

// TestGrammar: a run's steps read the table's sizes as the other entry
// points do (internal/grammartest): the memory field of POST /v1/runs, as
// the run's decoding checks each step.
func TestGrammar(t *testing.T) {
	grammartest.Run(t, grammartest.Entry{grammartest.Size: func(_ *testing.T, s string) (int64, error) {
		req, err := stepRequest(0, api.StepSpec{Args: []string{"true"}, Memory: s})
		return req.MemoryBytes, err
	}})
}
