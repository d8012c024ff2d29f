package cluster

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// TestEventLegacyJSON: events recorded before the typed payloads (flat
// fields in the log and in snapshots) decode with their kind's payload;
// new events round-trip as they are.
func TestEventLegacyJSON(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want Event
	}{
		{`{"time":"2026-01-02T03:04:05Z","kind":"egress_denied","message":"m","reason":"metadata","destination":"169.254.169.254:80","protocol":"tcp","packets":3}`,
			Event{Time: at, Kind: EventEgressDenied, Message: "m", Egress: &api.Egress{Reason: "metadata", Destination: "169.254.169.254:80", Protocol: "tcp", Packets: 3}}},
		{`{"time":"2026-01-02T03:04:05Z","kind":"output_truncated","message":"m","dropped_bytes":4096}`,
			Event{Time: at, Kind: EventOutputTruncated, Message: "m", Output: &api.Output{DroppedBytes: 4096}}},
		{`{"time":"2026-01-02T03:04:05Z","kind":"waiting","message":"m","reason":"capacity"}`,
			Event{Time: at, Kind: EventWaiting, Message: "m", Waiting: &api.Waiting{Reason: WaitCapacity}}},
		{`{"time":"2026-01-02T03:04:05Z","kind":"unplaceable","message":"m","reason":"memory"}`,
			Event{Time: at, Kind: EventUnplaceable, Message: "m", Unplaceable: &api.NotPlaceable{Resource: "memory"}}},
		{`{"time":"2026-01-02T03:04:05Z","kind":"files_changed","message":"1 file changed: +a"}`,
			Event{Time: at, Kind: EventFilesChanged, Message: "1 file changed: +a"}},
	} {
		var got Event
		if err := json.Unmarshal([]byte(tc.in), &got); err != nil {
			t.Fatalf("Unmarshal(%s) = %v", tc.in, err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Unmarshal(%s) = %+v, want %+v", tc.in, got, tc.want)
		}
		b, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		var again Event
		if err := json.Unmarshal(b, &again); err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("round trip of %s = %+v, %v; want %+v", b, again, err, got)
		}
	}
}
