package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeMetrics is /metrics text as agentd and the scheduler write it.
const fakeMetrics = `# HELP rodon_agent_blob_fetched_bytes_total Bytes of workspace blobs this node fetched.
# TYPE rodon_agent_blob_fetched_bytes_total counter
rodon_agent_blob_fetched_bytes_total 1.073745e+09
# TYPE rodon_agent_blob_uploaded_bytes_total counter
rodon_agent_blob_uploaded_bytes_total 4321
# TYPE rodon_scheduler_http_requests_total counter
rodon_scheduler_http_requests_total{code="200",route="GET /v1/blobs/{digest}"} 3
rodon_scheduler_http_requests_total{code="206",route="GET /v1/blobs/{digest}"} 2
rodon_scheduler_http_requests_total{code="201",route="PUT /v1/blobs/{digest}"} 2
rodon_scheduler_http_requests_total{code="200",route="GET /v1/steps/{id}"} 40
rodon_scheduler_http_requests_total{code="400",route="weird \"route\"\\ with, commas} and spaces"} 1
rodon_agent_sandbox_create_seconds_bucket{le="+Inf"} 7
`

func TestSums(t *testing.T) {
	c, err := sums(strings.NewReader(fakeMetrics), true, append(nodeMetrics, storeMetrics...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		m    metric
		want int64
	}{{nodeFetched, 1073745000}, {nodeUploaded, 4321}, {storeGets, 5}, {storePuts, 2}} {
		if got := c.get(tc.m); got != tc.want {
			t.Errorf("sum of %s = %d, want %d", tc.m, got, tc.want)
		}
	}
	odd := metric{name: "rodon_scheduler_http_requests_total", labels: map[string]string{"route": `weird "route"\ with, commas} and spaces`}}
	if c, err := sums(strings.NewReader(fakeMetrics), true, odd); err != nil || c.get(odd) != 1 {
		t.Errorf("sums(%s) = %v, %v, want 1", odd, c, err)
	}
}

func TestSumsNamesAMissingMetric(t *testing.T) {
	missing := metric{name: "rodon_agent_blob_fetched_bytes"}
	_, err := sums(strings.NewReader(fakeMetrics), true, nodeFetched, missing)
	if err == nil || !strings.Contains(err.Error(), "no metric rodon_agent_blob_fetched_bytes:") {
		t.Errorf("sums with a missing metric: %v, want an error naming it", err)
	}
	c, err := sums(strings.NewReader(fakeMetrics), false, missing)
	if err != nil || c.get(missing) != 0 {
		t.Errorf("sums(not required) = %v, %v, want 0", c, err)
	}
}

func TestParseSampleRefusesGarbage(t *testing.T) {
	for _, line := range []string{"novalue", `m{route="x} 1`, `m{route} 1`, "m notanumber"} {
		if _, _, _, err := parseSample(line); err == nil {
			t.Errorf("parseSample(%q) = nil error, want one", line)
		}
	}
}

// TestCopyBaseline checks the cp baseline: it copies, is timed and leaves
// no copy behind; and that mark makes a file another blob.
func TestCopyBaseline(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	if err := writeRandom(src, 3<<20+5); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(src)
	if err != nil || len(before) != 3<<20+5 {
		t.Fatalf("writeRandom wrote %d bytes (%v), want %d", len(before), err, 3<<20+5)
	}
	d, err := cp(src, dst)
	if err != nil || d <= 0 {
		t.Fatalf("cp = %v, %v", d, err)
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Errorf("cp left %s behind: %v", dst, err)
	}
	if err := mark(src, 0); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(src)
	if bytes.Equal(before[:8], after[:8]) || !bytes.Equal(before[8:], after[8:]) {
		t.Errorf("mark changed %x to %x and the rest equal %v, want only the first 8 bytes changed", before[:8], after[:8], bytes.Equal(before[8:], after[8:]))
	}
	if _, err := cp(src, filepath.Join(dir, "none", "dst")); err == nil {
		t.Error("cp into a missing directory: nil error")
	}
}

func TestDeltaCheck(t *testing.T) {
	a := stepMoves{fetched: 1 << 30, uploaded: 5000, gets: 3, puts: 2, baseManifest: 300, after: 300}
	ok := stepMoves{fetched: 300, uploaded: 4096 + 300, gets: 1, puts: 2, baseManifest: 300, after: 300}
	for _, tc := range []struct {
		name string
		r    deltaResult
		want string
	}{
		{"only the file and the manifests", deltaResult{a: a, b: ok}, ""},
		{"nothing fetched", deltaResult{a: a, b: stepMoves{uploaded: 10, gets: 0, puts: 1}}, ""},
		{"the whole tree fetched", deltaResult{a: a, b: stepMoves{fetched: 1 << 30, baseManifest: 300, after: 300}}, "step B fetched 1073741824 bytes"},
		{"too much uploaded", deltaResult{a: a, b: stepMoves{uploaded: 4096 + 301, baseManifest: 300, after: 300}}, "step B uploaded 4397 bytes"},
		{"too many requests", deltaResult{a: a, b: stepMoves{gets: 3, baseManifest: 300, after: 300}}, "3 blob GETs"},
		{"the store's metrics saw nothing", deltaResult{a: stepMoves{fetched: 1 << 30}, b: ok}, "the names in bench/workspace/metrics.go"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.check()
			if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("check() = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestRenderAndGuards checks the ratios of medians the report gives and
// the guards that apply to them.
func TestRenderAndGuards(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	b := &bench{c: config{size: 1 << 30, runs: 3, n: 3},
		up:   []transferSample{{ms(4000), ms(1000)}, {ms(2000), ms(1000)}, {ms(3000), ms(2000)}},
		down: []transferSample{{ms(1000), ms(1000)}, {ms(2000), ms(1000)}, {ms(1500), ms(1000)}},
		lat:  []latencySample{{ms(1100), ms(1000)}, {ms(1200), ms(1000)}, {ms(900), ms(1000)}},
		delta: deltaResult{workspace: 1<<30 + 4096, a: stepMoves{fetched: 1 << 30, gets: 3, puts: 2},
			b: stepMoves{uploaded: 4096 + 300, puts: 2, baseManifest: 300, after: 300}},
	}
	r := b.render(time.Minute)
	if r.upRatio != 1000.0/3000 || r.downRatio != 1000.0/1500 || r.emptyRatio != 1.1 {
		t.Errorf("ratios = %v, %v, %v, want 0.33, 0.67, 1.1", r.upRatio, r.downRatio, r.emptyRatio)
	}
	for _, want := range []string{"| **0.33** |", "| **0.67** |", "| **ratio of medians, empty workspace / none** | **1.10** |", "| **B (the next step)** | 0 B | 4396 B | 0 | 2 |"} {
		if !strings.Contains(r.text, want) {
			t.Errorf("report has no %q:\n%s", want, r.text)
		}
	}
	for _, tc := range []struct {
		c    config
		want string
	}{
		{config{}, ""},
		{config{minUpload: 0.3, minDown: 0.6, checkDelta: true, maxEmpty: 1.1}, ""},
		{config{minUpload: 0.5}, "upload throughput is 0.33 of cp's"},
		{config{minDown: 0.7}, "download throughput is 0.67 of cp's"},
		{config{maxEmpty: 1.05}, "1.10 times that of one without"},
	} {
		err := r.check(tc.c)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("check(%+v) = %v, want %q", tc.c, err, tc.want)
		}
	}
}
