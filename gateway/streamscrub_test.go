package gateway

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// TestScrubFrame: event messages and exit reasons lose provider
// identifiers; output frames pass unchanged.
func TestScrubFrame(t *testing.T) {
	g := newFixture(t).g
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	line := func(fr api.Frame) []byte {
		b, err := json.Marshal(fr)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	leak := "copy back /var/lib/rodon/ws/abc on 10.1.2.3:7200 via runsc"
	for _, tc := range []struct {
		name  string
		in    api.Frame
		clean bool
	}{
		{"event", api.NewEventFrame(3, api.Event{Time: now, Kind: "warning", Message: leak}, now), true},
		{"exit", api.NewExitFrame(9, api.Exit{State: "failed", TerminatedBy: "platform", Reason: leak}, now), true},
		{"stdout", api.NewOutputFrame(4, api.KindStdout, []byte(leak), now), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := line(tc.in)
			out := g.ScrubFrame(t.Context(), in)
			var fr api.Frame
			if err := json.Unmarshal(out, &fr); err != nil || fr.Seq != tc.in.Seq || fr.Kind != tc.in.Kind {
				t.Fatalf("ScrubFrame(%s) = %s (%v), want the same seq and kind", in, out, err)
			}
			leaked := strings.Contains(string(out), "/var/lib") || strings.Contains(string(out), "10.1.2.3") || strings.Contains(string(out), "runsc")
			if tc.clean && leaked {
				t.Errorf("ScrubFrame(%s) = %s, want provider identifiers scrubbed", in, out)
			}
			if !tc.clean && string(out) != string(in) {
				t.Errorf("ScrubFrame(%s) = %s, want output unchanged", in, out)
			}
		})
	}
}

// TestScrubFrameEvent: an event frame's message is the gateway's, made
// from the event's payload: a node's text (a runtime error, a node name)
// is never passed on; an exit frame's reason is the node's classified
// sentence, passed on as it is.
func TestScrubFrameEvent(t *testing.T) {
	g := newFixture(t).g
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	raw := `OCI runtime exec failed: exec failed: unable to start container process: exec: "nope": executable file not found in $PATH: unknown`
	for _, tc := range []struct {
		in   api.Event
		want string
	}{
		{api.Event{Time: now, Kind: api.EventExited, Message: raw,
			Exit: &api.ExitEvent{State: "failed", ExitCode: -1, TerminatedBy: "platform", Cause: api.CauseCommandNotFound}},
			"failed: the command was not found in the image"},
		{api.Event{Time: now, Kind: api.EventPlaced, Message: "placed on node node-secret-7 (attempt 2)", Attempt: 2}, "placed (attempt 2)"},
		{api.Event{Time: now, Kind: api.EventEgressDenied, Message: "egress denied: 127.0.0.1:7200, node, 1 packet",
			Egress: &api.Egress{Reason: "node", Destination: "127.0.0.1:7200", Packets: 1}}, "egress denied: [node]:7200, node, 1 packet"},
	} {
		in, err := json.Marshal(api.NewEventFrame(1, tc.in, now))
		if err != nil {
			t.Fatal(err)
		}
		out := g.ScrubFrame(t.Context(), in)
		var got api.Frame
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("ScrubFrame(%s) = %s: %v", in, out, err)
		}
		e, err := got.Event()
		if err != nil {
			t.Fatal(err)
		}
		if e.Message != tc.want || e.Kind != tc.in.Kind {
			t.Errorf("ScrubFrame(%s) event = %+v, want message %q", in, e, tc.want)
		}
	}
	reason := `step did not start: command "nope" not found in the image`
	in, err := json.Marshal(api.NewExitFrame(2, api.Exit{State: "failed", TerminatedBy: "platform", Reason: reason, Cause: api.CauseCommandNotFound}, now))
	if err != nil {
		t.Fatal(err)
	}
	var got api.Frame
	if err := json.Unmarshal(g.ScrubFrame(t.Context(), in), &got); err != nil {
		t.Fatal(err)
	}
	if x, err := got.Exit(); err != nil || x.Reason != reason || x.Cause != api.CauseCommandNotFound {
		t.Errorf("exit frame = %+v, %v; want reason %q and its cause", x, err, reason)
	}
}
