// Package strictjson decodes request bodies strictly (one JSON object, no
// unknown field, nothing after it) and explains what is wrong in words a
// client can act on: the field, the offset, the expected type. The
// scheduler's and the gateway's HTTP APIs share it.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// Error is a problem with the JSON itself: the request is bad, and Msg
// says why.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func errorf(format string, args ...any) error { return &Error{Msg: fmt.Sprintf(format, args...)} }

// Options tune Decode.
type Options struct {
	// Optional accepts an empty body (v is left alone).
	Optional bool
	// Docs names where the request's fields are documented, for the
	// message about an unknown field.
	Docs string
}

// Decode reads r to its end and decodes one JSON object into v: no field v
// does not have, nothing after the object. A problem with the JSON is an
// *Error; a read error (such as *http.MaxBytesError) is returned as is.
func Decode(r io.Reader, v any, o Options) error {
	body, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if o.Optional && len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, reflect.TypeOf(v), body, o.Docs)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errorf("malformed JSON: unexpected data after the object at byte offset %d: send one JSON object", dec.InputOffset())
	}
	return nil
}

// jsonError turns a decoding error of body into t into an *Error that
// says what is wrong, and where.
func jsonError(err error, t reflect.Type, body []byte, docs string) error {
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
	)
	switch {
	case errors.Is(err, io.EOF):
		return errorf("empty request body: want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf("malformed JSON: the body ends in the middle of a value")
	case errors.As(err, &syn):
		return errorf("malformed JSON at byte offset %d: %s", syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))
	case errors.As(err, &typ):
		if typ.Field == "" {
			return errorf("malformed request: want a JSON object, got %s", typ.Value)
		}
		return errorf("field %q: want %s, got %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if f, ok := strings.CutPrefix(msg, "unknown field "); ok {
		return errorf("unknown field %s: see %s for the fields of this request", f, docs)
	}
	// An error of a type's own decoding (a duration, an address, a time)
	// does not say where it is: find the field by decoding each alone.
	if field := blame(t, body); field != "" {
		return errorf("field %q: %s", field, msg)
	}
	return errorf("invalid request: %s", msg)
}

// blame returns the path ("capacity.cpu", "running[2].step") of the first
// value in body that does not decode into its field of t, or "".
func blame(t reflect.Type, body []byte) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if json.Unmarshal(body, reflect.New(t).Interface()) == nil {
		return ""
	}
	switch t.Kind() {
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if json.Unmarshal(body, &obj) != nil {
			return ""
		}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" {
				name = f.Name
			}
			for key, raw := range obj {
				if !strings.EqualFold(key, name) || json.Unmarshal(raw, reflect.New(f.Type).Interface()) == nil {
					continue
				}
				if sub := blame(f.Type, raw); sub != "" {
					if strings.HasPrefix(sub, "[") {
						return key + sub
					}
					return key + "." + sub
				}
				return key
			}
		}
	case reflect.Slice:
		var list []json.RawMessage
		if json.Unmarshal(body, &list) != nil {
			return ""
		}
		for i, raw := range list {
			if json.Unmarshal(raw, reflect.New(t.Elem()).Interface()) != nil {
				if sub := blame(t.Elem(), raw); sub != "" && !strings.HasPrefix(sub, "[") {
					return fmt.Sprintf("[%d].%s", i, sub)
				}
				return fmt.Sprintf("[%d]", i)
			}
		}
	}
	return ""
}

// jsonKind names a Go kind as a JSON type.
func jsonKind(k string) string {
	switch {
	case strings.HasPrefix(k, "int"), strings.HasPrefix(k, "uint"):
		return "an integer"
	case strings.HasPrefix(k, "float"):
		return "a number"
	case k == "string":
		return "a string"
	case k == "bool":
		return "true or false"
	case k == "slice", k == "array":
		return "an array"
	case k == "map", k == "struct":
		return "an object"
	}
	return k
}
