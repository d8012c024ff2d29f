package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// metric is one Prometheus series family the delta measurement reads,
// summed over the series whose labels include labels.
type metric struct {
	name   string
	labels map[string]string
}

func (m metric) String() string {
	if len(m.labels) == 0 {
		return m.name
	}
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(m.labels)) {
		kv = append(kv, k+"="+strconv.Quote(m.labels[k]))
	}
	return m.name + "{" + strings.Join(kv, ",") + "}"
}

// The metrics of the delta measurement, the only place they are named:
// agentd's blob cache and upload counters (agentd/metrics.go) and the
// scheduler's requests to its blob routes, which the local store's
// presigned URLs name (internal/httpapi's request metrics). A name
// missing from /metrics fails the benchmark, naming it.
var (
	nodeFetched  = metric{name: "rodon_agent_blob_fetched_bytes_total"}
	nodeUploaded = metric{name: "rodon_agent_blob_uploaded_bytes_total"}
	storeGets    = metric{name: "rodon_scheduler_http_requests_total", labels: map[string]string{"route": "GET /v1/blobs/{digest}"}}
	storePuts    = metric{name: "rodon_scheduler_http_requests_total", labels: map[string]string{"route": "PUT /v1/blobs/{digest}"}}
)

// nodeMetrics and storeMetrics are read from agentd's and the
// scheduler's /metrics.
var (
	nodeMetrics  = []metric{nodeFetched, nodeUploaded}
	storeMetrics = []metric{storeGets, storePuts}
)

// counters are the values of some metrics at one time.
type counters map[string]float64

// sub is c - before, metric by metric.
func (c counters) sub(before counters) counters {
	d := counters{}
	for k, v := range c {
		d[k] = v - before[k]
	}
	return d
}

func (c counters) get(m metric) int64 { return int64(c[m.String()]) }

// scrape reads url (a /metrics) with hc and returns the sums of ms; a
// metric without any series is an error when required.
func scrape(ctx context.Context, hc *http.Client, url string, required bool, ms ...metric) (counters, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	c, err := sums(resp.Body, required, ms...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	return c, nil
}

// sums reads Prometheus's text format from r and sums the series of each
// of ms (floats, as the format has them). With required, a metric of ms
// that has no series is an error.
func sums(r io.Reader, required bool, ms ...metric) (counters, error) {
	c := counters{}
	found := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, value, err := parseSample(line)
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			if m.name == name && hasLabels(labels, m.labels) {
				c[m.String()] += value
				found[m.String()] = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, m := range ms {
		if required && !found[m.String()] {
			return nil, fmt.Errorf("no metric %s: the names in bench/workspace/metrics.go and the daemon's disagree", m)
		}
		if _, ok := c[m.String()]; !ok {
			c[m.String()] = 0
		}
	}
	return c, nil
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// parseSample parses one sample line: name{k="v",...} value [timestamp].
func parseSample(line string) (name string, labels map[string]string, value float64, err error) {
	bad := func(why string) error { return fmt.Errorf("metrics line %q: %s", line, why) }
	i := strings.IndexAny(line, "{ \t")
	if i <= 0 {
		return "", nil, 0, bad("no value")
	}
	name, rest := line[:i], line[i:]
	labels = map[string]string{}
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, " ,")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, `="`)
			if eq <= 0 {
				return "", nil, 0, bad("bad label")
			}
			k := rest[:eq]
			rest = rest[eq+2:]
			var v strings.Builder
			for {
				if rest == "" {
					return "", nil, 0, bad("unterminated label value")
				}
				ch := rest[0]
				rest = rest[1:]
				if ch == '"' {
					break
				}
				if ch == '\\' && rest != "" {
					ch, rest = rest[0], rest[1:]
					if ch == 'n' {
						ch = '\n'
					}
				}
				v.WriteByte(ch)
			}
			labels[k] = v.String()
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return "", nil, 0, bad("no value")
	}
	value, err = strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", nil, 0, bad(err.Error())
	}
	return name, labels, value, nil
}
