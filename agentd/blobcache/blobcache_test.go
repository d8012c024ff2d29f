package blobcache

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rodon-compute/rodon/internal/manifest"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// blobServer serves blobs by digest at /v1/blobs/{digest} on loopback,
// counting requests and the most served at once.
type blobServer struct {
	*httptest.Server
	mu    sync.Mutex
	blobs map[string][]byte
	// lie, if set, serves other bytes than asked for.
	lie     map[string][]byte
	delay   time.Duration
	gets    map[string]int
	now     atomic.Int32
	maxSeen atomic.Int32
}

func newBlobServer(t *testing.T) *blobServer {
	s := &blobServer{blobs: map[string][]byte{}, lie: map[string][]byte{}, gets: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.now.Add(1)
		defer s.now.Add(-1)
		for {
			m := s.maxSeen.Load()
			if n <= m || s.maxSeen.CompareAndSwap(m, n) {
				break
			}
		}
		d := strings.TrimPrefix(r.URL.Path, "/v1/blobs/")
		s.mu.Lock()
		s.gets[d]++
		b, ok := s.blobs[d]
		if l, lie := s.lie[d]; lie {
			b, ok = l, true
		}
		delay := s.delay
		s.mu.Unlock()
		time.Sleep(delay)
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *blobServer) add(content string) Blob {
	d := manifest.Digest([]byte(content))
	s.mu.Lock()
	s.blobs[d] = []byte(content)
	s.mu.Unlock()
	return Blob{Digest: d, Size: int64(len(content)), URL: s.URL + "/v1/blobs/" + d}
}

func (s *blobServer) count(d string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets[d]
}

func newTestCache(t *testing.T, max int64) (*Cache, Metrics) {
	t.Helper()
	m := Metrics{
		FetchedBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "fetched"}),
		Hits:         prometheus.NewCounter(prometheus.CounterOpts{Name: "hits"}),
		Misses:       prometheus.NewCounter(prometheus.CounterOpts{Name: "misses"}),
		Bytes:        prometheus.NewGauge(prometheus.GaugeOpts{Name: "bytes"}),
	}
	c, err := New(Config{Dir: filepath.Join(t.TempDir(), "cache"), MaxBytes: max, Metrics: m}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Load(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { noTemps(t, c) })
	return c, m
}

// noTemps fails t if a temporary file is left in the cache.
func noTemps(t *testing.T, c *Cache) {
	t.Helper()
	filepath.WalkDir(c.Dir(), func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), tmpPrefix) {
			t.Errorf("temporary file left in the cache: %s", p)
		}
		return nil
	})
}

func TestGetFetchesAndVerifies(t *testing.T) {
	srv := newBlobServer(t)
	c, m := newTestCache(t, 1<<20)
	a, b := srv.add("alpha"), srv.add("beta")
	release, err := c.Get(t.Context(), []Blob{a, b})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	for _, x := range []Blob{a, b} {
		fi, err := os.Stat(c.Path(x.Digest))
		if err != nil || fi.Mode().Perm() != 0o444 || fi.Size() != x.Size {
			t.Errorf("cached %s: %v, %v; want a file of %d bytes, mode 0444", x.Digest, fi, err, x.Size)
		}
	}
	if got := value(m.FetchedBytes); got != 9 {
		t.Errorf("fetched bytes = %v, want 9", got)
	}
	release2, err := c.Get(t.Context(), []Blob{a})
	if err != nil {
		t.Fatal(err)
	}
	release2()
	if hits, misses := value(m.Hits), value(m.Misses); hits != 1 || misses != 2 {
		t.Errorf("hits, misses = %v, %v; want 1, 2", hits, misses)
	}
	if n := srv.count(a.Digest); n != 1 {
		t.Errorf("blob a fetched %d times, want once", n)
	}
}

// TestGetRefusesAWrongBlob: bytes that do not hash to the digest asked
// for, or are not of its size, are not stored.
func TestGetRefusesAWrongBlob(t *testing.T) {
	srv := newBlobServer(t)
	c, _ := newTestCache(t, 1<<20)
	good := srv.add("the real content")
	srv.lie[good.Digest] = []byte("something else")
	short := srv.add("twelve bytes")
	short.Size = 13
	long := srv.add("a longer blob than said")
	long.Size = 5
	for name, b := range map[string]Blob{"wrong bytes": good, "short": short, "long": long} {
		_, err := c.Get(t.Context(), []Blob{b})
		if !errors.Is(err, ErrVerify) {
			t.Errorf("%s: Get = %v, want ErrVerify", name, err)
		}
		if c.Has(b.Digest) {
			t.Errorf("%s: the blob is in the cache", name)
		}
		if _, err := os.Stat(c.Path(b.Digest)); err == nil {
			t.Errorf("%s: a file is at %s", name, c.Path(b.Digest))
		}
	}
	missing := Blob{Digest: manifest.Digest([]byte("nowhere")), Size: 7, URL: srv.URL + "/v1/blobs/nope"}
	if _, err := c.Get(t.Context(), []Blob{missing}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("Get of a missing blob = %v, want the 404", err)
	}
}

// TestGetFetchesOnce: many callers asking for one blob at once fetch it
// once, and no more than Parallel fetches run at a time.
func TestGetFetchesOnce(t *testing.T) {
	srv := newBlobServer(t)
	srv.delay = 50 * time.Millisecond
	c, _ := newTestCache(t, 1<<20)
	one := srv.add("shared")
	var many []Blob
	for i := range 12 {
		many = append(many, srv.add(fmt.Sprintf("blob %d", i)))
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			release, err := c.Get(context.Background(), append([]Blob{one}, many...))
			if err != nil {
				t.Error(err)
				return
			}
			release()
		})
	}
	wg.Wait()
	if n := srv.count(one.Digest); n != 1 {
		t.Errorf("one blob asked for by 10 callers at once fetched %d times, want once", n)
	}
	for _, b := range many {
		if n := srv.count(b.Digest); n != 1 {
			t.Errorf("blob %s fetched %d times, want once", b.Digest, n)
		}
	}
	if m := srv.maxSeen.Load(); m > DefaultParallel {
		t.Errorf("%d fetches ran at once, want at most %d", m, DefaultParallel)
	}
}

// TestEviction: past its bound the cache removes the least recently used
// blobs, never a pinned one.
func TestEviction(t *testing.T) {
	srv := newBlobServer(t)
	c, m := newTestCache(t, 10)
	a, b, cc := srv.add("aaaa"), srv.add("bbbb"), srv.add("cccc")
	relA, err := c.Get(t.Context(), []Blob{a})
	if err != nil {
		t.Fatal(err)
	}
	relB, err := c.Get(t.Context(), []Blob{b})
	if err != nil {
		t.Fatal(err)
	}
	relC, err := c.Get(t.Context(), []Blob{cc})
	if err != nil {
		t.Fatal(err)
	}
	// 12 bytes, all pinned: all kept.
	for _, x := range []Blob{a, b, cc} {
		if !c.Has(x.Digest) {
			t.Errorf("pinned blob %s evicted", x.Digest)
		}
	}
	relB()
	relC()
	// b and c are free; a, the oldest, is pinned: b goes.
	if !c.Has(a.Digest) || c.Has(b.Digest) || !c.Has(cc.Digest) {
		t.Errorf("after releasing b and c: has a %v b %v c %v; want a and c", c.Has(a.Digest), c.Has(b.Digest), c.Has(cc.Digest))
	}
	relA()
	if got := value(m.Bytes); got > 10 {
		t.Errorf("cache holds %v bytes, bound 10", got)
	}
	if _, err := os.Stat(c.Path(b.Digest)); err == nil {
		t.Error("evicted blob's file is still there")
	}
	// A blob larger than the whole cache is fetched, held while pinned,
	// and gone once released.
	big := srv.add("a blob of more than ten bytes")
	rel, err := c.Get(t.Context(), []Blob{big})
	if err != nil || !c.Has(big.Digest) {
		t.Fatalf("Get(big) = %v, has %v", err, c.Has(big.Digest))
	}
	rel()
	if c.Has(big.Digest) {
		t.Error("a released blob larger than the cache stayed")
	}
}

// TestAddPutLoad: files and bytes added are cached under their digest; a
// cache loaded again finds them, and removes what a crash left.
func TestAddPutLoad(t *testing.T) {
	c, _ := newTestCache(t, 1<<20)
	f := filepath.Join(c.Dir(), "result-file")
	if err := os.WriteFile(f, []byte("made by a step"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, size, rel, err := c.Add(f)
	if err != nil {
		t.Fatal(err)
	}
	rel()
	if d != manifest.Digest([]byte("made by a step")) || size != 14 || !c.Has(d) {
		t.Errorf("Add = %s, %d; has %v", d, size, c.Has(d))
	}
	if _, err := os.Stat(f); err == nil {
		t.Error("the added file is still at its old path")
	}
	md, rel2, err := c.Put([]byte(`{"entries":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	rel2()
	os.WriteFile(filepath.Join(c.Dir(), tmpPrefix+"crashed"), []byte("x"), 0o600)
	again, err := New(Config{Dir: c.Dir()}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Load(); err != nil {
		t.Fatal(err)
	}
	if !again.Has(d) || !again.Has(md) {
		t.Errorf("a loaded cache has %v %v; want both blobs", again.Has(d), again.Has(md))
	}
}

// value reads a counter's or a gauge's value.
func value(c prometheus.Collector) float64 {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 {
		panic(fmt.Sprint(mfs, err))
	}
	m := mfs[0].GetMetric()[0]
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return m.GetGauge().GetValue()
}
