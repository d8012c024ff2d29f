package relay

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the relay's Prometheus metrics. Register them with
// (*Metrics).Collectors; a nil *Metrics records nothing.
type Metrics struct {
	active  prometheus.Gauge
	bytes   prometheus.Counter
	frames  prometheus.Counter
	resumes prometheus.Counter
}

// NewMetrics returns the relay's metrics, unregistered.
func NewMetrics() *Metrics {
	return &Metrics{
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rodon_gateway_streams",
			Help: "Step streams being relayed to browsers.",
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rodon_gateway_stream_bytes_total",
			Help: "Bytes of stream frames relayed to browsers.",
		}),
		frames: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rodon_gateway_stream_frames_total",
			Help: "Stream frames relayed to browsers.",
		}),
		resumes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rodon_gateway_stream_resumes_total",
			Help: "Attempts to reopen a node's stream after it broke or could not be opened.",
		}),
	}
}

// Collectors returns the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.active, m.bytes, m.frames, m.resumes}
}

func (m *Metrics) streamStarted() {
	if m != nil {
		m.active.Inc()
	}
}

func (m *Metrics) streamEnded() {
	if m != nil {
		m.active.Dec()
	}
}

func (m *Metrics) relayed(n int) {
	if m != nil {
		m.bytes.Add(float64(n))
		m.frames.Inc()
	}
}

func (m *Metrics) resumed() {
	if m != nil {
		m.resumes.Inc()
	}
}
