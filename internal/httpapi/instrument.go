package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Instrument counts the requests h answers in requests (labels route and
// code) and observes their durations in duration (label route). The route
// is the pattern the mux matched; a request no pattern matched counts as
// "unmatched".
func Instrument(h http.Handler, requests *prometheus.CounterVec, duration *prometheus.HistogramVec) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &StatusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		route := r.Pattern
		if route == "" || route == "/" {
			route = "unmatched"
		}
		requests.WithLabelValues(route, strconv.Itoa(sw.Status())).Inc()
		duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

// StatusWriter remembers the status of the answer written through it.
type StatusWriter struct {
	http.ResponseWriter
	status int
}

// Status is the answer's status: 200 if the handler wrote a body without
// a header, or nothing at all.
func (w *StatusWriter) Status() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

func (w *StatusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *StatusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController (flushes, deadlines, websocket
// upgrades) reach the connection.
func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
