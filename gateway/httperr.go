package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// Gateway error codes beyond the shared ones (docs/GATEWAY.md).
const (
	codeUnauthorized = "unauthorized"
	codeForbidden    = "forbidden"
	codeRateLimited  = "rate_limited"
	// codeUnsupportedMedia: a request body of another Content-Type than
	// the route takes (415).
	codeUnsupportedMedia = "unsupported_media_type"
)

// httpError is an error answer: status, api code and a message for people.
type httpError struct {
	status     int
	code       string
	msg        string
	retryAfter int // seconds; 0 for none
}

func (e *httpError) Error() string { return e.code + ": " + e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{status: http.StatusBadRequest, code: api.CodeBadRequest, msg: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &httpError{status: http.StatusNotFound, code: api.CodeNotFound, msg: fmt.Sprintf(format, args...)}
}

func conflict(format string, args ...any) error {
	return &httpError{status: http.StatusConflict, code: api.CodeConflict, msg: fmt.Sprintf(format, args...)}
}

func forbidden(format string, args ...any) error {
	return &httpError{status: http.StatusForbidden, code: codeForbidden, msg: fmt.Sprintf(format, args...)}
}

func unauthorized(format string, args ...any) error {
	return &httpError{status: http.StatusUnauthorized, code: codeUnauthorized, msg: fmt.Sprintf(format, args...)}
}

// errUnavailable is the answer when the scheduler cannot be reached or
// has no leader.
var errUnavailable = &httpError{status: http.StatusServiceUnavailable, code: api.CodeUnavailable,
	msg: "the scheduler is not answering now; retry shortly", retryAfter: 1}

// asHTTPError turns err into the answer to send. Errors of the scheduler
// are not passed through (their messages may name nodes): unavailability
// becomes 503, anything else 500 with a generic message; internal is true
// for those, which the caller logs.
func asHTTPError(err error) (he *httpError, internal bool) {
	if errors.As(err, &he) {
		return he, false
	}
	var ce *client.Error
	if errors.As(err, &ce) && (ce.Code == api.CodeNoLeader || ce.Code == api.CodeUnavailable) {
		return errUnavailable, false
	}
	return &httpError{status: http.StatusInternalServerError, code: api.CodeInternal,
		msg: "internal error; the gateway's log has the details"}, true
}

func writeError(w http.ResponseWriter, he *httpError) {
	if he.retryAfter > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(he.retryAfter))
	}
	writeJSON(w, he.status, api.NewError(he.code, he.msg))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(api.NewError(api.CodeInternal, "encode answer: "+err.Error()))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
