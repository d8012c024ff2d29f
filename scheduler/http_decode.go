package scheduler

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// maxBody is the largest request body accepted, but for a snapshot
// restore (maxSnapshot).
const (
	maxBody     = 1 << 20
	maxSnapshot = 256 << 20
)

// decodeBody decodes the JSON object of r's body into v, strictly: at most
// limit bytes, no field v does not have, nothing after the object. An empty
// body is an error unless optional. The error is a 400 (413 over the limit)
// whose message names the field or the offset at fault.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, limit int64, optional bool) error {
	body := http.MaxBytesReader(w, r.Body, limit)
	err := decodeJSON(body, v, optional)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &httpError{status: http.StatusRequestEntityTooLarge, code: api.CodeTooLarge,
			msg: fmt.Sprintf("request body over %d bytes", mbe.Limit)}
	}
	return err
}

// decodeJSON is decodeBody's decoder, without the HTTP limit; it is what
// the fuzz tests exercise.
func decodeJSON(r io.Reader, v any, optional bool) error {
	body, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if optional && len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, reflect.TypeOf(v), body)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("malformed JSON: unexpected data after the object at byte offset %d: send one JSON object", dec.InputOffset())
	}
	return nil
}

// jsonError turns a decoding error of body into t into a 400 that says
// what is wrong, and where.
func jsonError(err error, t reflect.Type, body []byte) error {
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
	)
	switch {
	case errors.Is(err, io.EOF):
		return badRequest("empty request body: want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("malformed JSON: the body ends in the middle of a value")
	case errors.As(err, &syn):
		return badRequest("malformed JSON at byte offset %d: %s", syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))
	case errors.As(err, &typ):
		if typ.Field == "" {
			return badRequest("malformed request: want a JSON object, got %s", typ.Value)
		}
		return badRequest("field %q: want %s, got %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if f, ok := strings.CutPrefix(msg, "unknown field "); ok {
		return badRequest("unknown field %s: see docs/PROTOCOL.md for the fields of this request", f)
	}
	// An error of a type's own decoding (a duration, an address, a time)
	// does not say where it is: find the field by decoding each alone.
	if field := blame(t, body); field != "" {
		return badRequest("field %q: %s", field, msg)
	}
	return badRequest("invalid request: %s", msg)
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

// queryIndex parses the ?index= and ?wait= parameters of a long poll.
// wait is zero without index; else the asked wait (default defaultWait),
// capped at max.
func queryIndex(r *http.Request, max time.Duration) (index uint64, wait time.Duration, err error) {
	q := r.URL.Query()
	if s := q.Get("index"); s != "" {
		index, err = strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, badRequest("query parameter index %q: want a non-negative integer", s)
		}
		wait = defaultWait
	}
	if s := q.Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return 0, 0, badRequest("query parameter wait %q: want a non-negative duration such as \"30s\"", s)
		}
		wait = d
	}
	if q.Get("index") == "" {
		wait = 0
	}
	return index, min(wait, max), nil
}
