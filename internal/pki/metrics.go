package pki

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Sides of a handshake, as the metrics label them.
const (
	SideServer = "server"
	SideClient = "client"
)

// Results of a handshake, as the metrics label them.
const (
	ResultOK      = "ok"
	ResultRefused = "refused"
)

// HandshakeKey says which handshakes a count is of: this end's side, the
// peer's role ("none" for a peer without a valid identity) and the result.
type HandshakeKey struct {
	Side, PeerRole, Result string
}

// handshakes counts a Source's handshakes. It is safe for concurrent use.
type handshakes struct {
	mu sync.Mutex
	n  map[HandshakeKey]uint64
}

func (h *handshakes) add(side string, id Identity, err error) {
	k := HandshakeKey{Side: side, PeerRole: string(id.Role), Result: ResultOK}
	if k.PeerRole == "" {
		k.PeerRole = "none"
	}
	if err != nil {
		k.Result = ResultRefused
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = make(map[HandshakeKey]uint64)
	}
	h.n[k]++
}

// Handshakes returns the counts of the handshakes whose peer certificate
// this Source checked, both as a server and as a client. (Peers refused
// before that, such as a client without a certificate, are the TLS
// library's: they are not counted.)
func (s *Source) Handshakes() map[HandshakeKey]uint64 {
	s.hs.mu.Lock()
	defer s.hs.mu.Unlock()
	out := make(map[HandshakeKey]uint64, len(s.hs.n))
	for k, v := range s.hs.n {
		out[k] = v
	}
	return out
}

var (
	handshakesDesc = prometheus.NewDesc("rodon_tls_handshakes_total",
		"Mutual TLS handshakes whose peer certificate was checked, by this end's side, the peer's role and the result.",
		[]string{"side", "peer_role", "result"}, nil)
	expiryDesc = prometheus.NewDesc("rodon_tls_certificate_expiry_timestamp_seconds",
		"When this component's certificate expires (Unix time); re-issue it before then.",
		[]string{"identity"}, nil)
)

// Collector exports the Source's handshake counts and its certificate's
// expiry for a daemon's /metrics.
func (s *Source) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Source }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- handshakesDesc
	ch <- expiryDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for k, v := range c.s.Handshakes() {
		ch <- prometheus.MustNewConstMetric(handshakesDesc, prometheus.CounterValue, float64(v), k.Side, k.PeerRole, k.Result)
	}
	m := c.s.cur.Load()
	ch <- prometheus.MustNewConstMetric(expiryDesc, prometheus.GaugeValue, float64(m.leaf.NotAfter.Unix()), m.id.String())
}
