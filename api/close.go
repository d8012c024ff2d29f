package api

// Close codes of the gateway's stream websocket (GET /v1/steps/{id}/stream)
// besides the standard ones (1000 after the exit frame, 1003 and 1008 for
// a refused message, 1011 for a stream that could not be finished): 4000
// plus the HTTP status of the same refusal.
const (
	// CloseBadRequest: from names a frame the step does not have.
	CloseBadRequest = 4400
	// CloseUnauthorized: the caller's credential no longer holds (signed
	// out, expired, a deleted or changed member, a deleted key).
	CloseUnauthorized = 4401
	// CloseForbidden: the caller may no longer read (or write to) the
	// stream.
	CloseForbidden = 4403
	// CloseNotFound: the step has no stream (it has not run on a node,
	// or its output is past retention).
	CloseNotFound = 4404
)
