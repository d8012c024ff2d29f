package relay

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gorilla/websocket"
)

func TestDecodeClientFrame(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    clientFrame
		wantErr string
	}{
		{in: `{"type":"stdin","data":"a\u0000b"}`, want: clientFrame{Type: "stdin", Data: "a\x00b"}},
		{in: `{"data":"","type":"stdin"}`, want: clientFrame{Type: "stdin"}},
		{in: "\t{\"type\":\"resize\",\"rows\":24,\"cols\":80}\n", want: clientFrame{Type: "resize", Cols: 80, Rows: 24}},
		{in: ``, wantErr: "not a JSON object"},
		{in: `null`, wantErr: "not a JSON object"},
		{in: `{}`, wantErr: `missing "type"`},
		{in: `{"type":1}`, wantErr: `"type" must be a string`},
		{in: `{"type":"stdin","data":null}`, wantErr: `"data" must be a string`},
		{in: `{"type":"stdin","data":{}}`, wantErr: `"data" must be a string`},
		{in: `{"type":"stdin","data":"x","cols":3}`, wantErr: `stdin message takes only "data"`},
		{in: `{"type":"resize","cols":3}`, wantErr: `needs "cols" and "rows"`},
		{in: `{"type":"resize","cols":3,"rows":4,"data":""}`, wantErr: `takes only "cols" and "rows"`},
		{in: `{"type":"resize","cols":"3","rows":4}`, wantErr: `"cols" must be an integer`},
		{in: `{"type":"resize","cols":3e2,"rows":4}`, wantErr: `"cols" must be an integer from 1 to 65535`},
		{in: `{"type":"resize","cols":65536,"rows":4}`, wantErr: `"cols" must be an integer from 1 to 65535`},
		{in: `{"type":"resize","cols":-1,"rows":4}`, wantErr: `"cols" must be an integer from 1 to 65535`},
		{in: `{"type":"resize","cols":1,"cols":2,"rows":4}`, wantErr: `duplicate field "cols"`},
		{in: `{"type":"stdin","data":"x"`, wantErr: "malformed JSON"},
		{in: `{"type":"stdin",,"data":"x"}`, wantErr: "malformed JSON"},
		{in: `{"type":"stdin","data":"x"} x`, wantErr: "data after the object"},
		{in: `{"type":"` + strings.Repeat("z", 500) + `"}`, wantErr: "unknown type"},
		{in: `{"` + strings.Repeat("k", 500) + `":1}`, wantErr: "unknown field"},
	} {
		got, err := decodeClientFrame([]byte(tt.in))
		if tt.wantErr != "" {
			var ce *clientError
			if !errors.As(err, &ce) || !strings.Contains(ce.reason, tt.wantErr) || ce.code != websocket.ClosePolicyViolation {
				t.Errorf("decodeClientFrame(%.60s) = %+v, %v; want close %d with %q", tt.in, got, err, websocket.ClosePolicyViolation, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("decodeClientFrame(%s) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

// FuzzDecodeClientFrame checks that the decoder never panics, that every
// refusal fits in a close frame, and that what it takes is what
// encoding/json reads from the same message.
func FuzzDecodeClientFrame(f *testing.F) {
	for _, s := range []string{
		`{"type":"stdin","data":"ls\r"}`,
		`{"type":"resize","cols":80,"rows":24}`,
		`{"type":"stdin","data":"\ud83d\ude00 \u2028"}`,
		`{"type":"stdin","data":"x","data":"y"}`,
		`{"type":"resize","cols":1e1,"rows":-0}`,
		`{"TYPE":"stdin","data":"x"}`,
		`{"type":"stdin","data":"x"}{}`,
		`[{"type":"stdin"}]`,
		`{"type":"stdin","data":"` + "\xff" + `"}`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeClientFrame(b)
		if err != nil {
			var ce *clientError
			if !errors.As(err, &ce) {
				t.Fatalf("decodeClientFrame(%q) error %v is not a *clientError", b, err)
			}
			if len(ce.reason) > maxCloseReason || !utf8.ValidString(ce.reason) || ce.reason == "" {
				t.Fatalf("decodeClientFrame(%q) reason %q does not fit a close frame", b, ce.reason)
			}
			return
		}
		if !utf8.Valid(b) {
			t.Fatalf("decodeClientFrame(%q) took a message that is not UTF-8", b)
		}
		var ref struct {
			Type string `json:"type"`
			Data string `json:"data"`
			Cols int    `json:"cols"`
			Rows int    `json:"rows"`
		}
		if err := json.Unmarshal(b, &ref); err != nil {
			t.Fatalf("decodeClientFrame(%q) = %+v, but encoding/json refuses it: %v", b, got, err)
		}
		if want := (clientFrame{Type: ref.Type, Data: ref.Data, Cols: ref.Cols, Rows: ref.Rows}); got != want {
			t.Fatalf("decodeClientFrame(%q) = %+v, encoding/json reads %+v", b, got, want)
		}
		switch got.Type {
		case typeStdin:
			if got.Cols != 0 || got.Rows != 0 {
				t.Fatalf("decodeClientFrame(%q) = %+v: a stdin message with a size", b, got)
			}
		case typeResize:
			if got.Cols < 1 || got.Rows < 1 || got.Cols > maxTermSize || got.Rows > maxTermSize || got.Data != "" {
				t.Fatalf("decodeClientFrame(%q) = %+v: a bad resize", b, got)
			}
		default:
			t.Fatalf("decodeClientFrame(%q) = %+v: unknown type taken", b, got)
		}
	})
}

func TestFrameHead(t *testing.T) {
	for _, tt := range []struct {
		in      string
		seq     uint64
		exit    bool
		wantErr bool
	}{
		{in: `{"seq":7,"kind":"stdout","data":"x","time":"2026-01-02T03:04:05Z"}`, seq: 7},
		{in: `{"seq":12,"kind":"exit","data":{"state":"exited"},"time":"2026-01-02T03:04:05Z"}`, seq: 12, exit: true},
		{in: `{"seq":3,"kind":"exited"}`, seq: 3},
		{in: `{"kind":"exit","seq":4}`, seq: 4, exit: true},
		{in: `{"seq":18446744073709551615,"kind":"event"}`, seq: 1<<64 - 1},
		{in: `{"seq":0,"kind":"stdout"}`, wantErr: true},
		{in: `{"kind":"stdout"}`, wantErr: true},
		{in: `{"seq":1}`, wantErr: true},
		{in: `{"seq":1,"kind":`, wantErr: true},
		{in: `hello`, wantErr: true},
	} {
		seq, exit, err := frameHead([]byte(tt.in))
		if (err != nil) != tt.wantErr || seq != tt.seq && !tt.wantErr || exit != tt.exit {
			t.Errorf("frameHead(%s) = %d, %v, %v; want %d, %v, error %v", tt.in, seq, exit, err, tt.seq, tt.exit, tt.wantErr)
		}
	}
}
