package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/httpapi"
)

// IndexHeader carries the state index an answer was read at.
const IndexHeader = "X-Rodon-Index"

// routes builds the member's HTTP API (docs/PROTOCOL.md). Writes go
// through s.write, which forwards them to the leader when this member is
// not it; reads are served from this member's state.
func (s *Server) routes() http.Handler {
	root := http.NewServeMux()
	// Every route goes through mux, which serves it behind its row of
	// accessTable (authz.go).
	mux := &router{s: s, mux: root}
	mux.HandleFunc("GET /healthz", s.handleHealth)
	mux.Handle("GET /metrics", s.metrics.handler())

	mux.HandleFunc("GET /v1/members", s.read(s.handleMembers))
	mux.HandleFunc("POST /v1/members/join", s.write(s.handleJoin))
	mux.HandleFunc("POST /v1/members/remove", s.write(s.handleRemoveMember))
	mux.HandleFunc("GET /v1/members/env-key", s.local(s.handleEnvKey))
	mux.HandleFunc("GET /v1/snapshot", s.read(s.handleSnapshot))
	mux.HandleFunc("POST /v1/snapshot/restore", s.write(s.handleRestore))

	mux.HandleFunc("GET /v1/nodes", s.leaderRead(s.handleNodes))
	mux.HandleFunc("GET /v1/nodes/{id}", s.leaderRead(s.handleNode))
	mux.HandleFunc("POST /v1/nodes/{id}/drain", s.write(s.handleDrain))
	mux.HandleFunc("POST /v1/nodes/{id}/undrain", s.write(s.handleUndrain))

	mux.HandleFunc("POST /v1/steps", s.write(s.handleSubmit))
	mux.HandleFunc("GET /v1/steps", s.read(s.handleSteps))
	mux.HandleFunc("GET /v1/steps/{id}", s.read(s.handleStep))
	mux.HandleFunc("POST /v1/steps/{id}/cancel", s.write(s.handleCancel))
	mux.HandleFunc("GET /v1/steps/{id}/stream-url", s.read(s.handleStreamURL))
	mux.HandleFunc("POST /v1/env/seal", s.local(s.handleSealEnv))

	mux.HandleFunc("POST /v1/agent/register", s.write(s.handleRegister))
	mux.HandleFunc("POST /v1/agent/heartbeat", s.write(s.handleHeartbeat))
	mux.HandleFunc("GET /v1/agent/assignments", s.read(s.handleAssignments))
	mux.HandleFunc("POST /v1/agent/steps/{id}/phase", s.write(s.handlePhase))
	mux.HandleFunc("POST /v1/agent/steps/{id}/events", s.write(s.handleEvents))
	mux.HandleFunc("POST /v1/agent/steps/{id}/exit", s.write(s.handleExit))
	mux.HandleFunc("POST /v1/agent/steps/{id}/cancel-confirmed", s.write(s.handleConfirmCancel))
	mux.HandleFunc("POST /v1/agent/reports", s.write(s.handleReports))
	mux.HandleFunc("POST /v1/agent/uploads", s.read(s.handleUploads))
	s.workspaceRoutes(mux)

	mux.HandleFunc("GET /v1/records/{kind}", s.read(s.handleRecords))
	mux.HandleFunc("GET /v1/records/{kind}/{id}", s.read(s.handleRecord))
	mux.HandleFunc("PUT /v1/records/{kind}/{id}", s.write(s.handlePutRecord))
	mux.HandleFunc("DELETE /v1/records/{kind}/{id}", s.write(s.handleDeleteRecord))
	// The audit log is append-only: no route changes an entry; the old
	// ones are dropped only by a drop that is itself audited.
	mux.HandleFunc("POST /v1/audit", s.write(s.handleAppendAudit))
	mux.HandleFunc("GET /v1/audit", s.read(s.handleAudit))
	mux.HandleFunc("POST /v1/audit/drop", s.write(s.handleDropAudit))
	s.platformRoutes(mux)

	// A path no route matches is answered to anyone: it does nothing.
	root.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { noRoute(root, w, r) })
	return s.metrics.instrument(s.withDeadlines(root))
}

// noRoute answers a request no pattern matched: 405 with Allow when the
// path exists for other methods, else 404.
func noRoute(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) {
	httpapi.NoRoute(mux, w, r, "docs/PROTOCOL.md")
}

// handlerFunc is an API handler: it writes a success itself or returns an
// error, which becomes the error document.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// leaderRead serves a read that needs what only the leader holds in
// memory (heartbeat times, warm pools): on a follower it forwards the
// request to the leader, as a write; on the leader it is a read.
func (s *Server) leaderRead(h handlerFunc) http.HandlerFunc {
	read := s.read(h)
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.raft.IsLeader() {
			s.forward(w, r)
			return
		}
		read(w, r)
	}
}

// read serves a read from this member's state once it applied what the
// leader knows to be committed (catchUp: a linearizable read).
func (s *Server) read(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := s.catchUp(r.Context()); err != nil {
			writeError(w, err)
			return
		}
		if err := s.authorizeState(r); err != nil {
			s.refuse(w, r, r.Pattern, err)
			return
		}
		if err := h(w, r); err != nil {
			writeError(w, errorOf(err))
		}
	}
}

// write runs a write on the leader: on a follower it forwards the request.
// The handler runs with a context that the client's going away does not
// cancel, so that a command is not abandoned half-way; Raft's apply
// timeout bounds it.
func (s *Server) write(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.raft.IsLeader() {
			s.forward(w, r)
			return
		}
		if err := s.authorizeState(r); err != nil {
			s.refuse(w, r, r.Pattern, err)
			return
		}
		r = r.WithContext(context.WithoutCancel(r.Context()))
		if err := h(w, r); err != nil {
			writeError(w, errorOf(err))
		}
	}
}

// catchUp makes the read that follows linearizable (Raft's ReadIndex): it
// learns the leader's commit index after the leader confirmed its
// leadership with a quorum (itself, when this member leads), then waits
// until this member applied that far. When either cannot be done within
// readTimeout the read is refused with 503, never answered from a state
// that may be stale; clients retry on another member.
func (s *Server) catchUp(ctx context.Context) *httpError {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	// target is the leader's commit index; stateTarget its state index
	// (the last entry its FSM applied): Raft's applied index counts the
	// entries handed to the FSM, which may not have applied them yet, so a
	// follower also waits until its own state is as far as the leader's,
	// which holds every write acknowledged so far.
	var target, stateTarget uint64
	if s.raft.IsLeader() {
		target = s.raft.CommitIndex()
		if err := s.raft.VerifyLeader(ctx); err != nil {
			return &httpError{Status: http.StatusServiceUnavailable, Code: api.CodeNoLeader,
				Message: "cannot confirm leadership for a consistent read: " + err.Error(), RetryAfter: time.Second}
		}
	} else {
		h, err := s.leaderReadIndex(ctx)
		if err != nil {
			return &httpError{Status: http.StatusServiceUnavailable, Code: api.CodeNoLeader,
				Message: "cannot learn the leader's commit index for a consistent read: " + err.Error(), RetryAfter: time.Second}
		}
		target, stateTarget = h.CommitIndex, h.StateIndex
	}
	st := s.fsm.State()
	for s.raft.AppliedIndex() < target || st.Index() < stateTarget {
		if ctx.Err() != nil {
			return &httpError{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable,
				Message: fmt.Sprintf("this member has applied index %d of %d; try again", s.raft.AppliedIndex(), target), RetryAfter: time.Second}
		}
		// Raft's own entries (no-ops, configurations) do not reach the
		// state, so do not wake WaitIndex: look again after a while.
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Millisecond)
		_, _ = st.WaitIndex(wctx, st.Index())
		wcancel()
	}
	return nil
}

// readTimeout bounds the wait of a consistent read.
const readTimeout = 2 * time.Second

// leaderReadIndex asks the leader for its commit index, confirmed.
func (s *Server) leaderReadIndex(ctx context.Context) (api.Health, error) {
	id, _ := s.raft.Leader()
	m, ok := s.fsm.State().Member(id)
	if id == "" || !ok {
		return api.Health{}, fmt.Errorf("no leader known")
	}
	return s.askHealth(ctx, m.HTTPAddress, "?read-index")
}

// httpError is an error answer (status, code, message, Retry-After).
type httpError = httpapi.Error

func badRequest(format string, args ...any) *httpError {
	return &httpError{Status: http.StatusBadRequest, Code: api.CodeBadRequest, Message: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) *httpError {
	return &httpError{Status: http.StatusNotFound, Code: api.CodeNotFound, Message: fmt.Sprintf(format, args...)}
}

func conflict(format string, args ...any) *httpError {
	return &httpError{Status: http.StatusConflict, Code: api.CodeConflict, Message: fmt.Sprintf(format, args...)}
}

func noLeader(format string, args ...any) *httpError {
	return &httpError{Status: http.StatusServiceUnavailable, Code: api.CodeNoLeader, Message: fmt.Sprintf(format, args...),
		RetryAfter: time.Second}
}

// errorOf maps an error of a handler, of Raft or of the FSM to its answer.
func errorOf(err error) *httpError {
	var he *httpError
	if errors.As(err, &he) {
		return he
	}
	var ce *CapacityError
	var nl *NotLeaderError
	switch {
	case errors.As(err, &ce):
		return &httpError{Status: http.StatusServiceUnavailable, Code: api.CodeCapacityExhausted, Message: err.Error(),
			RetryAfter: ce.RetryAfter}
	case errors.Is(err, ErrNotFound):
		return &httpError{Status: http.StatusNotFound, Code: api.CodeNotFound, Message: err.Error()}
	case errors.Is(err, ErrInvalid):
		return badRequest("%s", strings.TrimSuffix(err.Error(), ": "+ErrInvalid.Error()))
	case errors.Is(err, ErrExists), errors.Is(err, ErrTerminal), errors.Is(err, ErrTransition),
		errors.Is(err, ErrStale), errors.Is(err, ErrUnavailable), errors.Is(err, ErrVersionMismatch), errors.Is(err, ErrHeadMoved):
		return conflict("%s", err.Error())
	case errors.As(err, &nl):
		return noLeader("%s", err.Error())
	case errors.Is(err, ErrLeadershipLost):
		return &httpError{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: err.Error(), RetryAfter: time.Second}
	case errors.Is(err, ErrStopped):
		return &httpError{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable,
			Message: "this scheduler member is shutting down: use another", RetryAfter: time.Second}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return &httpError{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable,
			Message: fmt.Sprintf("timed out: %v; the change may still be applied, read it back before retrying", err), RetryAfter: time.Second}
	}
	return &httpError{Status: http.StatusInternalServerError, Code: api.CodeInternal, Message: err.Error()}
}

func writeError(w http.ResponseWriter, e *httpError) { httpapi.WriteError(w, e) }

func writeJSON(w http.ResponseWriter, status int, v any) { httpapi.WriteJSON(w, status, v) }

// writeIndexed writes v with the state index it was read at.
func writeIndexed(w http.ResponseWriter, status int, index uint64, v any) {
	w.Header().Set(IndexHeader, strconv.FormatUint(index, 10))
	writeJSON(w, status, v)
}
