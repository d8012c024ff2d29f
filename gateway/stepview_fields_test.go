package gateway

import (
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// TestStepViewTypedEvents: an egress event's typed fields decide the
// denied counts (its message is not parsed), and the fields reach the
// view with a node's address scrubbed from the destination as from the
// message.
func TestStepViewTypedEvents(t *testing.T) {
	now := time.Now()
	st := &api.Step{ID: "s1", State: "running", Node: "node-q7", Events: []api.Event{
		{Time: now, Kind: api.EventEgressDenied, Message: "egress denied: 10.1.2.3:22, a message not in the old form",
			Egress: &api.Egress{Reason: "node", Destination: "10.1.2.3:22", Protocol: "tcp", Packets: 3}},
		{Time: now, Kind: "output_truncated", Message: "output truncated", Output: &api.Output{DroppedBytes: 4096}},
	}}
	v := runStepView(runStepRecord{ID: "s1"}, st, "10.1.2.3")
	if got := v.Denied["node"]; got != 3 {
		t.Errorf("Denied[node] = %d, want 3 (from the event's fields)", got)
	}
	if len(v.Events) != 2 {
		t.Fatalf("view has %d events, want 2", len(v.Events))
	}
	e := v.Events[0].Egress
	if e == nil || e.Reason != "node" || e.Protocol != "tcp" || e.Packets != 3 || e.Destination != "[node]:22" {
		t.Errorf("egress event in the view = %+v, want its fields with the node's address scrubbed", e)
	}
	if o := v.Events[1].Output; o == nil || o.DroppedBytes != 4096 {
		t.Errorf("output_truncated in the view = %+v, want dropped_bytes 4096", v.Events[1])
	}
}

// TestStepViewCause: a step that failed on its node shows its typed cause
// beside its reason, and its exited event says the cause in words of the
// gateway's, whatever the scheduler's message held.
func TestStepViewCause(t *testing.T) {
	st := &api.Step{ID: "s1", State: "failed", TerminatedBy: "platform", Node: "node-q7",
		Reason: `step did not start: command "nope" not found in the image`, Cause: api.CauseCommandNotFound,
		Events: []api.Event{{Kind: api.EventExited, Message: "failed (platform) on node-q7: OCI runtime exec failed",
			Exit: &api.ExitEvent{State: "failed", ExitCode: -1, TerminatedBy: "platform", Cause: api.CauseCommandNotFound}}}}
	v := runStepView(runStepRecord{ID: "s1"}, st)
	if v.Cause != api.CauseCommandNotFound || v.Reason != st.Reason {
		t.Errorf("view cause %q, reason %q; want %q and the node's sentence", v.Cause, v.Reason, api.CauseCommandNotFound)
	}
	if len(v.Events) != 1 || v.Events[0].Message != "failed: the command was not found in the image" || v.Events[0].Exit == nil {
		t.Errorf("events = %+v, want the exited event in the gateway's words, with its payload", v.Events)
	}
}
