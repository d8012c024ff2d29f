package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// FrameKind says what a stream frame carries.
type FrameKind string

// Frame kinds. A stream is a sequence of stdout, stderr and event frames
// ended by exactly one exit frame.
const (
	KindStdout FrameKind = "stdout"
	KindStderr FrameKind = "stderr"
	KindEvent  FrameKind = "event"
	KindExit   FrameKind = "exit"
)

// EncodingBase64 marks an output frame whose data is the standard base64
// encoding of the bytes rather than the bytes as a JSON string.
const EncodingBase64 = "base64"

// Frame is one element of a step's stream (GET /v1/steps/{id}/stream):
//
//	{"seq": 7, "kind": "stdout", "data": "hello\n", "time": "2026-01-02T03:04:05.123456789Z"}
//
// Seq numbers a step's frames from 1 without gaps; ?from=N resumes after
// frame N. Time is when the node recorded the frame.
//
// Data depends on Kind. For stdout and stderr it is a JSON string: the
// output bytes themselves when they are valid UTF-8, or, when they are not
// (binary output), their base64 encoding with Encoding set to "base64".
// Either way Output returns the exact bytes the step wrote, so concatenating
// the output of consecutive frames reproduces the step's output byte for
// byte. A writer never splits a UTF-8 sequence across two frames when it can
// avoid it, so text stays text. For event frames Data is an Event object,
// for the exit frame an Exit object.
type Frame struct {
	Seq      int64           `json:"seq"`
	Kind     FrameKind       `json:"kind"`
	Data     json.RawMessage `json:"data"`
	Encoding string          `json:"encoding,omitempty"`
	Time     time.Time       `json:"time"`
}

// Same reports whether f and g are the same frame: the same fields, the
// times as the same instant.
func (f Frame) Same(g Frame) bool {
	return f.Seq == g.Seq && f.Kind == g.Kind && f.Encoding == g.Encoding && f.Time.Equal(g.Time) && bytes.Equal(f.Data, g.Data)
}

// Exit is the data of a stream's last frame: how the step ended, as the
// runtime confirmed it.
type Exit struct {
	// State is "exited", "failed" (could not start) or "cancelled".
	State string `json:"state"`
	// ExitCode is the process's exit status (128+signal when a signal
	// killed it); absent when the process never ran.
	ExitCode *int `json:"exit_code,omitempty"`
	// TerminatedBy is exit, user, timeout, oom, node_lost or platform.
	TerminatedBy string `json:"terminated_by"`
	// Reason explains a failure or a platform termination.
	Reason string `json:"reason,omitempty"`
	// Cause is the typed cause of a failure (a Cause* constant).
	Cause  string `json:"cause,omitempty"`
	Phases Phases `json:"phases"`
	// StdoutBytes and StderrBytes count what the step wrote to each.
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
}

// Phases are the times a step passed each phase of its lifecycle; a phase
// not (yet) passed is absent.
type Phases struct {
	Queued      time.Time `json:"queued,omitzero"`
	Placed      time.Time `json:"placed,omitzero"`
	Created     time.Time `json:"created,omitzero"`
	Started     time.Time `json:"started,omitzero"`
	FirstOutput time.Time `json:"first_output,omitzero"`
	Exited      time.Time `json:"exited,omitzero"`
	CleanedUp   time.Time `json:"cleaned_up,omitzero"`
}

// NewOutputFrame returns a stdout or stderr frame carrying p (see Frame for
// how the bytes are encoded).
func NewOutputFrame(seq int64, kind FrameKind, p []byte, t time.Time) Frame {
	data, enc := appendOutputData(nil, p)
	return Frame{Seq: seq, Kind: kind, Data: data, Encoding: enc, Time: t}
}

// NewEventFrame returns an event frame carrying e.
func NewEventFrame(seq int64, e Event, t time.Time) Frame {
	return Frame{Seq: seq, Kind: KindEvent, Data: mustMarshal(e), Time: t}
}

// NewExitFrame returns the exit frame carrying x.
func NewExitFrame(seq int64, x Exit, t time.Time) Frame {
	return Frame{Seq: seq, Kind: KindExit, Data: mustMarshal(x), Time: t}
}

func mustMarshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		// Event and Exit hold only strings, numbers and times.
		panic(fmt.Sprintf("marshal %T: %v", v, err))
	}
	return b
}

// Output returns the bytes of a stdout or stderr frame.
func (f Frame) Output() ([]byte, error) {
	if f.Kind != KindStdout && f.Kind != KindStderr {
		return nil, fmt.Errorf("frame %d: kind %q carries no output", f.Seq, f.Kind)
	}
	var s string
	if err := json.Unmarshal(f.Data, &s); err != nil {
		return nil, fmt.Errorf("frame %d: output data: %w", f.Seq, err)
	}
	switch f.Encoding {
	case "":
		return []byte(s), nil
	case EncodingBase64:
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("frame %d: base64 output data: %w", f.Seq, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("frame %d: unknown encoding %q", f.Seq, f.Encoding)
}

// Event returns the data of an event frame.
func (f Frame) Event() (Event, error) {
	var e Event
	if f.Kind != KindEvent {
		return e, fmt.Errorf("frame %d: kind %q is not an event", f.Seq, f.Kind)
	}
	if err := json.Unmarshal(f.Data, &e); err != nil {
		return e, fmt.Errorf("frame %d: event data: %w", f.Seq, err)
	}
	return e, nil
}

// EventsOf returns the events of kind among frames, in order; frames that
// are not events, or whose data is not an event, are passed over.
func EventsOf(frames []Frame, kind string) []Event {
	var out []Event
	for _, f := range frames {
		if e, err := f.Event(); err == nil && e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// Exit returns the data of the exit frame.
func (f Frame) Exit() (Exit, error) {
	var x Exit
	if f.Kind != KindExit {
		return x, fmt.Errorf("frame %d: kind %q is not an exit", f.Seq, f.Kind)
	}
	if err := json.Unmarshal(f.Data, &x); err != nil {
		return x, fmt.Errorf("frame %d: exit data: %w", f.Seq, err)
	}
	return x, nil
}

// AppendOutputFrame appends the JSON encoding of
// NewOutputFrame(seq, kind, p, t) to dst, without a newline, and returns
// the extended buffer. It is the allocation-free form for servers that
// store or send many frames.
func AppendOutputFrame(dst []byte, seq int64, kind FrameKind, p []byte, t time.Time) []byte {
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendInt(dst, seq, 10)
	dst = append(dst, `,"kind":"`...)
	dst = append(dst, kind...)
	dst = append(dst, `","data":`...)
	dst, enc := appendOutputData(dst, p)
	if enc != "" {
		dst = append(dst, `,"encoding":"`...)
		dst = append(dst, enc...)
		dst = append(dst, '"')
	}
	dst = append(dst, `,"time":"`...)
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, `"}`...)
}

// appendOutputData appends p as a JSON string, base64-encoded unless p is
// valid UTF-8, and returns the encoding used.
func appendOutputData(dst, p []byte) ([]byte, string) {
	if !utf8.Valid(p) {
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, p)
		return append(dst, '"'), EncodingBase64
	}
	return appendString(dst, p), ""
}

const hexDigits = "0123456789abcdef"

// appendString appends valid UTF-8 p as a JSON string. Unlike
// encoding/json it leaves <, > and & alone (frames are not HTML); like it,
// it escapes U+2028 and U+2029 so that the result is also valid JavaScript.
func appendString(dst, p []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(p); {
		c := p[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			// p is valid UTF-8: only the line and paragraph separators
			// (E2 80 A8, E2 80 A9) need escaping.
			if c == 0xE2 && i+2 < len(p) && p[i+1] == 0x80 && p[i+2]&^1 == 0xA8 {
				dst = append(dst, p[start:i]...)
				dst = append(dst, `\u202`...)
				dst = append(dst, hexDigits[p[i+2]&0xF])
				i += 3
				start = i
				continue
			}
			i++
			continue
		}
		dst = append(dst, p[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		i++
		start = i
	}
	dst = append(dst, p[start:]...)
	return append(dst, '"')
}

// StepInput is one message to a TTY step's terminal, as the browser sends
// it to the gateway's stream and the gateway to the node agent (POST
// /v1/steps/{id}/input): {"type":"stdin","data":"ls\r"} or
// {"type":"resize","cols":120,"rows":40}.
type StepInput struct {
	Type string `json:"type"`
	Data string `json:"data,omitempty"`
	Cols int    `json:"cols,omitempty"`
	Rows int    `json:"rows,omitempty"`
}

// Validate reports what is wrong with the message, if anything.
func (in StepInput) Validate() error {
	switch in.Type {
	case "stdin":
		if in.Cols != 0 || in.Rows != 0 {
			return fmt.Errorf("stdin message: unexpected cols/rows")
		}
	case "resize":
		if in.Data != "" {
			return fmt.Errorf("resize message: unexpected data")
		}
		if in.Cols < 1 || in.Rows < 1 || in.Cols > 10000 || in.Rows > 10000 {
			return fmt.Errorf("resize message: %dx%d: want 1 to 10000 columns and rows", in.Cols, in.Rows)
		}
	default:
		return fmt.Errorf("message type %q: want stdin or resize", in.Type)
	}
	return nil
}
