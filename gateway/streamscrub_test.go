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
