package cluster

import (
	"testing"

	"github.com/rodon-compute/rodon/api"
)

// TestStatesAreTheContracts: the replicated step states are the public
// ones (api.Step*), and final in both or in neither.
func TestStatesAreTheContracts(t *testing.T) {
	for _, tt := range []struct {
		state StepState
		api   string
	}{
		{StateQueued, api.StepQueued}, {StatePlaced, api.StepPlaced}, {StateStarting, api.StepStarting},
		{StateRunning, api.StepRunning}, {StateExited, api.StepExited}, {StateFailed, api.StepFailed},
		{StateCancelled, api.StepCancelled}, {StateLost, api.StepLost}, {StateExpired, api.StepExpired},
	} {
		if string(tt.state) != tt.api {
			t.Errorf("cluster state %q, api state %q: want the same name", tt.state, tt.api)
		}
		if got, want := tt.state.Terminal(), api.TerminalState(tt.api); got != want {
			t.Errorf("%s: Terminal() = %v, api.TerminalState = %v", tt.state, got, want)
		}
	}
}
