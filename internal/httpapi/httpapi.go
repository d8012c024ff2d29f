// Package httpapi is what the HTTP APIs of the scheduler, agentd and the
// gateway share, written once: error and JSON answers, strict decoding of
// request bodies, the answer to a request no route matched (404, or 405
// with Allow), and request instrumentation by route pattern.
//
// Each API keeps its own error mapping (which Go error becomes which
// status); what it writes goes through here, so every API answers the same
// shape (api.Error) with the same headers.
package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/strictjson"
)

// Error is an error answer: its status, code (api.Code...), message and,
// if not zero, the Retry-After it asks for.
type Error struct {
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
	// Revision is a conflict's detached revision (api.ErrorDetail.Revision).
	Revision *api.Revision
	// Refusal is a refused tool call's (api.ErrorDetail.Reason, Path and
	// DidYouMean).
	Refusal *api.Refusal
}

func (e *Error) Error() string { return e.Message }

// WriteError writes e as an api.Error document, with Retry-After (whole
// seconds, rounded up) when e asks for one.
func WriteError(w http.ResponseWriter, e *Error) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((e.RetryAfter+time.Second-1)/time.Second)))
	}
	doc := api.NewError(e.Code, e.Message)
	doc.Detail.Revision = e.Revision
	if e.Refusal != nil {
		doc.Detail.Reason, doc.Detail.Path, doc.Detail.DidYouMean = e.Refusal.Reason, e.Refusal.Path, e.Refusal.DidYouMean
	}
	WriteJSON(w, e.Status, doc)
}

// WriteJSON writes v as JSON with status (a value that does not encode
// becomes a 500 error document).
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(api.NewError(api.CodeInternal, "encode answer: "+err.Error()))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// Decode decodes the JSON object of r's body into v, strictly: at most
// limit bytes, no field v does not have, nothing after the object; an
// empty body is an error unless optional. The error is an *Error: 400
// naming the field or offset at fault (docs names where the body is
// documented), or 413 over the limit.
func Decode(w http.ResponseWriter, r *http.Request, v any, limit int64, optional bool, docs string) error {
	err := DecodeReader(http.MaxBytesReader(w, r.Body, limit), v, optional, docs)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: api.CodeTooLarge,
			Message: fmt.Sprintf("request body over %d bytes", mbe.Limit)}
	}
	return err
}

// DecodeReader is Decode without the HTTP limit (what fuzz tests call).
func DecodeReader(r io.Reader, v any, optional bool, docs string) error {
	err := strictjson.Decode(r, v, strictjson.Options{Optional: optional, Docs: docs})
	var e *strictjson.Error
	if errors.As(err, &e) {
		return &Error{Status: http.StatusBadRequest, Code: api.CodeBadRequest, Message: e.Msg}
	}
	return err
}

// methods are those NoRoute offers in Allow.
var methods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// NoRoute answers a request no pattern of mux matched: 405 with Allow when
// the path exists for other methods, else 404 pointing at docs. Catch-all
// patterns (ending in "/") do not count as the path existing.
func NoRoute(mux *http.ServeMux, w http.ResponseWriter, r *http.Request, docs string) {
	var allow []string
	for _, m := range methods {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "" && !strings.HasSuffix(pattern, "/") {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		WriteError(w, &Error{Status: http.StatusMethodNotAllowed, Code: api.CodeMethodNotAllowed,
			Message: fmt.Sprintf("%s %s: method not allowed; use %s", r.Method, r.URL.Path, strings.Join(allow, " or "))})
		return
	}
	WriteError(w, &Error{Status: http.StatusNotFound, Code: api.CodeNotFound,
		Message: fmt.Sprintf("no route %s %s: see %s", r.Method, r.URL.Path, docs)})
}
