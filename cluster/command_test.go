package cluster

import (
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestEncode(t *testing.T) {
	c := SubmitStep{Step: "s1", Spec: StepSpec{Image: "base", Args: []string{"true"}, CPU: 1, MemoryBytes: 1 << 30},
		At: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	b, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	if CommandType(b[0]) != CmdSubmitStep {
		t.Errorf("Encode() type byte = %d, want %d", b[0], CmdSubmitStep)
	}
	var got SubmitStep
	if err := json.Unmarshal(b[1:], &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(c, got); diff != "" {
		t.Errorf("decoded payload (-want +got):\n%s", diff)
	}
}

// TestCommandTypesStable pins the numbers of the log entry types: they are
// in every stored Raft log and must never change.
func TestCommandTypesStable(t *testing.T) {
	want := map[CommandType]Command{
		1: RegisterNode{}, 2: Heartbeat{}, 3: SetNodeState{}, 4: SubmitStep{}, 5: PlaceStep{}, 6: StepPhase{},
		7: StepExit{}, 8: RequestCancel{}, 9: ConfirmCancel{}, 10: MarkNodeLost{}, 11: Expire{}, 12: StepEvents{},
		13: SetMember{}, 14: RemoveMember{}, 15: Restore{}, 19: SetGateway{},
		20: StepUnplaceable{}, 21: StepsWaiting{}, 22: StartTimeout{}, 23: CompactSteps{},
		25: CommitRevision{}, 26: Batch{},
	}
	// The record store's and the audit log's commands are the scheduler's
	// (scheduler.TestRecordCommandTypes pins them); their numbers are here.
	scheduler := map[CommandType]CommandType{16: CmdRecordPut, 17: CmdRecordDelete, 18: CmdAuditAppend, 24: CmdAuditDrop, 27: CmdAuditDropTenant}
	for n, c := range scheduler {
		if c != n {
			t.Errorf("scheduler command %s = %d, want %d", c, c, n)
		}
	}
	for n, c := range want {
		if c.CommandType() != n || c.CommandType().Ignorable() {
			t.Errorf("%T.CommandType() = %d, want %d, not ignorable", c, c.CommandType(), n)
		}
	}
	// 28 has no Command of its own: it is a Batch in MessagePack.
	if CmdBinaryBatch != 28 || CmdBinaryBatch.Ignorable() {
		t.Errorf("CmdBinaryBatch = %d, want 28, not ignorable", CmdBinaryBatch)
	}
	if len(commandNames) != len(want)+len(scheduler)+1 {
		t.Errorf("%d command names, want %d", len(commandNames), len(want)+len(scheduler)+1)
	}
	if !(IgnorableFlag | 16).Ignorable() {
		t.Errorf("IgnorableFlag|16 is not ignorable")
	}
}

func TestStepSpecValidate(t *testing.T) {
	ok := StepSpec{Image: "base", Args: []string{"true"}, CPU: 0.5, MemoryBytes: 64 << 20, Env: []string{"A=b", "EMPTY="}}
	for _, tc := range []struct {
		name    string
		edit    func(*StepSpec)
		wantErr string
	}{
		{name: "ok", edit: func(*StepSpec) {}},
		{name: "no image", edit: func(s *StepSpec) { s.Image = "" }, wantErr: "empty image"},
		{name: "no command", edit: func(s *StepSpec) { s.Args = nil }, wantErr: "empty command"},
		{name: "zero cpu", edit: func(s *StepSpec) { s.CPU = 0 }, wantErr: "cpu 0"},
		{name: "nan cpu", edit: func(s *StepSpec) { s.CPU = math.NaN() }, wantErr: "cpu NaN"},
		{name: "tiny cpu", edit: func(s *StepSpec) { s.CPU = 0.001 }, wantErr: "below the minimum"},
		{name: "negative memory", edit: func(s *StepSpec) { s.MemoryBytes = -1 }, wantErr: "memory -1"},
		{name: "negative pids", edit: func(s *StepSpec) { s.Pids = -1 }, wantErr: "pids -1"},
		{name: "negative timeout", edit: func(s *StepSpec) { s.Timeout = -time.Second }, wantErr: "timeout -1s"},
		{name: "bad env", edit: func(s *StepSpec) { s.Env = []string{"=x"} }, wantErr: "environment entry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.edit(&s)
			err := s.Validate()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestStepEventsAndClone(t *testing.T) {
	var s Step
	for i := range MaxEvents + 5 {
		s.AddEvent(Event{Kind: EventWarning, Message: string(rune('a' + i%26))})
	}
	if len(s.Events) != MaxEvents || s.EventsDropped != 5 || s.Events[0].Message != "f" {
		t.Errorf("after %d events: %d kept, %d dropped, first %q; want %d, 5, \"f\"",
			MaxEvents+5, len(s.Events), s.EventsDropped, s.Events[0].Message, MaxEvents)
	}
	code := 1
	s.ExitCode, s.Cancel, s.Spec.Args = &code, &Cancel{}, []string{"x"}
	c := s.Clone()
	*c.ExitCode, c.Cancel.Unverified, c.Spec.Args[0], c.Events[0].Kind = 2, "x", "y", "z"
	if *s.ExitCode != 1 || s.Cancel.Unverified != "" || s.Spec.Args[0] != "x" || s.Events[0].Kind != EventWarning {
		t.Errorf("Clone() shares memory with the original")
	}
}

func TestMilliCPU(t *testing.T) {
	for cores, want := range map[float64]int64{0.1: 100, 0.3: 300, 1.5: 1500, 0.0105: 11} {
		if got := MilliCPU(cores); got != want {
			t.Errorf("MilliCPU(%v) = %d, want %d", cores, got, want)
		}
	}
}

func TestValidateGatewayAddrs(t *testing.T) {
	a := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, x := range s {
			out = append(out, netip.MustParseAddr(x))
		}
		return out
	}
	many := make([]string, MaxGatewayAddrs+1)
	for i := range many {
		many[i] = fmt.Sprintf("11.0.0.%d", i+1)
	}
	for _, tc := range []struct {
		addrs   []netip.Addr
		wantErr string
	}{
		{a("11.0.0.1", "2600:1f00::1"), ""},
		{a("127.0.0.1"), ""},
		{nil, "no address"},
		{a(many...), "at most 16"},
		{[]netip.Addr{{}}, "missing"},
		{a("fe80::1%eth0"), "zone"},
		{a("::ffff:11.0.0.1"), "write it as 11.0.0.1"},
		{a("0.0.0.0"), "unicast"},
		{a("::"), "unicast"},
		{a("224.0.0.1"), "unicast"},
		{a("11.0.0.1", "11.0.0.1"), "twice"},
	} {
		err := ValidateGatewayAddrs(tc.addrs)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("ValidateGatewayAddrs(%v) = %v, want %q", tc.addrs, err, tc.wantErr)
		}
	}
}

// TestDecodeBatch: DecodeBatch gives json.Unmarshal's result for the form
// EncodeBatch writes and for any other, and fails where it fails.
func TestDecodeBatch(t *testing.T) {
	items := []BatchItem{
		{Type: CmdSubmitStep, Data: json.RawMessage(`{"step":"s1","spec":{"args":["a \"}\" b","{[\\\"]}"]},"at":"2026-01-01T00:00:00Z"}`)},
		{Type: CmdPlaceStep, Data: json.RawMessage(`{"step":"s1","node":"n1"}`)},
		{Type: CmdStepExit, Data: json.RawMessage(`{}`)},
	}
	valid := map[string][]byte{
		"EncodeBatch":          EncodeBatch(items)[1:],
		"EncodeBatch, one":     EncodeBatch(items[1:2])[1:],
		"EncodeBatch, none":    EncodeBatch(nil)[1:],
		"spaces":               []byte(` { "items" : [ {"type": 4, "data": {"step":"s1"} } ] } `),
		"keys in other order":  []byte(`{"items":[{"data":{"step":"s1"},"type":4}]}`),
		"type zero":            []byte(`{"items":[{"type":0,"data":{}}]}`),
		"data not an object":   []byte(`{"items":[{"type":4,"data":"x"}]}`),
		"another field":        []byte(`{"items":[{"type":4,"data":{},"x":1}],"y":2}`),
		"escaped quote at end": []byte(`{"items":[{"type":4,"data":{"a":"\\"}}]}`),
	}
	for name, data := range valid {
		var want Batch
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("%s: json.Unmarshal(%s) = %v", name, data, err)
		}
		got, err := DecodeBatch(data)
		if err != nil || !cmp.Equal(got, want, cmpopts.EquateEmpty()) {
			t.Errorf("%s: DecodeBatch(%s) = %+v, %v; want %+v", name, data, got, err, want)
		}
	}
	for name, data := range map[string][]byte{
		"truncated":          EncodeBatch(items)[1:40],
		"unbalanced":         []byte(`{"items":[{"type":4,"data":{"a":{}}]}`),
		"type too large":     []byte(`{"items":[{"type":256,"data":{}}]}`),
		"negative type":      []byte(`{"items":[{"type":-1,"data":{}}]}`),
		"trailing garbage":   append(EncodeBatch(items)[1:], 'x'),
		"no closing bracket": []byte(`{"items":[{"type":4,"data":{}}`),
	} {
		var b Batch
		werr := json.Unmarshal(data, &b)
		_, err := DecodeBatch(data)
		if (err == nil) != (werr == nil) {
			t.Errorf("%s: DecodeBatch(%s) error = %v, json.Unmarshal's = %v; want both or neither", name, data, err, werr)
		}
	}
	// A corrupt item is split as it is: its decoder fails on it.
	b, err := DecodeBatch([]byte(`{"items":[{"type":4,"data":{nope}}]}`))
	var c PlaceStep
	if err == nil && (len(b.Items) != 1 || json.Unmarshal(b.Items[0].Data, &c) == nil) {
		t.Errorf("DecodeBatch(a corrupt item) = %+v, and the item decodes; want it to fail", b)
	}
}
