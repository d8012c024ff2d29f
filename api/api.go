// Package api is Rodon's public JSON contract: the types browsers, SDKs and
// the operator CLI send and receive. It imports only the standard library;
// servers convert their internal types (package cluster) to these at the
// HTTP edge.
package api

// Error is the body of every error response:
// {"error": {"code": ..., "message": ...}}.
type Error struct {
	Detail ErrorDetail `json:"error"`
}

// ErrorDetail says what went wrong: Code is a stable snake_case word for
// programs, Message a sentence for people.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error codes shared by every server.
const (
	CodeBadRequest       = "bad_request"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeInternal         = "internal"
)

// NewError returns the error body with code and message.
func NewError(code, message string) Error {
	return Error{Detail: ErrorDetail{Code: code, Message: message}}
}

// Error implements the error interface, so a client can return a decoded
// error body as is.
func (e Error) Error() string { return e.Detail.Code + ": " + e.Detail.Message }
