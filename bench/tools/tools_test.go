package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestLocalGrepCountsTheNeedles checks the local side's walk against
// the files setUp makes: one match in every file that has a needle, none
// elsewhere.
func TestLocalGrepCountsTheNeedles(t *testing.T) {
	dir := t.TempDir()
	for i, needle := range []int{3, -1, 40, -1} {
		p := filepath.Join(dir, "d", string(rune('a'+i))+".txt")
		os.MkdirAll(filepath.Dir(p), 0o755)
		b := textFile(1<<10, "test", needle)
		if len(b) < 1<<10 || len(b) > 1<<10+100 {
			t.Errorf("textFile(1KiB) is %d bytes", len(b))
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n, err := localGrep(dir, regexp.MustCompile(grepPattern))
	if err != nil || n != 2 {
		t.Errorf("localGrep = %d, %v; want 2 matches", n, err)
	}
}

func TestRenderReportsRatios(t *testing.T) {
	b := &bench{c: config{runs: 3, calls: 10, files: 1000}, matches: 100,
		read: []sample{{gw: 10 * time.Millisecond, local: time.Millisecond}, {gw: 20 * time.Millisecond, local: time.Millisecond}, {gw: 40 * time.Millisecond, local: time.Millisecond}},
		grep: []sample{{gw: 100 * time.Millisecond, local: 50 * time.Millisecond}, {gw: 100 * time.Millisecond, local: 50 * time.Millisecond}, {gw: 100 * time.Millisecond, local: 50 * time.Millisecond}}}
	r := b.render(time.Second)
	if r.readRatio != 0.05 || r.grepRatio != 0.5 {
		t.Errorf("ratios %v %v, want 0.05 and 0.5", r.readRatio, r.grepRatio)
	}
	if !strings.Contains(r.text, "| Read of a 10 KB file | 500 (250–1000) calls/s |") {
		t.Errorf("report:\n%s", r.text)
	}
	if err := r.check(config{minRead: 0.1}); err == nil || !strings.Contains(err.Error(), "Read") {
		t.Errorf("check(min-read 0.1) = %v, want a Read failure", err)
	}
	if err := r.check(config{minRead: 0.01, minGrep: 0.4}); err != nil {
		t.Errorf("check within the limits = %v", err)
	}
}
