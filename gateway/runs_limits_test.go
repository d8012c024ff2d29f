package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// TestStepRequestLimits: a run's step limits pass through to the
// scheduler's request, checked against the one table; absent ones stay
// zero for the scheduler's defaults.
func TestStepRequestLimits(t *testing.T) {
	base := api.StepSpec{Args: []string{"true"}}
	req, err := stepRequest(0, base)
	if err != nil || req.Pids != 0 || req.WorkspaceBytes != 0 || req.OutputBytes != 0 || req.Timeout != 0 {
		t.Fatalf("stepRequest(no limits) = %+v, %v; want zeros (the scheduler's defaults)", req, err)
	}
	s := base
	s.Pids, s.WorkspaceSize, s.OutputCap, s.Timeout = 256, "2Gi", "1Mi", api.Duration(10*time.Minute)
	req, err = stepRequest(0, s)
	if err != nil || req.Pids != 256 || req.WorkspaceBytes != 2<<30 || req.OutputBytes != 1<<20 || time.Duration(req.Timeout) != 10*time.Minute {
		t.Fatalf("stepRequest(limits) = %+v, %v", req, err)
	}
	for _, tc := range []struct {
		mut  func(*api.StepSpec)
		want string
	}{
		{func(s *api.StepSpec) { s.Pids = cluster.MaxLimits.Pids + 1 }, `steps[0].pids`},
		{func(s *api.StepSpec) { s.Pids = -1 }, `steps[0].pids`},
		{func(s *api.StepSpec) { s.Timeout = api.Duration(25 * time.Hour) }, `steps[0].timeout`},
		{func(s *api.StepSpec) { s.WorkspaceSize = "65Gi" }, `steps[0].workspace_size`},
		{func(s *api.StepSpec) { s.OutputCap = "1Ki" }, `steps[0].output_cap`},
		{func(s *api.StepSpec) { s.OutputCap = "lots" }, `steps[0].output_cap`},
	} {
		s := base
		tc.mut(&s)
		if _, err := stepRequest(0, s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("stepRequest(%+v) = %v, want an error naming %s", s, err, tc.want)
		}
	}
}
