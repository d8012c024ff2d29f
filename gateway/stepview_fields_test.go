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
