package logstore

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// diskUse returns what the store's files take on disk.
func diskUse(t *testing.T, s *Store) int64 {
	t.Helper()
	var n int64
	ents, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err == nil {
			n += fi.Size()
		}
	}
	return n
}

// TestCoalescing writes 100,000 one-byte writes, as a step printing one
// character at a time does, and compares the disk the log takes with and
// without coalescing (issue 15: 11 MB without).
func TestCoalescing(t *testing.T) {
	const writes = 100000
	measure := func(delay, pause time.Duration) (int64, int) {
		s := newTestStore(t, func(c *Config) { c.FlushDelay = delay })
		lg := mustCreate(t, s, "tiny")
		for i := range writes {
			mustWrite(t, lg.Stdout(), []byte{'a' + byte(i%26)})
			if pause > 0 && i%100 == 0 {
				time.Sleep(pause)
			}
		}
		if err := lg.Exit(exitRecord("tiny", 0)); err != nil {
			t.Fatal(err)
		}
		frames := readAll(t, t.Context(), mustOpen(t, s, "tiny", ReadOptions{}))
		if got := output(t, frames, api.KindStdout); len(got) != writes || got[0] != 'a' || got[writes-1] != 'a'+byte((writes-1)%26) {
			t.Fatalf("output = %d bytes, want the %d written", len(got), writes)
		}
		return diskUse(t, s), len(frames)
	}
	before, nb := measure(0, 0)
	after, na := measure(DefaultFlushDelay, 0)
	// A slower writer: 100 bytes per millisecond, as through a pipe.
	slow, ns := measure(DefaultFlushDelay, time.Millisecond)
	t.Logf("100,000 one-byte writes: %d bytes on disk in %d frames without coalescing, %d bytes in %d frames with (%d bytes in %d frames at 100 bytes/ms)",
		before, nb, after, na, slow, ns)
	if before < 5<<20 {
		t.Errorf("without coalescing the log took %d bytes, want the old cost of about 100 bytes a write", before)
	}
	if after > 4*writes || slow > 4*writes {
		t.Errorf("with coalescing the log took %d (fast writer) and %d (slow writer) bytes, want under 4 bytes a written byte", after, slow)
	}
}

// TestCoalescingKeepsOrder: output of stdout and stderr and events stay in
// the order written, although small writes wait to be coalesced.
func TestCoalescingKeepsOrder(t *testing.T) {
	s := newTestStore(t, func(c *Config) { c.FlushDelay = MaxFlushDelay })
	lg := mustCreate(t, s, "order")
	mustWrite(t, lg.Stdout(), []byte("one "))
	mustWrite(t, lg.Stdout(), []byte("two "))
	mustWrite(t, lg.Stderr(), []byte("three "))
	if err := lg.Event(cluster.Event{Kind: "warning", Message: "four"}); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, lg.Stdout(), []byte("five"))
	if err := lg.Exit(exitRecord("order", 0)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range readAll(t, t.Context(), mustOpen(t, s, "order", ReadOptions{})) {
		switch f.Kind {
		case api.KindStdout, api.KindStderr:
			p, _ := f.Output()
			got = append(got, string(f.Kind)+":"+string(p))
		default:
			got = append(got, string(f.Kind))
		}
	}
	want := []string{"stdout:one two ", "stderr:three ", "event", "stdout:five", "exit"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("frames = %q, want %q", got, want)
	}
}

// TestCoalescingLive: a follower sees output within about FlushDelay of
// its write, without any other write pushing it out.
func TestCoalescingLive(t *testing.T) {
	s := newTestStore(t, func(c *Config) { c.FlushDelay = 20 * time.Millisecond })
	lg := mustCreate(t, s, "live")
	r := mustOpen(t, s, "live", ReadOptions{Follow: true})
	start := time.Now()
	mustWrite(t, lg.Stdout(), []byte("$ "))
	f, err := r.Next(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := f.Output(); string(p) != "$ " {
		t.Errorf("first frame %q, want the prompt", p)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("prompt reached the follower after %v, want about the flush delay", d)
	}
}

// TestOutputCap writes 20 MiB into a log capped at 256 KiB: the log keeps
// the first 128 KiB as written and at least the last 64 KiB of it, an
// output_truncated event between them counts exactly what was dropped,
// and the disk never holds much more than the cap, while writing or after.
func TestOutputCap(t *testing.T) {
	const capBytes = 256 << 10
	s := newTestStore(t, func(c *Config) { c.FlushDelay = DefaultFlushDelay })
	lg, err := s.CreateLimited("capped", capBytes)
	if err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	maxDisk := int64(0)
	for i := 0; all.Len() < 20<<20; i++ {
		line := fmt.Appendf(nil, "line %08d of a step that prints forever\n", i)
		all.Write(line)
		mustWrite(t, lg.Stdout(), line)
		if i%1000 == 0 {
			maxDisk = max(maxDisk, diskUse(t, s))
		}
	}
	ev, truncated, err := lg.Finish()
	if err != nil || !truncated {
		t.Fatalf("Finish() = %+v, %v, %v; want an output_truncated event", ev, truncated, err)
	}
	if err := lg.Exit(exitRecord("capped", 0)); err != nil {
		t.Fatal(err)
	}
	maxDisk = max(maxDisk, diskUse(t, s))
	frames := readAll(t, t.Context(), mustOpen(t, s, "capped", ReadOptions{}))
	checkSeqs(t, frames, 0)
	kept := output(t, frames, api.KindStdout)
	in := all.Bytes()
	if len(kept) > capBytes {
		t.Errorf("log kept %d bytes of output, want at most the cap %d", len(kept), capBytes)
	}
	head := capBytes / 2
	if !bytes.Equal(kept[:head], in[:head]) {
		t.Errorf("the first %d bytes kept are not the first written", head)
	}
	tailKept := kept[head:]
	if len(tailKept) < capBytes/4 || !bytes.HasSuffix(in, tailKept) {
		t.Errorf("the %d bytes kept after the head are not the last written (want at least %d of them)", len(tailKept), capBytes/4)
	}
	truncs := api.EventsOf(frames, cluster.EventOutputTruncated)
	if len(truncs) != 1 || truncs[0].Output == nil || truncs[0].Output.DroppedBytes != int64(len(in)-len(kept)) || !reflect.DeepEqual(truncs[0], api.Event(ev)) {
		t.Errorf("output_truncated events %+v (Finish: %+v), want one with dropped_bytes %d", truncs, ev, len(in)-len(kept))
	}
	if w := api.EventsOf(frames, cluster.EventWarning); len(w) != 1 || !strings.Contains(w[0].Message, "held back") {
		t.Errorf("warning events %+v, want one saying output is held back", w)
	}
	t.Logf("20 MiB written, cap %d: kept %d, dropped %d; disk at most %d bytes while writing, %d after", capBytes, len(kept), truncs[0].Output.DroppedBytes, maxDisk, diskUse(t, s))
	if maxDisk > 2*capBytes {
		t.Errorf("the log took %d bytes of disk, want under twice its cap", maxDisk)
	}
	if m, _ := filepath.Glob(filepath.Join(s.cfg.Dir, "*"+tailSuffix+"*")); len(m) > 0 {
		t.Errorf("tail segments left after Exit: %v", m)
	}
}

// TestOutputCapBothStreams: with stdout and stderr interleaved past the
// cap, what is kept of each is in order and the counts add up.
func TestOutputCapBothStreams(t *testing.T) {
	const capBytes = 64 << 10
	s := newTestStore(t, func(c *Config) { c.FlushDelay = 0; c.MaxFrameData = 1000 })
	lg, err := s.CreateLimited("both", capBytes)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for i := range 20000 {
		w := lg.Stdout()
		if i%3 == 0 {
			w = lg.Stderr()
		}
		line := fmt.Appendf(nil, "%06d\n", i)
		total += int64(len(line))
		mustWrite(t, w, line)
	}
	if err := lg.Exit(exitRecord("both", 0)); err != nil {
		t.Fatal(err)
	}
	frames := readAll(t, t.Context(), mustOpen(t, s, "both", ReadOptions{}))
	kept := int64(len(output(t, frames, api.KindStdout)) + len(output(t, frames, api.KindStderr)))
	truncs := api.EventsOf(frames, cluster.EventOutputTruncated)
	if kept > capBytes || len(truncs) != 1 || truncs[0].Output == nil || truncs[0].Output.DroppedBytes+kept != total {
		t.Errorf("kept %d of %d bytes, events %+v; want at most %d kept and the dropped bytes counted", kept, total, truncs, capBytes)
	}
	for _, kind := range []api.FrameKind{api.KindStdout, api.KindStderr} {
		prev := -1
		for _, l := range strings.Fields(string(output(t, frames, kind))) {
			if len(l) != 6 {
				continue // the part of a line where the tail starts
			}
			n, _ := strconv.Atoi(l)
			if n <= prev {
				t.Fatalf("%s: line %d after %d: out of order", kind, n, prev)
			}
			prev = n
		}
	}
}

// TestOutputUnderCap: output past the head but within the cap is all kept,
// in order, and no output_truncated event says otherwise.
func TestOutputUnderCap(t *testing.T) {
	const capBytes = 128 << 10
	s := newTestStore(t, nil)
	lg, err := s.CreateLimited("under", capBytes)
	if err != nil {
		t.Fatal(err)
	}
	in := bytes.Repeat([]byte("0123456789abcdé\n"), 100<<10/17)
	for b := in; len(b) > 0; {
		n := min(len(b), 1000)
		mustWrite(t, lg.Stdout(), b[:n])
		b = b[n:]
	}
	if _, truncated, err := lg.Finish(); err != nil || truncated {
		t.Fatalf("Finish() = %v, %v; want nothing dropped", truncated, err)
	}
	if err := lg.Exit(exitRecord("under", 0)); err != nil {
		t.Fatal(err)
	}
	frames := readAll(t, t.Context(), mustOpen(t, s, "under", ReadOptions{}))
	if got := output(t, frames, api.KindStdout); !bytes.Equal(got, in) {
		t.Errorf("kept %d bytes, want all %d written", len(got), len(in))
	}
	if e := api.EventsOf(frames, cluster.EventOutputTruncated); len(e) != 0 {
		t.Errorf("output_truncated events %+v, want none", e)
	}
	for _, f := range frames {
		if f.Encoding != "" {
			t.Errorf("frame %d is %s: the tail split a character", f.Seq, f.Encoding)
		}
	}
}

// TestCloseKeepsTail: a log closed (not ended) with output held back
// appends it, so that nothing kept is lost when the agent stops.
func TestCloseKeepsTail(t *testing.T) {
	s := newTestStore(t, nil)
	lg, err := s.CreateLimited("closed", MinOutputBytes)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, lg.Stdout(), bytes.Repeat([]byte("x"), 1<<20))
	mustWrite(t, lg.Stdout(), []byte("the end\n"))
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	frames := readAll(t, t.Context(), mustOpen(t, s, "closed", ReadOptions{}))
	if got := output(t, frames, api.KindStdout); !bytes.HasSuffix(got, []byte("the end\n")) || int64(len(got)) > MinOutputBytes {
		t.Errorf("after Close the log kept %d bytes ending %q, want at most %d ending with the last line", len(got), got[max(0, len(got)-8):], MinOutputBytes)
	}
}

func TestConfigLimits(t *testing.T) {
	d := DefaultConfig()
	if d.Retention != 7*24*time.Hour || d.OutputBytes != cluster.DefaultLimits.OutputBytes || d.Budget != 16<<30 || d.FlushDelay != 25*time.Millisecond {
		t.Errorf("DefaultConfig() = %+v, want 7 days' retention, the default output cap, a 16 GiB budget and a 25 ms flush delay", d)
	}
	for _, tt := range []struct {
		name string
		edit func(*Config)
	}{
		{"flush delay past its maximum", func(c *Config) { c.FlushDelay = MaxFlushDelay + 1 }},
		{"negative flush delay", func(c *Config) { c.FlushDelay = -1 }},
		{"output cap below the minimum", func(c *Config) { c.OutputBytes = MinOutputBytes - 1 }},
		{"no budget", func(c *Config) { c.Budget = 0 }},
	} {
		cfg := DefaultConfig()
		cfg.Dir = t.TempDir()
		tt.edit(&cfg)
		if _, err := New(cfg, testLogger(t)); err == nil {
			t.Errorf("New(%s) = nil error, want one", tt.name)
		}
	}
	s := newTestStore(t, nil)
	if _, err := s.CreateLimited("small", MinOutputBytes-1); err == nil {
		t.Errorf("CreateLimited(below the minimum cap) = nil error, want one")
	}
}
