package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// Error is an error answer of the scheduler.
type Error struct {
	// Status is the HTTP status.
	Status int
	// Code is the api error code (api.CodeNotFound, api.CodeConflict...).
	Code string
	// Message says what was wrong, for people.
	Message string
	// RetryAfter is the server's hint (Retry-After) when to try again;
	// zero when it gave none.
	RetryAfter time.Duration
	// Revision is a workspace conflict's detached revision (409).
	Revision *api.Revision
}

func (e *Error) Error() string {
	return fmt.Sprintf("scheduler: %s (%d %s)", e.Message, e.Status, e.Code)
}

// IsCode reports whether err is an *Error with the given code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// IsNotFound reports whether err says no such step, node, member or
// record.
func IsNotFound(err error) bool { return IsCode(err, api.CodeNotFound) }

// IsConflict reports whether err says the request contradicts the current
// state: for a record, its compare-and-set failed (the record exists
// already, or its version is another); read it again before retrying.
func IsConflict(err error) bool { return IsCode(err, api.CodeConflict) }

// IsStatus reports whether err is an *Error with one of the HTTP statuses.
func IsStatus(err error, statuses ...int) bool {
	var e *Error
	return errors.As(err, &e) && slices.Contains(statuses, e.Status)
}

// decodeError turns an error answer into an *Error, even when its body is
// not the API's error document (a proxy's page, say).
func decodeError(hr *http.Response, body []byte) *Error {
	e := &Error{Status: hr.StatusCode}
	if s, err := strconv.Atoi(hr.Header.Get("Retry-After")); err == nil && s >= 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	var doc api.Error
	if err := json.Unmarshal(body, &doc); err == nil && doc.Detail.Code != "" {
		e.Code, e.Message, e.Revision = doc.Detail.Code, doc.Detail.Message, doc.Detail.Revision
		return e
	}
	e.Code = codeOf(hr.StatusCode)
	e.Message = strings.TrimSpace(string(body))
	if len(e.Message) > 200 {
		e.Message = e.Message[:200] + "..."
	}
	if e.Message == "" {
		e.Message = http.StatusText(hr.StatusCode)
	}
	return e
}

func codeOf(status int) string {
	switch status {
	case http.StatusBadRequest:
		return api.CodeBadRequest
	case http.StatusNotFound:
		return api.CodeNotFound
	case http.StatusMethodNotAllowed:
		return api.CodeMethodNotAllowed
	case http.StatusConflict:
		return api.CodeConflict
	case http.StatusRequestEntityTooLarge:
		return api.CodeTooLarge
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return api.CodeUnavailable
	}
	return api.CodeInternal
}
