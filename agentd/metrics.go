package agentd

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the agent's Prometheus metrics. Register them with
// (*Metrics).Collectors; a nil *Metrics records nothing.
type Metrics struct {
	steps    *prometheus.CounterVec
	running  prometheus.Gauge
	create   prometheus.Histogram
	cleanup  prometheus.Histogram
	degraded prometheus.Gauge
	denied   *prometheus.CounterVec
}

// NewMetrics returns the agent's metrics, unregistered.
func NewMetrics() *Metrics {
	return &Metrics{
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rodon_agent_steps_total",
			Help: "Steps this agent ended, by final state and what ended them.",
		}, []string{"state", "terminated_by"}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rodon_agent_sandboxes",
			Help: "Step sandboxes this agent holds (starting, running or being cleaned up).",
		}),
		create: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rodon_agent_sandbox_create_seconds",
			Help:    "Time to create and start a step's pod sandbox.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 10),
		}),
		cleanup: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rodon_agent_sandbox_cleanup_seconds",
			Help:    "Time from a step's exit to its sandbox being gone.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 10),
		}),
		degraded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rodon_agent_degraded",
			Help: "1 when the node's capability probe failed (it then receives no steps).",
		}),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rodon_agent_egress_denied_packets_total",
			Help: "Packets from step sandboxes the egress filter denied, by reason (netpolicy.Reason names: private, metadata, node, documentation, encapsulation, ...).",
		}, []string{"reason"}),
	}
}

// Collectors returns the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.steps, m.running, m.create, m.cleanup, m.degraded, m.denied}
}
