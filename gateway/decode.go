package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/rodon-compute/rodon/api"
)

// maxBody is the largest request body accepted.
const maxBody = 1 << 20

// decodeBody decodes the JSON object of r's body into v, strictly: at most
// maxBody bytes, no field v does not have, nothing after the object. An empty
// body is an error unless optional. The error is a 400 (413 over the limit)
// whose message names the field or the offset at fault.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	body := http.MaxBytesReader(w, r.Body, maxBody)
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
		return badRequest("unknown field %s: see docs/GATEWAY.md for the fields of this request", f)
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
