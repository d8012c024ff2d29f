package logstore

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestMemoryBounded writes 200 MB through the store while a slow reader
// follows, and checks that the heap does not grow with the output: the
// writer goes to disk without waiting for the reader, and the reader holds
// one frame at a time.
func TestMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping 200 MB write in short mode")
	}
	const (
		total     = 200 << 20
		chunk     = 32 << 10
		maxGrowth = 4 << 20
	)
	s := newTestStore(t, nil)
	lg := mustCreate(t, s, "big")
	r := mustOpen(t, s, "big", ReadOptions{Follow: true})
	line := []byte("the quick brown fox jumps over the lazy dog 0123456789\n")
	data := bytes.Repeat(line, chunk/len(line)+1)[:chunk]

	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var m runtime.MemStats
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	var frames, bytesRead atomic.Int64
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			b, err := r.NextJSON(t.Context())
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				t.Errorf("Next() = %v", err)
				return
			}
			bytesRead.Add(int64(len(b)))
			if n := frames.Add(1); n%16 == 0 {
				time.Sleep(time.Millisecond) // a slow client
			}
		}
	}()

	start := time.Now()
	for written := 0; written < total; written += chunk {
		mustWrite(t, lg.Stdout(), data)
	}
	writeTime := time.Since(start)
	lagFrames := total/chunk - frames.Load()
	if err := lg.Exit(exitRecord("big", 0)); err != nil {
		t.Fatal(err)
	}
	<-readerDone
	close(stop)
	wg.Wait()
	growth := int64(peak.Load()) - int64(base.HeapInuse)
	t.Logf("wrote %d MB in %v, reader %d frames behind when the writer finished; read %d MB in %v; heap in use %d kB at start, peak growth %d kB",
		total>>20, writeTime.Round(time.Millisecond), lagFrames, bytesRead.Load()>>20, time.Since(start).Round(time.Millisecond), base.HeapInuse>>10, growth>>10)
	if got, want := frames.Load(), int64(total/chunk+1); got != want {
		t.Errorf("reader read %d frames, want %d", got, want)
	}
	if growth > maxGrowth {
		t.Errorf("heap in use grew by %d kB while writing %d MB, want at most %d kB", growth>>10, total>>20, maxGrowth>>10)
	}
}
