package agentd

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rodon-compute/rodon/agentd/blobcache"
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
	// blobs are the node's blob cache's.
	blobs blobcache.Metrics
	// uploaded counts the bytes of workspace results uploaded.
	uploaded prometheus.Counter
	// pool are the warm pool's (all zero without a pool).
	pool poolMetrics
}

// poolMetrics are the warm pool's metrics (docs/design/speed.md 1.7).
type poolMetrics struct {
	sandboxes *prometheus.GaugeVec
	target    *prometheus.GaugeVec
	claims    *prometheus.CounterVec
	discarded *prometheus.CounterVec
	memory    prometheus.Gauge
	budget    prometheus.Gauge
	create    prometheus.Histogram
	claim     prometheus.Histogram
}

func newPoolMetrics() poolMetrics {
	return poolMetrics{
		sandboxes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rodon_agent_pool_sandboxes",
			Help: "Sandboxes of the warm pool, by state: ready (for a step), creating, destroying (unclaimed, leaving).",
		}, []string{"state"}),
		target: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rodon_agent_pool_target",
			Help: "Ready sandboxes the warm pool aims to keep, by class (8 hex digits of image, network, workspace size, pids).",
		}, []string{"class"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rodon_agent_pool_claims_total",
			Help: "Steps that asked the warm pool for a sandbox, by result: hit (one was ready) or miss.",
		}, []string{"result"}),
		discarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rodon_agent_pool_discarded_total",
			Help: "Pooled sandboxes destroyed without a step, by reason: max_age, unwanted, unhealthy, claim_failed, no_fit.",
		}, []string{"reason"}),
		memory: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rodon_agent_pool_memory_bytes",
			Help: "Memory of the warm pool's unclaimed sandboxes (estimated from those measured).",
		}),
		budget: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rodon_agent_pool_budget_bytes",
			Help: "Memory the warm pool may use (agentd serve --warm-pool-memory).",
		}),
		create: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rodon_agent_pool_create_seconds",
			Help:    "Time to make one pooled sandbox (up to its running pause).",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 10),
		}),
		claim: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rodon_agent_claim_seconds",
			Help:    "Time to bind a step to a pooled sandbox (labels, limits, workspace copy).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 12),
		}),
	}
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
		blobs: blobcache.Metrics{
			FetchedBytes: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "rodon_agent_blob_fetched_bytes_total",
				Help: "Bytes of workspace blobs this node fetched (and verified) into its blob cache.",
			}),
			Hits: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "rodon_agent_blob_cache_hits_total",
				Help: "Workspace blobs a step needed that were in the node's blob cache.",
			}),
			Misses: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "rodon_agent_blob_cache_misses_total",
				Help: "Workspace blobs a step needed that the node had to fetch.",
			}),
			Bytes: prometheus.NewGauge(prometheus.GaugeOpts{
				Name: "rodon_agent_blob_cache_bytes",
				Help: "Bytes of blobs in the node's blob cache (agentd serve --blob-cache-size bounds it).",
			}),
		},
		uploaded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rodon_agent_blob_uploaded_bytes_total",
			Help: "Bytes of workspace blobs this node uploaded (new files of steps' results, and their manifests).",
		}),
		pool: newPoolMetrics(),
	}
}

// Collectors returns the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.steps, m.running, m.create, m.cleanup, m.degraded, m.denied,
		m.blobs.FetchedBytes, m.blobs.Hits, m.blobs.Misses, m.blobs.Bytes, m.uploaded,
		m.pool.sandboxes, m.pool.target, m.pool.claims, m.pool.discarded, m.pool.memory, m.pool.budget, m.pool.create, m.pool.claim}
}
