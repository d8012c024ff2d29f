// Package api is Rodon's public JSON contract: the types browsers, SDKs and
// the operator CLI send and receive, the scheduler's (steps, nodes, members,
// records) and the gateway's (gateway.go, run.go: accounts, keys,
// workspaces, runs and their steps), with their state names and the
// stream's frames and close codes. It imports only the standard library
// (internal/archtest); servers convert their internal types (package
// cluster) to these at the HTTP edge.
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
	// Revision, on a write refused as a workspace conflict (409), is the
	// detached revision that keeps the writer's tree; its Conflict names
	// the paths.
	Revision *Revision `json:"revision,omitempty"`
	// Reason, Path and DidYouMean, on a refused tool call (403, code
	// refused), are its Refusal's: why, the path as the call gave it,
	// and the path it probably meant.
	Reason     string `json:"reason,omitempty"`
	Path       string `json:"path,omitempty"`
	DidYouMean string `json:"did_you_mean,omitempty"`
}

// Error codes shared by every server.
const (
	CodeBadRequest       = "bad_request"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeInternal         = "internal"
	// CodeConflict: the request contradicts the current state (exists
	// already, illegal transition, terminal step, stale attempt).
	CodeConflict = "conflict"
	// CodeTooLarge: the request body is over the server's limit.
	CodeTooLarge = "too_large"
	// CodeUnavailable: the server cannot answer now; retry (see
	// Retry-After).
	CodeUnavailable = "unavailable"
	// CodeNoLeader: the scheduler has no leader (an election is under
	// way, or the leader is unreachable); retry shortly.
	CodeNoLeader = "no_leader"
	// CodeCapacityExhausted: no node can take the step now (see
	// Retry-After).
	CodeCapacityExhausted = "capacity_exhausted"
	// CodeForbidden: the caller's identity may not take this action.
	CodeForbidden = "forbidden"
	// CodeUnplaceable: no node could ever take the step (422); it is
	// recorded failed with the typed cause (Step.Unplaceable).
	CodeUnplaceable = "unplaceable"
	// CodeQuotaExceeded: a quota of the caller or of a workspace is used
	// up (429 with Retry-After); the message names the quota.
	CodeQuotaExceeded = "quota_exceeded"
)

// NewError returns the error body with code and message.
func NewError(code, message string) Error {
	return Error{Detail: ErrorDetail{Code: code, Message: message}}
}

// Error implements the error interface, so a client can return a decoded
// error body as is.
func (e Error) Error() string { return e.Detail.Code + ": " + e.Detail.Message }
