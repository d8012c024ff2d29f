package relay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/gorilla/websocket"
)

// Client message types of an interactive stream.
const (
	typeStdin  = "stdin"
	typeResize = "resize"
)

// maxTermSize bounds the columns and rows of a resize: the kernel keeps
// them in 16 bits.
const maxTermSize = 1<<16 - 1

// clientFrame is a message the browser sends on an interactive stream:
//
//	{"type":"stdin","data":"ls\r"}
//	{"type":"resize","cols":120,"rows":40}
type clientFrame struct {
	Type string
	// Data is the input of a stdin frame.
	Data string
	// Cols and Rows are the terminal size of a resize frame.
	Cols, Rows int
}

// clientError is a client message the relay refuses: the close code and
// reason it answers with.
type clientError struct {
	code   int
	reason string
}

func (e *clientError) Error() string {
	return fmt.Sprintf("client message refused (close %d): %s", e.code, e.reason)
}

func refuse(format string, args ...any) *clientError {
	return &clientError{code: websocket.ClosePolicyViolation, reason: fitReason(fmt.Sprintf(format, args...))}
}

// fitReason shortens r to fit a close frame (maxCloseReason bytes), at a
// UTF-8 boundary, marking the cut with "...". A quoted field name of
// control characters can be four times longer than its rune count.
func fitReason(r string) string {
	if len(r) <= maxCloseReason {
		return r
	}
	cut := maxCloseReason - len("...")
	for cut > 0 && !utf8.RuneStart(r[cut]) {
		cut--
	}
	return r[:cut] + "..."
}

// decodeClientFrame decodes one client message strictly: a single JSON
// object whose keys are exactly those of its type, each once, and nothing
// after it. Unlike encoding/json's struct decoding it matches keys by case
// and refuses duplicates. Errors are *clientError, their reasons short
// enough for a close frame.
func decodeClientFrame(b []byte) (clientFrame, error) {
	var f clientFrame
	if !utf8.Valid(b) {
		return f, refuse("message is not UTF-8 text")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return f, refuse("message is not a JSON object")
	}
	var haveType, haveData, haveCols, haveRows bool
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return f, malformed(err)
		}
		key, _ := tok.(string) // keys are strings in well-formed JSON
		switch key {
		case "type":
			f.Type, err = stringValue(dec, key, &haveType)
		case "data":
			f.Data, err = stringValue(dec, key, &haveData)
		case "cols":
			f.Cols, err = sizeValue(dec, key, &haveCols)
		case "rows":
			f.Rows, err = sizeValue(dec, key, &haveRows)
		default:
			return f, refuse("unknown field %.32q; want type, data, cols, rows", key)
		}
		if err != nil {
			return f, err
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return f, malformed(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return f, refuse("malformed JSON: data after the object")
	}

	switch {
	case !haveType:
		return f, refuse(`missing "type"; want stdin or resize`)
	case f.Type == typeStdin:
		if !haveData {
			return f, refuse(`stdin message without "data"`)
		}
		if haveCols || haveRows {
			return f, refuse(`stdin message takes only "data"`)
		}
	case f.Type == typeResize:
		if !haveCols || !haveRows {
			return f, refuse(`resize message needs "cols" and "rows"`)
		}
		if haveData {
			return f, refuse(`resize message takes only "cols" and "rows"`)
		}
	default:
		return f, refuse("unknown type %.32q; want stdin or resize", f.Type)
	}
	return f, nil
}

func malformed(err error) *clientError {
	if err == nil {
		return refuse("malformed JSON")
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return refuse("malformed JSON at byte %d", se.Offset)
	}
	return refuse("malformed JSON: unexpected end")
}

// stringValue reads the value of key, which must be a string seen once.
func stringValue(dec *json.Decoder, key string, seen *bool) (string, error) {
	if *seen {
		return "", refuse("duplicate field %q", key)
	}
	*seen = true
	tok, err := dec.Token()
	if err != nil {
		return "", malformed(err)
	}
	s, ok := tok.(string)
	if !ok {
		return "", refuse("%q must be a string", key)
	}
	return s, nil
}

// sizeValue reads the value of key, which must be an integer in
// [1, maxTermSize] seen once.
func sizeValue(dec *json.Decoder, key string, seen *bool) (int, error) {
	if *seen {
		return 0, refuse("duplicate field %q", key)
	}
	*seen = true
	tok, err := dec.Token()
	if err != nil {
		return 0, malformed(err)
	}
	num, ok := tok.(json.Number)
	if !ok {
		return 0, refuse("%q must be an integer", key)
	}
	n, err := strconv.Atoi(string(num))
	if err != nil || n < 1 || n > maxTermSize {
		return 0, refuse("%q must be an integer from 1 to %d", key, maxTermSize)
	}
	return n, nil
}
