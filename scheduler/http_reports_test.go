package scheduler

import (
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// TestAgentReports sends agent n1's reports together, with TLS, through a
// follower: each item gets the answer its own route would give, the valid
// ones are logged in order (the phase before the exit), and an item about
// another node's step is refused on its own.
func TestAgentReports(t *testing.T) {
	c := newTLSCluster(t, 3, nil)
	op := c.clientAs("operator/ops", c.follower())
	n1 := c.clientAs("agent/n1", c.follower())
	newAgent(t, n1, "n1", 4, 8*gib)
	newAgent(t, c.clientAs("agent/n2"), "n2", 4, 8*gib)
	var ids []string
	for _, node := range []string{"n1", "n2"} {
		req := stepRequest(false)
		req.Node = node
		s, err := op.SubmitStep(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		waitStep(t, op, s.ID, "placed", stateIs("placed"))
		ids = append(ids, s.ID)
	}
	mine, theirs := cluster.StepID(ids[0]), cluster.StepID(ids[1])
	exit := cluster.StepExit{Node: "n1", Attempt: 1, Record: cluster.ExitRecord{Step: mine, State: cluster.StateExited, TerminatedBy: cluster.ByExit}}
	res, err := n1.Reports(t.Context(), cluster.Reports{Node: "n1", Reports: []cluster.Report{
		{Kind: cluster.ReportPhase, Phase: &cluster.StepPhase{Step: mine, Node: "n1", Attempt: 1, State: cluster.StateRunning,
			Phases: cluster.Phases{Created: time.Now(), Started: time.Now()}}},
		{Kind: cluster.ReportExit, Exit: &exit},
		{Kind: cluster.ReportEvents, Events: &cluster.StepEvents{Step: theirs, Node: "n1", Attempt: 1, Events: []cluster.Event{{Kind: "warning", Message: "not mine"}}}},
		{Kind: cluster.ReportPhase, Phase: &cluster.StepPhase{Step: "nope", Node: "n1", Attempt: 1}},
		{Kind: cluster.ReportConfirmCancel, ConfirmCancel: &cluster.ConfirmCancel{Step: mine, Node: "n2", Attempt: 1}},
		{Kind: cluster.ReportExit, Phase: &cluster.StepPhase{Step: mine, Node: "n1", Attempt: 1}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []int{0, 0, 403, 404, 400, 400}
	if len(res.Results) != len(want) {
		t.Fatalf("Reports() = %d results, want %d", len(res.Results), len(want))
	}
	for i, r := range res.Results {
		got := 0
		if r.Error != nil {
			got = r.Error.Status
		}
		if got != want[i] {
			t.Errorf("result %d = %+v, want status %d", i, r.Error, want[i])
		}
	}
	if s, _ := op.Step(t.Context(), string(mine)); s.State != "exited" || s.Phases.Started.IsZero() {
		t.Errorf("step %s = %s, started %v; want exited after running", mine, s.State, s.Phases.Started)
	}
	s, _ := op.Step(t.Context(), string(theirs))
	for _, e := range s.Events {
		if e.Message == "not mine" {
			t.Errorf("step %s has the refused event %+v", theirs, e)
		}
	}
	if s.State != "placed" {
		t.Errorf("step %s = %s, want placed", theirs, s.State)
	}
	// A repeated request changes nothing more (every report is idempotent).
	if _, err := n1.Reports(t.Context(), cluster.Reports{Node: "n1", Reports: []cluster.Report{{Kind: cluster.ReportExit, Exit: &exit}}}); err != nil {
		t.Errorf("repeated Reports() = %v", err)
	}
	// Another node's body is refused as a whole.
	if _, err := n1.Reports(t.Context(), cluster.Reports{Node: "n2"}); !client.IsCode(err, api.CodeForbidden) {
		t.Errorf("Reports(node n2) as agent/n1 = %v, want 403", err)
	}
}
