package api

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var frameTime = time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)

func TestOutputFrameRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 4096)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	tests := []struct {
		name    string
		in      []byte
		wantEnc string
	}{
		{"empty", []byte{}, ""},
		{"ascii", []byte("hello, world\n"), ""},
		{"escapes", []byte("\"quoted\" \\ back\x00\x01\x1b[31mred\x1b[0m\t\r\n\x7f"), ""},
		{"html", []byte("<a href=\"x\">&amp;</a>"), ""},
		{"multibyte", []byte("grüße, 世界, 🙂"), ""},
		{"separators", []byte("a\u2028b\u2029c"), ""},
		{"invalid utf-8", []byte("ok \xff\xfe not ok"), EncodingBase64},
		{"truncated rune", []byte("caf\xc3"), EncodingBase64},
		{"random", random, EncodingBase64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, kind := range []FrameKind{KindStdout, KindStderr} {
				b := AppendOutputFrame(nil, 42, kind, tt.in, frameTime)
				var f Frame
				if err := json.Unmarshal(b, &f); err != nil {
					t.Fatalf("Unmarshal(%s) = %v", b, err)
				}
				if f.Seq != 42 || f.Kind != kind || !f.Time.Equal(frameTime) || f.Encoding != tt.wantEnc {
					t.Errorf("decoded frame = %d %s %v %q, want 42 %s %v %q", f.Seq, f.Kind, f.Time, f.Encoding, kind, frameTime, tt.wantEnc)
				}
				got, err := f.Output()
				if err != nil {
					t.Fatalf("Output() = %v", err)
				}
				if !bytes.Equal(got, tt.in) {
					t.Errorf("Output() = %q, want %q", got, tt.in)
				}

				// The fast encoder writes what encoding/json writes for
				// NewOutputFrame, but for HTML escaping.
				var buf bytes.Buffer
				enc := json.NewEncoder(&buf)
				enc.SetEscapeHTML(false)
				if err := enc.Encode(NewOutputFrame(42, kind, tt.in, frameTime)); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(string(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), string(b)); diff != "" {
					t.Errorf("AppendOutputFrame differs from encoding/json (-json +fast):\n%s", diff)
				}
			}
		})
	}
}

func TestEventAndExitFrames(t *testing.T) {
	code := 137
	x := Exit{
		State: "exited", ExitCode: &code, TerminatedBy: "oom", Reason: "memory limit",
		Phases:      Phases{Started: frameTime, Exited: frameTime.Add(time.Second)},
		StdoutBytes: 10, StderrBytes: 3,
	}
	b, err := json.Marshal(NewExitFrame(9, x, frameTime))
	if err != nil {
		t.Fatal(err)
	}
	var f Frame
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	gotX, err := f.Exit()
	if err != nil {
		t.Fatalf("Exit() = %v", err)
	}
	if diff := cmp.Diff(x, gotX); diff != "" {
		t.Errorf("Exit() mismatch (-want +got):\n%s", diff)
	}
	if _, err := f.Output(); err == nil {
		t.Errorf("Output() of an exit frame = nil error, want one")
	}
	if _, err := f.Event(); err == nil {
		t.Errorf("Event() of an exit frame = nil error, want one")
	}

	e := Event{Time: frameTime, Kind: "started", Message: "step started"}
	ef := NewEventFrame(3, e, frameTime)
	gotE, err := ef.Event()
	if err != nil {
		t.Fatalf("Event() = %v", err)
	}
	if diff := cmp.Diff(e, gotE); diff != "" {
		t.Errorf("Event() mismatch (-want +got):\n%s", diff)
	}

	// A failed step has no exit code, and the JSON says so.
	b, _ = json.Marshal(Exit{State: "failed", TerminatedBy: "platform"})
	if bytes.Contains(b, []byte("exit_code")) {
		t.Errorf("Marshal(failed exit) = %s, want no exit_code", b)
	}
}

func TestOutputBadEncoding(t *testing.T) {
	for _, f := range []Frame{
		{Seq: 1, Kind: KindStdout, Data: json.RawMessage(`"x"`), Encoding: "gzip"},
		{Seq: 1, Kind: KindStdout, Data: json.RawMessage(`"!!"`), Encoding: EncodingBase64},
		{Seq: 1, Kind: KindStdout, Data: json.RawMessage(`{}`)},
	} {
		if got, err := f.Output(); err == nil {
			t.Errorf("Output(%s %q) = %q, nil; want an error", f.Data, f.Encoding, got)
		}
	}
}

func TestError(t *testing.T) {
	b, err := json.Marshal(NewError(CodeNotFound, "no step x"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"error":{"code":"not_found","message":"no step x"}}`; got != want {
		t.Errorf("Marshal(NewError) = %s, want %s", got, want)
	}
}

func TestEventsOf(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	frames := []Frame{
		NewEventFrame(1, Event{Time: now, Kind: EventPlaced, Attempt: 1}, now),
		{Seq: 2, Kind: KindStdout, Data: json.RawMessage(`"aGk="`), Time: now},
		NewEventFrame(3, Event{Time: now, Kind: EventOutputTruncated, Message: "first"}, now),
		{Seq: 4, Kind: KindEvent, Data: json.RawMessage(`not json`), Time: now},
		NewEventFrame(5, Event{Time: now, Kind: EventOutputTruncated, Message: "second"}, now),
	}
	got := EventsOf(frames, EventOutputTruncated)
	if len(got) != 2 || got[0].Message != "first" || got[1].Message != "second" {
		t.Errorf("EventsOf(output_truncated) = %+v, want the two, in order", got)
	}
	if got := EventsOf(frames, EventExited); len(got) != 0 {
		t.Errorf("EventsOf(exited) = %+v, want none", got)
	}
}
