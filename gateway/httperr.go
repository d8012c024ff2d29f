package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/httpapi"
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
type httpError = httpapi.Error

func badRequest(format string, args ...any) error {
	return &httpError{Status: http.StatusBadRequest, Code: api.CodeBadRequest, Message: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &httpError{Status: http.StatusNotFound, Code: api.CodeNotFound, Message: fmt.Sprintf(format, args...)}
}

func conflict(format string, args ...any) error {
	return &httpError{Status: http.StatusConflict, Code: api.CodeConflict, Message: fmt.Sprintf(format, args...)}
}

func forbidden(format string, args ...any) error {
	return &httpError{Status: http.StatusForbidden, Code: codeForbidden, Message: fmt.Sprintf(format, args...)}
}

func unauthorized(format string, args ...any) error {
	return &httpError{Status: http.StatusUnauthorized, Code: codeUnauthorized, Message: fmt.Sprintf(format, args...)}
}

// errUnavailable is the answer when the scheduler cannot be reached or
// has no leader.
var errUnavailable = &httpError{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable,
	Message: "the scheduler is not answering now; retry shortly", RetryAfter: time.Second}

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
	return &httpError{Status: http.StatusInternalServerError, Code: api.CodeInternal,
		Message: "internal error; the gateway's log has the details"}, true
}

func writeError(w http.ResponseWriter, he *httpError) { httpapi.WriteError(w, he) }

func writeJSON(w http.ResponseWriter, status int, v any) { httpapi.WriteJSON(w, status, v) }
