package gateway

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rodon-compute/rodon/internal/httpapi"
)

// metrics are the gateway's Prometheus metrics, in a registry of its own
// (several gateways may run in one test process).
type metrics struct {
	reg           *prometheus.Registry
	http          *httpapi.RequestMetrics
	signins       *prometheus.CounterVec
	auditFailures prometheus.Counter
	quotaRefusals *prometheus.CounterVec
	// The maintenance pass.
	maintPasses   *prometheus.CounterVec
	maintDuration prometheus.Histogram
	maintDeleted  *prometheus.CounterVec
	// streamsRevoked counts open streams closed because their caller may
	// no longer read them.
	streamsRevoked prometheus.Counter
}

func newMetrics(extra ...prometheus.Collector) *metrics {
	m := &metrics{
		reg:  prometheus.NewRegistry(),
		http: httpapi.NewRequestMetrics("gateway", "streams"),
		signins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rodon_gateway_signins_total",
			Help: "Sign-in attempts, by result (ok, wrong, rate_limited, malformed, too_large, bad_origin, bad_content_type, busy).",
		}, []string{"result"}),
		quotaRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rodon_gateway_quota_refusals_total",
			Help: "Runs refused over a quota, by quota (live_runs, queued_steps).",
		}, []string{"quota"}),
		maintPasses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rodon_gateway_maintenance_passes_total",
			Help: "Maintenance passes (retention, expired sign-ins, quota counters), by result (ok, error).",
		}, []string{"result"}),
		maintDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rodon_gateway_maintenance_pass_seconds",
			Help:    "Time a maintenance pass took.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}),
		maintDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rodon_gateway_maintenance_deleted_total",
			Help: "What maintenance passes removed, by what (runs: run records past retention; signins: expired sign-ins; quota_counts: runs uncounted from quotas they no longer held).",
		}, []string{"what"}),
		streamsRevoked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rodon_gateway_streams_revoked_total",
			Help: "Open streams closed because their caller may no longer read them (signed out, deleted or changed member, deleted key).",
		}),
		auditFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rodon_gateway_audit_failures_total",
			Help: "Audit entries that could not be appended (see the log).",
		}),
	}
	m.reg.MustRegister(m.http.Collectors()...)
	m.reg.MustRegister(m.signins, m.auditFailures, m.quotaRefusals,
		m.maintPasses, m.maintDuration, m.maintDeleted, m.streamsRevoked,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(extra...)
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// instrument counts the requests h answers by route pattern and code.
func (m *metrics) instrument(h http.Handler) http.Handler {
	return m.http.Instrument(h)
}
