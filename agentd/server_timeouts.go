package agentd

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// deadlines are the read and write deadlines of one route, counted from
// the moment its handler starts (the request's header was read within the
// server's header timeout before that): read bounds reading the body,
// write bounds the whole answer.
type deadlines struct{ read, write time.Duration }

// serverTimeouts are the agent's HTTP timeouts. Step streams are long-lived
// and have none of these: they bound each write themselves (the stream
// package's WriteWait).
type serverTimeouts struct {
	// header bounds reading a request's header; idle how long a
	// keep-alive connection waits for its next request.
	header, idle time.Duration
	// input: a terminal input message (64 KiB at most) and its delivery,
	// which waits up to 10 s for a starting step and 5 s for its terminal.
	input deadlines
	// metrics and health: the Prometheus scrape and /healthz.
	metrics, health deadlines
}

// agentTimeouts are the timeouts `agentd serve` uses (docs/PROTOCOL.md,
// "Agent's own routes"); tests shorten them.
var agentTimeouts = serverTimeouts{
	header:  10 * time.Second,
	idle:    90 * time.Second,
	input:   deadlines{read: 10 * time.Second, write: 20 * time.Second},
	metrics: deadlines{read: 10 * time.Second, write: 30 * time.Second},
	health:  deadlines{read: 5 * time.Second, write: 5 * time.Second},
}

// maxHeaderBytes bounds a request's header on the agent.
const maxHeaderBytes = 64 << 10

// withDeadlines serves h with the route's read and write deadlines set on
// its connection.
func withDeadlines(d deadlines, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		now := time.Now()
		// Errors mean the connection cannot take deadlines (an HTTP/2
		// stream without support); the handler still runs.
		rc.SetReadDeadline(now.Add(d.read))
		rc.SetWriteDeadline(now.Add(d.write))
		h.ServeHTTP(w, r)
	})
}

// newAgentServer returns the agent's HTTP server for handler: its requests'
// context ends with ctx (streams end when the agent stops; Shutdown would
// wait for a following stream until its step exits).
func newAgentServer(ctx context.Context, handler http.Handler, t serverTimeouts, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: t.header,
		IdleTimeout:       t.idle,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}
