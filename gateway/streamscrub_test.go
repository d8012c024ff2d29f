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

// TestScrubFrameRuntimeError: an exit frame's reason and an event's
// message say "the command could not be started", as the step objects do.
func TestScrubFrameRuntimeError(t *testing.T) {
	g := newFixture(t).g
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	msg := `OCI runtime exec failed: exec failed: unable to start container process: exec: "nope": executable file not found in $PATH: unknown`
	want := `the command could not be started: "nope": executable file not found in $PATH`
	for _, fr := range []api.Frame{
		api.NewExitFrame(2, api.Exit{State: "failed", TerminatedBy: "platform", Reason: msg}, now),
		api.NewEventFrame(1, api.Event{Time: now, Kind: "warning", Message: msg}, now),
	} {
		in, err := json.Marshal(fr)
		if err != nil {
			t.Fatal(err)
		}
		out := g.ScrubFrame(t.Context(), in)
		var got api.Frame
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("ScrubFrame(%s) = %s: %v", in, out, err)
		}
		var text string
		if got.Kind == api.KindExit {
			x, err := got.Exit()
			if err != nil {
				t.Fatal(err)
			}
			text = x.Reason
		} else {
			e, err := got.Event()
			if err != nil {
				t.Fatal(err)
			}
			text = e.Message
		}
		if text != want {
			t.Errorf("ScrubFrame(%s) text = %q, want %q", in, text, want)
		}
	}
}
