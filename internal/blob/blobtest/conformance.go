// Package blobtest holds what tests of blob stores share: Conformance, the
// suite every blob.Store implementation passes, and StartS3, a real S3
// server (SeaweedFS) on loopback for the S3 store's tests and for tests of
// components that run against S3.
package blobtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/internal/blob"
)

// Options says what Conformance may rely on besides the Store.
type Options struct {
	// Client reaches the store's presigned URLs (nil: http.DefaultClient).
	Client *http.Client
	// PutChecksBytes: a presigned PUT refuses bytes that are not those of
	// its URL (Local). Without it (S3) the PUT may succeed, and Verify must
	// then report ErrDigest and remove the object.
	PutChecksBytes bool
}

// Conformance runs the suite every blob.Store passes against s. The blobs
// it writes are random, so s may hold others and serve several runs.
func Conformance(t *testing.T, s blob.Store, opt Options) {
	if opt.Client == nil {
		opt.Client = http.DefaultClient
	}
	c := &suite{s: s, opt: opt}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"PutStatOpenRange", c.putStatOpenRange},
		{"Absent", c.absent},
		{"RePutIsNoop", c.rePutIsNoop},
		{"WrongDigestRefused", c.wrongDigest},
		{"SizeMismatchRefused", c.sizeMismatch},
		{"MalformedDigestRefused", c.malformedDigest},
		{"PutUnknown", c.putUnknown},
		{"ConcurrentPuts", c.concurrentPuts},
		{"PresignedGet", c.presignedGet},
		{"PresignedPut", c.presignedPut},
		{"PresignedPutWrongBytes", c.presignedPutWrongBytes},
		{"PresignedURLExpires", c.expired},
		{"PresignedURLAltered", c.altered},
		{"GetURLCannotPut", c.getCannotPut},
		{"URLForACannotReadB", c.aCannotReadB},
		{"Streaming256MiB", c.streaming},
	} {
		t.Run(tc.name, tc.fn)
	}
}

type suite struct {
	s   blob.Store
	opt Options
}

// Random returns n random bytes and their digest.
func Random(t testing.TB, n int) ([]byte, string) {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	return b, Digest(b)
}

// Digest is the SHA-256 of b in hex.
func Digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func (c *suite) put(t *testing.T, n int) ([]byte, string) {
	t.Helper()
	b, d := Random(t, n)
	if err := c.s.Put(t.Context(), d, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatalf("Put(%d bytes) = %v", n, err)
	}
	return b, d
}

func (c *suite) read(t *testing.T, d string) []byte {
	t.Helper()
	r, size, err := c.s.Open(t.Context(), d)
	if err != nil {
		t.Fatalf("Open(%s) = %v", d, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s: %v", d, err)
	}
	if int64(len(b)) != size {
		t.Errorf("Open(%s) size %d, read %d bytes", d, size, len(b))
	}
	return b
}

func (c *suite) absentNow(t *testing.T, d, what string) {
	t.Helper()
	if _, err := c.s.Stat(t.Context(), d); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("after %s: Stat = %v, want ErrNotFound", what, err)
	}
}

func (c *suite) putStatOpenRange(t *testing.T) {
	for _, n := range []int{0, 1, 100, 1 << 20} {
		b, d := c.put(t, n)
		if size, err := c.s.Stat(t.Context(), d); err != nil || size != int64(n) {
			t.Errorf("Stat(%d bytes) = %d, %v, want %d", n, size, err, n)
		}
		if got := c.read(t, d); !bytes.Equal(got, b) {
			t.Errorf("Open(%d bytes) read %d other bytes", n, len(got))
		}
		if err := c.s.Verify(t.Context(), d); err != nil {
			t.Errorf("Verify(%d bytes) = %v", n, err)
		}
		if n < 100 {
			continue
		}
		r, _, err := c.s.Open(t.Context(), d)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Seek(50, io.SeekStart); err != nil {
			t.Fatalf("Seek(50) = %v", err)
		}
		got := make([]byte, 20)
		if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, b[50:70]) {
			t.Errorf("read 20 bytes at 50 = %x, %v, want %x", got, err, b[50:70])
		}
		if end, err := r.Seek(0, io.SeekEnd); err != nil || end != int64(n) {
			t.Errorf("Seek(0, end) = %d, %v, want %d", end, err, n)
		}
		r.Close()
	}
}

func (c *suite) absent(t *testing.T) {
	_, d := Random(t, 10)
	if _, err := c.s.Stat(t.Context(), d); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Stat(absent) = %v, want ErrNotFound", err)
	}
	if r, _, err := c.s.Open(t.Context(), d); !errors.Is(err, blob.ErrNotFound) {
		if err == nil {
			r.Close()
		}
		t.Errorf("Open(absent) = %v, want ErrNotFound", err)
	}
	if err := c.s.Verify(t.Context(), d); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Verify(absent) = %v, want ErrNotFound", err)
	}
}

// failReader fails the test that reads it.
type failReader struct{ t *testing.T }

func (f failReader) Read([]byte) (int, error) {
	f.t.Error("Put of a present blob read its bytes")
	return 0, errors.New("must not be read")
}

func (c *suite) rePutIsNoop(t *testing.T) {
	b, d := c.put(t, 1000)
	if err := c.s.Put(t.Context(), d, failReader{t}, int64(len(b))); err != nil {
		t.Errorf("Put(present) = %v", err)
	}
	if err := c.s.Put(t.Context(), d, failReader{t}, -1); err != nil {
		t.Errorf("Put(present, size -1) = %v", err)
	}
	if got := c.read(t, d); !bytes.Equal(got, b) {
		t.Error("blob changed by a second Put")
	}
}

func (c *suite) wrongDigest(t *testing.T) {
	_, d := Random(t, 100)
	other, _ := Random(t, 100)
	for _, size := range []int64{100, -1} {
		err := c.s.Put(t.Context(), d, bytes.NewReader(other), size)
		if !errors.Is(err, blob.ErrDigest) {
			t.Errorf("Put(other bytes, size %d) = %v, want ErrDigest", size, err)
		}
		c.absentNow(t, d, "a refused Put")
	}
}

func (c *suite) sizeMismatch(t *testing.T) {
	b, d := Random(t, 100)
	for _, size := range []int64{99, 101, 0} {
		err := c.s.Put(t.Context(), d, bytes.NewReader(b), size)
		if !errors.Is(err, blob.ErrDigest) {
			t.Errorf("Put(100 bytes, size %d) = %v, want ErrDigest", size, err)
		}
		c.absentNow(t, d, fmt.Sprintf("a Put of size %d", size))
	}
}

// Malformed are digests every store refuses with ErrDigest.
var Malformed = []string{
	"",
	"../../../../etc/passwd",
	"../" + strings.Repeat("a", 61),
	strings.Repeat("A", 64),
	strings.Repeat("a", 63),
	strings.Repeat("a", 65),
	strings.Repeat("a", 62) + "/a",
	strings.Repeat("g", 64),
}

func (c *suite) malformedDigest(t *testing.T) {
	ctx := t.Context()
	for _, d := range Malformed {
		if err := c.s.Put(ctx, d, strings.NewReader("x"), 1); !errors.Is(err, blob.ErrDigest) {
			t.Errorf("Put(%q) = %v, want ErrDigest", d, err)
		}
		if _, err := c.s.Stat(ctx, d); !errors.Is(err, blob.ErrDigest) {
			t.Errorf("Stat(%q) = %v, want ErrDigest", d, err)
		}
		if _, _, err := c.s.Open(ctx, d); !errors.Is(err, blob.ErrDigest) {
			t.Errorf("Open(%q) = %v, want ErrDigest", d, err)
		}
		if _, err := c.s.PresignGet(ctx, d, time.Minute); !errors.Is(err, blob.ErrDigest) {
			t.Errorf("PresignGet(%q) = %v, want ErrDigest", d, err)
		}
		if _, err := c.s.PresignPut(ctx, d, 1, time.Minute); !errors.Is(err, blob.ErrDigest) {
			t.Errorf("PresignPut(%q) = %v, want ErrDigest", d, err)
		}
	}
}

func (c *suite) putUnknown(t *testing.T) {
	b, d := Random(t, 5000)
	gd, size, err := c.s.PutUnknown(t.Context(), bytes.NewReader(b), 5000)
	if err != nil || gd != d || size != 5000 {
		t.Fatalf("PutUnknown(5000 bytes, max 5000) = %s, %d, %v, want %s, 5000", gd, size, err, d)
	}
	if got := c.read(t, d); !bytes.Equal(got, b) {
		t.Error("PutUnknown stored other bytes")
	}
	if gd, _, err := c.s.PutUnknown(t.Context(), bytes.NewReader(b), 5000); err != nil || gd != d {
		t.Errorf("PutUnknown(present) = %s, %v", gd, err)
	}
	over, od := Random(t, 5001)
	if _, _, err := c.s.PutUnknown(t.Context(), bytes.NewReader(over), 5000); !errors.Is(err, blob.ErrTooLarge) {
		t.Errorf("PutUnknown(5001 bytes, max 5000) = %v, want ErrTooLarge", err)
	}
	c.absentNow(t, od, "a PutUnknown over its max")
}

func (c *suite) concurrentPuts(t *testing.T) {
	b, d := Random(t, 256<<10)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = c.s.Put(t.Context(), d, bytes.NewReader(b), int64(len(b))) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Put %d of 8 at once = %v", i, err)
		}
	}
	if got := c.read(t, d); !bytes.Equal(got, b) {
		t.Error("concurrent Puts stored other bytes")
	}
}

// do sends a request to a presigned URL and returns the status and body.
func (c *suite) do(t *testing.T, method, u string, body []byte, header http.Header) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.opt.Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (c *suite) presignGet(t *testing.T, d string, ttl time.Duration) string {
	t.Helper()
	u, err := c.s.PresignGet(t.Context(), d, ttl)
	if err != nil {
		t.Fatalf("PresignGet = %v", err)
	}
	return u
}

func (c *suite) presignPut(t *testing.T, d string, size int64, ttl time.Duration) string {
	t.Helper()
	u, err := c.s.PresignPut(t.Context(), d, size, ttl)
	if err != nil {
		t.Fatalf("PresignPut = %v", err)
	}
	return u
}

func (c *suite) presignedGet(t *testing.T) {
	b, d := c.put(t, 3000)
	u := c.presignGet(t, d, time.Minute)
	if st, got := c.do(t, "GET", u, nil, nil); st != 200 || !bytes.Equal(got, b) {
		t.Errorf("GET presigned = %d and %d bytes, want 200 and the blob's 3000", st, len(got))
	}
	st, got := c.do(t, "GET", u, nil, http.Header{"Range": {"bytes=100-199"}})
	if st != http.StatusPartialContent || !bytes.Equal(got, b[100:200]) {
		t.Errorf("GET presigned, Range 100-199 = %d and %d bytes, want 206 and 100", st, len(got))
	}
	if _, err := c.s.PresignGet(t.Context(), d, blob.MaxTTL+time.Hour); err == nil {
		t.Error("PresignGet(ttl over MaxTTL) succeeded")
	}
}

func (c *suite) presignedPut(t *testing.T) {
	b, d := Random(t, 3000)
	u := c.presignPut(t, d, 3000, time.Minute)
	if st, body := c.do(t, "PUT", u, b, nil); st != 200 && st != 201 && st != 204 {
		t.Fatalf("PUT presigned = %d %s, want 2xx", st, body)
	}
	if err := c.s.Verify(t.Context(), d); err != nil {
		t.Errorf("Verify(after PUT) = %v", err)
	}
	if got := c.read(t, d); !bytes.Equal(got, b) {
		t.Error("presigned PUT stored other bytes")
	}
	if st, body := c.do(t, "PUT", u, b, nil); st/100 != 2 {
		t.Errorf("PUT presigned again = %d %s, want 2xx", st, body)
	}
}

func (c *suite) presignedPutWrongBytes(t *testing.T) {
	_, d := Random(t, 3000)
	other, _ := Random(t, 3000)
	u := c.presignPut(t, d, 3000, time.Minute)
	st, body := c.do(t, "PUT", u, other, nil)
	switch {
	case st/100 == 4:
	case st/100 == 2 && !c.opt.PutChecksBytes:
		if err := c.s.Verify(t.Context(), d); !errors.Is(err, blob.ErrDigest) {
			t.Errorf("Verify(other bytes PUT) = %v, want ErrDigest", err)
		}
	default:
		t.Errorf("PUT presigned of other bytes = %d %s, want 400", st, body)
	}
	c.absentNow(t, d, "a PUT of other bytes")
	if c.opt.PutChecksBytes {
		short := other[:2999]
		if st, body := c.do(t, "PUT", u, short, nil); st != 400 {
			t.Errorf("PUT presigned of 2999 bytes for 3000 = %d %s, want 400", st, body)
		}
		c.absentNow(t, d, "a PUT of too few bytes")
	}
}

func (c *suite) expired(t *testing.T) {
	b, d := c.put(t, 100)
	get := c.presignGet(t, d, time.Second)
	_, pd := Random(t, 100)
	put := c.presignPut(t, pd, 100, time.Second)
	time.Sleep(3 * time.Second)
	if st, _ := c.do(t, "GET", get, nil, nil); st != 403 {
		t.Errorf("GET with an expired URL = %d, want 403", st)
	}
	if st, _ := c.do(t, "PUT", put, b, nil); st != 403 {
		t.Errorf("PUT with an expired URL = %d, want 403", st)
	}
}

// altered returns u with its query parameter k changed, or its signature
// (the last parameter naming one) when k is "".
func alter(t *testing.T, u, k string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	q := p.Query()
	v := q.Get(k)
	switch {
	case v == "":
		v = "1"
	case v[len(v)-1] >= '0' && v[len(v)-1] <= '8':
		v = v[:len(v)-1] + string(v[len(v)-1]+1)
	default:
		v = v[:len(v)-1] + "0"
	}
	q.Set(k, v)
	p.RawQuery = q.Encode()
	return p.String()
}

func (c *suite) altered(t *testing.T) {
	b, d := c.put(t, 100)
	for _, tc := range []struct {
		method string
		u      string
		body   []byte
	}{
		{"GET", c.presignGet(t, d, time.Minute), nil},
		{"PUT", c.presignPut(t, Digest(b[:50]), 50, time.Minute), b[:50]},
	} {
		p, _ := url.Parse(tc.u)
		for k := range p.Query() {
			st, body := c.do(t, tc.method, alter(t, tc.u, k), tc.body, nil)
			if st != 403 && st != 400 {
				t.Errorf("%s with %s altered = %d %s, want 403 (or 400)", tc.method, k, st, body)
			}
		}
	}
	c.absentNow(t, Digest(b[:50]), "PUTs of altered URLs")
}

func (c *suite) getCannotPut(t *testing.T) {
	_, d := c.put(t, 100)
	nb, nd := Random(t, 100)
	if st, _ := c.do(t, "PUT", c.presignGet(t, nd, time.Minute), nb, nil); st != 403 {
		t.Errorf("PUT with a GET URL = %d, want 403", st)
	}
	c.absentNow(t, nd, "a PUT with a GET URL")
	if st, _ := c.do(t, "GET", c.presignPut(t, d, 100, time.Minute), nil, nil); st != 403 {
		t.Errorf("GET with a PUT URL = %d, want 403", st)
	}
}

func (c *suite) aCannotReadB(t *testing.T) {
	_, a := c.put(t, 100)
	_, b := c.put(t, 100)
	u := strings.Replace(c.presignGet(t, a, time.Minute), a, b, 1)
	if st, _ := c.do(t, "GET", u, nil, nil); st != 403 {
		t.Errorf("GET of B with A's URL = %d, want 403", st)
	}
	nb, nd := Random(t, 100)
	u = strings.Replace(c.presignPut(t, a, 100, time.Minute), a, nd, 1)
	if st, _ := c.do(t, "PUT", u, nb, nil); st != 403 {
		t.Errorf("PUT of B with A's URL = %d, want 403", st)
	}
	c.absentNow(t, nd, "a PUT with another blob's URL")
}

// Pattern is a reader of n deterministic, incompressible-looking bytes
// that holds only a small buffer.
type Pattern struct {
	N     int64
	block []byte
	off   int64
}

// NewPattern returns n bytes of a pattern seeded by seed.
func NewPattern(n int64, seed byte) *Pattern {
	block := make([]byte, 1<<20+13) // not a power of two: no aligned repeats
	h := sha256.Sum256([]byte{seed})
	for i := 0; i < len(block); i += 32 {
		copy(block[i:], h[:])
		h = sha256.Sum256(h[:])
	}
	return &Pattern{N: n, block: block}
}

func (p *Pattern) Read(b []byte) (int, error) {
	if p.off >= p.N {
		return 0, io.EOF
	}
	if rem := p.N - p.off; int64(len(b)) > rem {
		b = b[:rem]
	}
	n := 0
	for n < len(b) {
		i := int((p.off + int64(n)) % int64(len(p.block)))
		n += copy(b[n:], p.block[i:])
	}
	p.off += int64(n)
	return n, nil
}

// HeapPeak samples the heap every 10ms while fn runs and returns how far
// it grew above where it was before.
func HeapPeak(fn func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapAlloc, ms.HeapAlloc
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapAlloc)
			}
		}
	})
	fn()
	close(done)
	wg.Wait()
	if peak < base {
		return 0
	}
	return peak - base
}

func (c *suite) streaming(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: -short")
	}
	const n = 256 << 20
	h := sha256.New()
	io.Copy(h, NewPattern(n, 1))
	d := hex.EncodeToString(h.Sum(nil))
	ctx := context.WithoutCancel(t.Context())
	var putErr, getErr error
	grew := HeapPeak(func() {
		if putErr = c.s.Put(ctx, d, NewPattern(n, 1), n); putErr != nil {
			return
		}
		r, size, err := c.s.Open(ctx, d)
		if err != nil {
			getErr = err
			return
		}
		defer r.Close()
		h := sha256.New()
		got, err := io.Copy(h, r)
		switch {
		case err != nil:
			getErr = err
		case got != size || got != n || hex.EncodeToString(h.Sum(nil)) != d:
			getErr = fmt.Errorf("read %d bytes of %d hashing to %x", got, size, h.Sum(nil))
		}
	})
	if putErr != nil || getErr != nil {
		t.Fatalf("Put and Open of 256 MiB = %v, %v", putErr, getErr)
	}
	if grew > n/8 {
		t.Errorf("Put and Open of 256 MiB grew the heap by %d MiB, want at most %d", grew>>20, n/8>>20)
	}
	t.Logf("Put and Open of 256 MiB grew the heap by %.1f MiB", float64(grew)/(1<<20))
}

// Hash is a SHA-256 that reports in hex.
type Hash struct{ hash.Hash }

// NewHash returns an empty Hash.
func NewHash() Hash { return Hash{sha256.New()} }

// Hex is the digest of what was written.
func (h Hash) Hex() string { return hex.EncodeToString(h.Sum(nil)) }
