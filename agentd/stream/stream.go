// Package stream serves a step's output stream from the node that runs it:
// agentd's internal form of the SPEC's stream, read by the gateway and by
// schedctl.
//
//	GET /v1/steps/{id}/stream?from=N&follow=0|1
//
// The frames are the api.Frame values of the step's log in the node's
// logstore, starting after frame N (default 0, the start) and, while
// following (the default), going on live until the exit frame, as
// newline-delimited JSON (application/x-ndjson), flushed as they come. Bad
// requests are refused with an api.Error body and the matching HTTP status.
// There is no websocket mode: the gateway's relay, schedctl and the
// benchmarks read NDJSON (a websocket upgrade request gets NDJSON too).
package stream

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/httpapi"
)

// Config configures a Handler.
type Config struct {
	// WriteWait bounds each write to a client.
	WriteWait time.Duration
}

// DefaultConfig returns the configuration agentd serves with.
func DefaultConfig() Config {
	return Config{WriteWait: 10 * time.Second}
}

// Handler serves step streams from a logstore. It starts no goroutine.
// Requests end when their context does; the server should cancel its
// BaseContext on shutdown, since a following stream lasts until the step
// exits.
type Handler struct {
	cfg    Config
	logs   *logstore.Store
	logger *slog.Logger
	mux    *http.ServeMux
}

// New returns a Handler of the streams in logs.
func New(cfg Config, logs *logstore.Store, logger *slog.Logger) (*Handler, error) {
	switch {
	case logs == nil:
		return nil, errors.New("stream handler: no log store")
	case cfg.WriteWait <= 0:
		return nil, fmt.Errorf("stream handler config: write wait %v must be positive", cfg.WriteWait)
	}
	h := &Handler{
		cfg:    cfg,
		logs:   logs,
		logger: logger.With("component", "stream"),
		mux:    http.NewServeMux(),
	}
	h.mux.HandleFunc("GET /v1/steps/{id}/stream", h.serveStream)
	h.mux.HandleFunc("/v1/steps/{id}/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, r.Method+" is not allowed here; use GET")
	})
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, api.CodeNotFound, "no such route: "+r.URL.Path)
	})
	return h, nil
}

// ServeHTTP serves GET /v1/steps/{id}/stream.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

func (h *Handler) serveStream(w http.ResponseWriter, r *http.Request) {
	id := cluster.StepID(r.PathValue("id"))
	opts, err := parseQuery(r)
	var rd *logstore.Reader
	if err == nil {
		rd, err = h.logs.Open(id, opts)
	}
	var fail *requestError
	if err != nil {
		fail = classify(id, err)
	}
	if fail != nil && fail.status == http.StatusInternalServerError {
		h.logger.Error("open stream", "step", id, "error", err)
	}
	if fail != nil {
		writeError(w, fail.status, fail.code, fail.message)
		return
	}
	h.serveNDJSON(w, r, id, rd)
}

// parseQuery reads from and follow.
func parseQuery(r *http.Request) (logstore.ReadOptions, error) {
	opts := logstore.ReadOptions{Follow: true}
	q := r.URL.Query()
	if s := q.Get("from"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return opts, fmt.Errorf("%w: from=%q: want the seq of the last frame you have, an integer >= 0", logstore.ErrBadFrom, s)
		}
		opts.From = n
	}
	switch s := q.Get("follow"); s {
	case "", "1", "true":
	case "0", "false":
		opts.Follow = false
	default:
		return opts, fmt.Errorf("%w: follow=%q: want 1 (wait for the exit frame) or 0 (end at the last frame so far)", errBadQuery, s)
	}
	return opts, nil
}

var errBadQuery = errors.New("bad query")

// requestError is a refused request as the client sees it.
type requestError struct {
	status  int
	code    string
	message string
}

func classify(id cluster.StepID, err error) *requestError {
	switch {
	case errors.Is(err, logstore.ErrNotFound):
		return &requestError{http.StatusNotFound, api.CodeNotFound,
			fmt.Sprintf("no output of step %s on this node: the step never ran here, or its output is past retention", id)}
	case errors.Is(err, logstore.ErrBadFrom), errors.Is(err, errBadQuery):
		return &requestError{http.StatusBadRequest, api.CodeBadRequest, err.Error()}
	}
	return &requestError{http.StatusInternalServerError, api.CodeInternal,
		fmt.Sprintf("cannot read the output of step %s; see the agent's log", id)}
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	httpapi.WriteError(w, &httpapi.Error{Status: status, Code: code, Message: message})
}
