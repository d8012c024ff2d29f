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

// RequestMetrics are an API's request metrics: requests answered by route
// pattern and status code, and the time taken by route pattern, named
// rodon_COMPONENT_http_requests_total and
// rodon_COMPONENT_http_request_duration_seconds.
type RequestMetrics struct {
	Requests *prometheus.CounterVec
	Duration *prometheus.HistogramVec
}

// NewRequestMetrics makes the request metrics of component; included says
// what the durations include beyond plain answers ("long polls", say).
func NewRequestMetrics(component, included string) *RequestMetrics {
	return &RequestMetrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rodon_" + component + "_http_requests_total",
			Help: "HTTP requests answered, by route pattern and status code.",
		}, []string{"route", "code"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rodon_" + component + "_http_request_duration_seconds",
			Help:    "Time to answer HTTP requests (" + included + " included), by route pattern.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}, []string{"route"}),
	}
}

// Collectors are the metrics to register.
func (m *RequestMetrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Requests, m.Duration}
}

// Instrument is Instrument(h, m.Requests, m.Duration).
func (m *RequestMetrics) Instrument(h http.Handler) http.Handler {
	return Instrument(h, m.Requests, m.Duration)
}
