package scheduler

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/httpapi"
)

// metrics are a member's Prometheus metrics, in a registry of its own (so
// that several members can run in one test process).
type metrics struct {
	reg       *prometheus.Registry
	http      *httpapi.RequestMetrics
	placement prometheus.Histogram
	forwarded prometheus.Counter
	forbidden *prometheus.CounterVec
	// compacted counts the terminal steps the compaction removed, and
	// compactionRun is when it last removed some (on the leader).
	compacted     prometheus.Counter
	compactionRun prometheus.Gauge
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg:  prometheus.NewRegistry(),
		http: httpapi.NewRequestMetrics("scheduler", "long polls"),
		placement: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rodon_scheduler_placement_latency_seconds",
			Help:    "Time from a step's queueing (or re-queueing) to its placement, on the leader.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rodon_scheduler_forwarded_requests_total",
			Help: "Requests this member forwarded to the leader.",
		}),
		forbidden: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rodon_scheduler_http_forbidden_total",
			Help: "Requests refused (403) because the caller's identity may not take the route, by the caller's role and route pattern.",
		}, []string{"role", "route"}),
		compacted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rodon_scheduler_compacted_steps_total",
			Help: "Terminal steps this member, as the leader, compacted out of the replicated state after the retention (--step-retention).",
		}),
		compactionRun: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rodon_scheduler_compaction_last_run_timestamp_seconds",
			Help: "When this member, as the leader, last compacted terminal steps (Unix time; 0: never).",
		}),
	}
	m.reg.MustRegister(m.http.Collectors()...)
	m.reg.MustRegister(m.placement, m.forwarded, m.forbidden, m.compacted, m.compactionRun, stateCollector{s},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if s.cfg.TLS != nil {
		m.reg.MustRegister(s.cfg.TLS.Collector())
	}
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// instrument counts the requests h answers by route pattern and code.
func (m *metrics) instrument(h http.Handler) http.Handler {
	return m.http.Instrument(h)
}

var (
	raftStateDesc = prometheus.NewDesc("rodon_scheduler_raft_state",
		"1 for the member's current Raft state (leader, follower, candidate, shutdown), else 0.", []string{"state"}, nil)
	leaderDesc = prometheus.NewDesc("rodon_scheduler_raft_leader",
		"1 while this member is the leader, else 0.", nil, nil)
	knownLeaderDesc = prometheus.NewDesc("rodon_scheduler_raft_has_leader",
		"1 while this member knows a leader, else 0.", nil, nil)
	indexDesc = prometheus.NewDesc("rodon_scheduler_raft_applied_index",
		"The last Raft index applied on this member.", nil, nil)
	stepsDesc = prometheus.NewDesc("rodon_scheduler_steps",
		"Steps in the replicated state, by state.", []string{"state"}, nil)
	nodesDesc = prometheus.NewDesc("rodon_scheduler_nodes",
		"Nodes in the replicated state, by state.", []string{"state"}, nil)
	recordsDesc = prometheus.NewDesc("rodon_scheduler_records",
		"Records in the replicated record store, of every kind.", nil, nil)
	auditDesc = prometheus.NewDesc("rodon_scheduler_audit_seq",
		"The sequence number of the last audit log entry.", nil, nil)
	fsmEntriesDesc = prometheus.NewDesc("rodon_scheduler_fsm_entries_total",
		"Raft log entries this member's FSM applied since it started, by entry type (batch: one entry carrying many commands).", []string{"type"}, nil)
	fsmItemsDesc = prometheus.NewDesc("rodon_scheduler_fsm_items_total",
		"Commands this member's FSM applied since it started, by command type, whether an entry of their own or an item of a batch.", []string{"type"}, nil)
	auditEntriesDesc = prometheus.NewDesc("rodon_scheduler_audit_entries",
		"Audit log entries in the replicated state (those not dropped).", nil, nil)
)

// stateCollector reads the gauges off the member's Raft and state at each
// scrape.
type stateCollector struct{ s *Server }

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{raftStateDesc, leaderDesc, knownLeaderDesc, indexDesc, stepsDesc, nodesDesc, recordsDesc, auditDesc, auditEntriesDesc, fsmEntriesDesc, fsmItemsDesc} {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.s.raft
	current := strings.ToLower(r.RaftState())
	for _, st := range []string{"leader", "follower", "candidate", "shutdown"} {
		ch <- prometheus.MustNewConstMetric(raftStateDesc, prometheus.GaugeValue, boolValue(st == current), st)
	}
	leader, _ := r.Leader()
	ch <- prometheus.MustNewConstMetric(leaderDesc, prometheus.GaugeValue, boolValue(r.IsLeader()))
	ch <- prometheus.MustNewConstMetric(knownLeaderDesc, prometheus.GaugeValue, boolValue(leader != ""))
	ch <- prometheus.MustNewConstMetric(indexDesc, prometheus.GaugeValue, float64(r.AppliedIndex()))

	st := c.s.fsm.State()
	steps := st.StepCounts()
	for _, state := range stepStates {
		ch <- prometheus.MustNewConstMetric(stepsDesc, prometheus.GaugeValue, float64(steps[state]), string(state))
	}
	nodes := make(map[cluster.NodeState]int)
	for _, n := range st.Nodes() {
		nodes[n.State]++
	}
	for _, state := range []cluster.NodeState{cluster.NodeReady, cluster.NodeDegraded, cluster.NodeDraining, cluster.NodeDown} {
		ch <- prometheus.MustNewConstMetric(nodesDesc, prometheus.GaugeValue, float64(nodes[state]), string(state))
	}
	ch <- prometheus.MustNewConstMetric(recordsDesc, prometheus.GaugeValue, float64(st.RecordCount()))
	ch <- prometheus.MustNewConstMetric(auditDesc, prometheus.GaugeValue, float64(st.AuditSeq()))
	ch <- prometheus.MustNewConstMetric(auditEntriesDesc, prometheus.GaugeValue, float64(st.AuditLen()))
	entries, items := c.s.fsm.Applied()
	for t, n := range entries {
		ch <- prometheus.MustNewConstMetric(fsmEntriesDesc, prometheus.CounterValue, float64(n), t.String())
	}
	for t, n := range items {
		ch <- prometheus.MustNewConstMetric(fsmItemsDesc, prometheus.CounterValue, float64(n), t.String())
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
