package relay

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// TestMemoryBounded relays a step that writes 200 MB, as fast as it can,
// to a browser that reads slower: the relay keeps no more than a frame in
// hand, so the heap of the whole process (agent, relay and browser) grows
// by far less than the output.
func TestMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("relays 200 MB")
	}
	const (
		total     = 200 << 20
		chunk     = 1 << 20
		maxGrowth = 64 << 20
		// The browser pauses a millisecond every pause bytes.
		pause = 64 << 10
	)
	e := newEnv(t, envOptions{quiet: true})
	lg := e.create("big")

	rng := rand.New(rand.NewPCG(5, 6))
	block := make([]byte, chunk)
	for i := range block {
		block[i] = byte(' ' + rng.IntN(95)) // printable ASCII
	}

	start := time.Now()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseInuse, baseAlloc := ms.HeapInuse, ms.HeapAlloc

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var maxInuse, maxAlloc uint64
	var samples int
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			maxInuse, maxAlloc = max(maxInuse, ms.HeapInuse), max(maxAlloc, ms.HeapAlloc)
			samples++
		}
	})
	var writeErr error
	var wrote time.Duration // when the step was done writing
	wg.Go(func() {
		defer func() { wrote = time.Since(start) }()
		for written := 0; written < total; written += chunk {
			if _, err := lg.Stdout().Write(block); err != nil {
				writeErr = err
				return
			}
		}
		writeErr = lg.Exit(cluster.ExitRecord{State: cluster.StateExited, TerminatedBy: cluster.ByExit})
	})

	conn := dial(t, e.wsURL("big", ""))
	h := sha256.New()
	var buf bytes.Buffer
	var frames, received, sinceSleep int
	var last []byte
	var ce *websocket.CloseError
	for {
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		kind, rd, err := conn.NextReader()
		if err != nil {
			if !errors.As(err, &ce) {
				t.Fatalf("read after %d frames: %v", frames, err)
			}
			break
		}
		buf.Reset()
		if _, err := buf.ReadFrom(rd); err != nil || kind != websocket.TextMessage {
			t.Fatalf("read frame %d: kind %d, %v", frames+1, kind, err)
		}
		hashFrame(h, buf.Bytes())
		frames++
		received += buf.Len()
		last = append(last[:0], buf.Bytes()...)
		if sinceSleep += buf.Len(); sinceSleep >= pause {
			sinceSleep = 0
			time.Sleep(time.Millisecond)
		}
	}
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()
	if writeErr != nil {
		t.Fatalf("write output: %v", writeErr)
	}

	if ce.Code != websocket.CloseNormalClosure {
		t.Errorf("close = %v, want %d", ce, websocket.CloseNormalClosure)
	}
	var f api.Frame
	if err := json.Unmarshal(last, &f); err != nil || f.Kind != api.KindExit {
		t.Errorf("last frame %.200s (%v), want the exit frame", last, err)
	}
	want, n := logHash(t, e.logs, "big")
	if !bytes.Equal(h.Sum(nil), want) || frames != n {
		t.Errorf("the %d frames relayed differ from the log's %d", frames, n)
	}
	// Output frames carry at most logstore's MaxFrameData: 32 KiB.
	if wantN := total/(32<<10) + 1; n != wantN {
		t.Errorf("the log holds %d frames, want %d", n, wantN)
	}

	growInuse, growAlloc := int64(maxInuse)-int64(baseInuse), int64(maxAlloc)-int64(baseAlloc)
	mb := func(n int64) float64 { return float64(n) / (1 << 20) }
	t.Logf("relayed %d frames, %.0f MB of frames (%d MB of output) in %v: %.0f MB/s (of frames) to a browser pausing 1 ms every %d KiB",
		frames, mb(int64(received)), total>>20, elapsed.Round(time.Millisecond), mb(int64(received))/elapsed.Seconds(), pause>>10)
	t.Logf("the step was done writing after %v: the output waited on the node's disk, not in the relay", wrote.Round(time.Millisecond))
	t.Logf("heap growth over %d samples after GC: in use %+.1f MB, allocated %+.1f MB (limit %d MB)",
		samples, mb(growInuse), mb(growAlloc), maxGrowth>>20)
	if samples < 3 {
		t.Errorf("only %d heap samples; the transfer was too fast to watch", samples)
	}
	if growInuse > maxGrowth || growAlloc > maxGrowth {
		t.Errorf("heap grew by %.1f MB in use, %.1f MB allocated; want under %d MB", mb(growInuse), mb(growAlloc), maxGrowth>>20)
	}
}

// hashFrame adds one frame, with its length, to h.
func hashFrame(h hash.Hash, b []byte) {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
	h.Write(n[:])
	h.Write(b)
}

// logHash hashes the frames of id's log as hashFrame does, reading the log
// from disk one frame at a time, and counts them.
func logHash(t *testing.T, logs *logstore.Store, id cluster.StepID) (sum []byte, frames int) {
	t.Helper()
	r, err := logs.Open(id, logstore.ReadOptions{})
	if err != nil {
		t.Fatalf("Open(%s) = %v", id, err)
	}
	defer r.Close()
	h := sha256.New()
	for {
		b, err := r.NextJSON(t.Context())
		if errors.Is(err, io.EOF) {
			return h.Sum(nil), frames
		}
		if err != nil {
			t.Fatal(err)
		}
		hashFrame(h, b)
		frames++
	}
}
