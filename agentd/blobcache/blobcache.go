// Package blobcache is a node's cache of workspace blobs by digest:
// DIR/{aa}/{digest}, each file 0444, fetched by presigned URL (the node
// holds no store credential), streamed to a temporary file while it is
// hashed and renamed into place only once its digest and size are right.
// The cache is bounded: past its size the least recently used blobs are
// removed, never one a running step holds (Get and Add pin what they
// return until the caller releases it). Materialised trees hard-link its
// files, so an unchanged tree costs no copy on the node.
//
// A Cache is safe for concurrent use: the same blob asked for by several
// callers at once is fetched once, and at most Config.Parallel fetches
// run at a time.
package blobcache

import (
	"cmp"
	"container/list"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rodon-compute/rodon/internal/manifest"
)

// DefaultMaxBytes bounds a cache unless configured (agentd serve
// --blob-cache-size).
const DefaultMaxBytes = 10 << 30

// DefaultParallel is how many blobs are fetched at once.
const DefaultParallel = 4

// ErrVerify is what a fetch wraps whose bytes do not hash to the digest
// asked for or are not of its size: nothing is stored.
var ErrVerify = errors.New("blob failed verification")

// Config configures a Cache.
type Config struct {
	// Dir holds the cache (created if absent); temporary files are
	// made in it too, so that a verified blob is renamed into place.
	Dir string
	// MaxBytes bounds the blobs kept (DefaultMaxBytes if zero).
	MaxBytes int64
	// Parallel bounds the fetches running at once (DefaultParallel if
	// zero).
	Parallel int
	// Client fetches presigned URLs (http.DefaultClient if nil).
	Client *http.Client
	// Metrics count what the cache does; nil fields count nothing.
	Metrics Metrics
}

// Metrics are the counters a Cache adds to (the agent defines and
// exports them).
type Metrics struct {
	// FetchedBytes counts the bytes of blobs fetched and verified.
	FetchedBytes prometheus.Counter
	// Hits and Misses count the blobs asked for that were, and were not,
	// in the cache.
	Hits, Misses prometheus.Counter
	// Bytes is the size of the blobs in the cache.
	Bytes prometheus.Gauge
}

// Blob names one blob to fetch: its digest, its size (-1: unknown, then
// at most MaxManifestBytes are read) and a presigned GET URL.
type Blob struct {
	Digest string
	Size   int64
	URL    string
}

// MaxManifestBytes bounds a blob of unknown size (a manifest).
const MaxManifestBytes = manifest.MaxEncodedBytes

// tmpPrefix names the temporary files of fetches and additions; Load
// removes those a crash left.
const tmpPrefix = ".tmp-"

// Cache is a node's blob cache. Create it with New and call Load once
// before using it.
type Cache struct {
	cfg    Config
	logger *slog.Logger
	sem    chan struct{}

	mu      sync.Mutex
	entries map[string]*entry
	// lru orders the entries, least recently used first.
	lru   *list.List
	total int64
	// fetching holds the fetches under way, by digest.
	fetching map[string]*fetch
}

type entry struct {
	digest string
	size   int64
	pins   int
	elem   *list.Element
}

type fetch struct {
	done chan struct{}
	err  error
}

// New returns a cache of cfg.Dir; it touches no file (Load does).
func New(cfg Config, logger *slog.Logger) (*Cache, error) {
	if cfg.MaxBytes < 0 {
		return nil, fmt.Errorf("blob cache: size %d: must not be negative", cfg.MaxBytes)
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = DefaultParallel
	}
	if cfg.Client == nil {
		cfg.Client = http.DefaultClient
	}
	return &Cache{
		cfg: cfg, logger: logger.With("component", "blob_cache"),
		sem:     make(chan struct{}, cfg.Parallel),
		entries: map[string]*entry{}, lru: list.New(), fetching: map[string]*fetch{},
	}, nil
}

// Dir is the cache's directory.
func (c *Cache) Dir() string { return c.cfg.Dir }

// Load creates the directory, removes the temporary files a crash left,
// and indexes the blobs there (the oldest first), evicting past the
// bound.
func (c *Cache) Load() error {
	if c.cfg.Dir == "" {
		return errors.New("blob cache: no directory")
	}
	if err := os.MkdirAll(c.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("create blob cache: %w", err)
	}
	type found struct {
		digest string
		size   int64
		mtime  int64
	}
	var blobs []found
	err := filepath.WalkDir(c.cfg.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		switch {
		case d.IsDir():
			return nil
		case strings.HasPrefix(name, tmpPrefix):
			return os.Remove(p)
		case !d.Type().IsRegular() || manifest.CheckDigest(name) != nil || filepath.Base(filepath.Dir(p)) != name[:2]:
			c.logger.Warn("not a blob; removing it from the blob cache", "path", p)
			return os.Remove(p)
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		blobs = append(blobs, found{name, fi.Size(), fi.ModTime().UnixNano()})
		return nil
	})
	if err != nil {
		return fmt.Errorf("load blob cache: %w", err)
	}
	slices.SortFunc(blobs, func(a, b found) int { return cmp.Compare(a.mtime, b.mtime) })
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range blobs {
		c.insertLocked(b.digest, b.size)
	}
	c.evictLocked()
	return nil
}

// Path is where blob digest is kept (whether it is there or not).
func (c *Cache) Path(digest string) string {
	return filepath.Join(c.cfg.Dir, digest[:2], digest)
}

// Has reports whether blob digest is in the cache.
func (c *Cache) Has(digest string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.entries[digest]
	return ok
}

// Get makes the blobs present, fetching those absent (each digest once,
// however many callers ask for it at once), and pins them all until
// release is called: none is evicted meanwhile. On error nothing stays
// pinned. release may be called more than once.
func (c *Cache) Get(ctx context.Context, blobs []Blob) (release func(), err error) {
	var pinned []string
	release = c.releaser(&pinned)
	// The blobs present are pinned at once; the others are fetched by
	// at most Parallel workers.
	var missing []Blob
	c.mu.Lock()
	for _, b := range blobs {
		if err := manifest.CheckDigest(b.Digest); err != nil {
			c.mu.Unlock()
			release()
			return func() {}, err
		}
		if e := c.entries[b.Digest]; e != nil {
			e.pins++
			c.lru.MoveToBack(e.elem)
			pinned = append(pinned, b.Digest)
			inc(c.cfg.Metrics.Hits)
			continue
		}
		missing = append(missing, b)
	}
	c.mu.Unlock()
	todo := make(chan Blob)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range min(c.cfg.Parallel, len(missing)) {
		wg.Go(func() {
			for b := range todo {
				err := c.get(ctx, b)
				mu.Lock()
				if err == nil {
					pinned = append(pinned, b.Digest)
				} else {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
	for _, b := range missing {
		todo <- b
	}
	close(todo)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		release()
		return func() {}, err
	}
	return release, nil
}

func (c *Cache) releaser(pinned *[]string) func() {
	return sync.OnceFunc(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, d := range *pinned {
			if e := c.entries[d]; e != nil {
				e.pins--
			}
		}
		c.evictLocked()
	})
}

// get makes blob b present and pins it once.
func (c *Cache) get(ctx context.Context, b Blob) error {
	counted := false
	for {
		c.mu.Lock()
		if e := c.entries[b.Digest]; e != nil {
			e.pins++
			c.lru.MoveToBack(e.elem)
			c.mu.Unlock()
			if !counted {
				inc(c.cfg.Metrics.Hits)
			}
			return nil
		}
		if !counted {
			inc(c.cfg.Metrics.Misses)
			counted = true
		}
		f := c.fetching[b.Digest]
		if f == nil {
			f = &fetch{done: make(chan struct{})}
			c.fetching[b.Digest] = f
			c.mu.Unlock()
			f.err = c.fetch(ctx, b) // placed pinned
			c.mu.Lock()
			delete(c.fetching, b.Digest)
			close(f.done)
			c.mu.Unlock()
			return f.err
		}
		c.mu.Unlock()
		// Another caller fetches it: wait, then pin it (or fetch it
		// again if it failed for that caller or was evicted since).
		select {
		case <-f.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if f.err != nil && errors.Is(f.err, ErrVerify) {
			return f.err
		}
	}
}

// fetch downloads blob b into a temporary file while hashing it, and
// renames it into place once verified.
func (c *Cache) fetch(ctx context.Context, b Blob) (err error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-c.sem }()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.URL, nil)
	if err != nil {
		return fmt.Errorf("fetch blob %s: %w", b.Digest, err)
	}
	resp, err := c.cfg.Client.Do(req)
	if err != nil {
		return fmt.Errorf("fetch blob %s: %w", b.Digest, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("fetch blob %s: %s: %s", b.Digest, resp.Status, strings.TrimSpace(string(msg)))
	}
	limit := b.Size
	if limit < 0 {
		limit = MaxManifestBytes
	}
	n, err := c.store(b.Digest, b.Size, io.LimitReader(resp.Body, limit+1), true)
	if err != nil {
		return fmt.Errorf("fetch blob %s: %w", b.Digest, err)
	}
	add(c.cfg.Metrics.FetchedBytes, n)
	return nil
}

// store writes r to a temporary file, checks it hashes to digest and is
// size bytes long (size -1: any), and renames it into place, pinned once
// if pin.
func (c *Cache) store(digest string, size int64, r io.Reader, pin bool) (int64, error) {
	f, err := c.tempFile()
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name()) // gone once renamed
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != digest || size >= 0 && n != size {
		return n, fmt.Errorf("%w: got %d bytes of digest %s, want %d of %s", ErrVerify, n, got, size, digest)
	}
	return n, c.place(f.Name(), digest, n, pin)
}

// place renames the verified file tmp into the cache as blob digest and
// indexes it, pinned once if pin; a blob already there is kept and tmp
// removed.
func (c *Cache) place(tmp, digest string, size int64, pin bool) error {
	if err := os.Chmod(tmp, 0o444); err != nil {
		return err
	}
	dst := c.Path(digest)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[digest]
	if e == nil {
		if err := os.Rename(tmp, dst); err != nil {
			return err
		}
		e = c.insertLocked(digest, size)
	} else {
		os.Remove(tmp)
		c.lru.MoveToBack(e.elem)
	}
	if pin {
		e.pins++
	}
	c.evictLocked()
	return nil
}

func (c *Cache) tempFile() (*os.File, error) {
	var b [8]byte
	rand.Read(b[:])
	return os.OpenFile(filepath.Join(c.cfg.Dir, tmpPrefix+hex.EncodeToString(b[:])), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
}

func (c *Cache) insertLocked(digest string, size int64) *entry {
	e := &entry{digest: digest, size: size}
	e.elem = c.lru.PushBack(e)
	c.entries[digest] = e
	c.total += size
	set(c.cfg.Metrics.Bytes, c.total)
	return e
}

// evictLocked removes the least recently used unpinned blobs while the
// cache holds more than its bound.
func (c *Cache) evictLocked() {
	for el := c.lru.Front(); el != nil && c.total > c.cfg.MaxBytes; {
		e := el.Value.(*entry)
		next := el.Next()
		if e.pins == 0 {
			if err := os.Remove(c.Path(e.digest)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				c.logger.Warn("evict blob", "digest", e.digest, "error", err)
			} else {
				c.lru.Remove(el)
				delete(c.entries, e.digest)
				c.total -= e.size
			}
		}
		el = next
	}
	set(c.cfg.Metrics.Bytes, c.total)
}

// Add moves the regular file at path (on the cache's file system; the
// caller no longer writes it) into the cache under its digest, which it
// computes, and pins it until release is called. A blob already there is
// kept and path removed.
func (c *Cache) Add(path string) (digest string, size int64, release func(), err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, nil, err
	}
	h := sha256.New()
	size, err = io.Copy(h, f)
	f.Close()
	if err != nil {
		return "", 0, nil, fmt.Errorf("hash %s: %w", path, err)
	}
	digest = hex.EncodeToString(h.Sum(nil))
	if err := c.place(path, digest, size, true); err != nil {
		return "", 0, nil, fmt.Errorf("add %s to the blob cache: %w", path, err)
	}
	pinned := []string{digest}
	return digest, size, c.releaser(&pinned), nil
}

// Put stores b (a manifest) in the cache and pins it until release.
func (c *Cache) Put(b []byte) (digest string, release func(), err error) {
	f, err := c.tempFile()
	if err != nil {
		return "", nil, err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", nil, err
	}
	digest, _, release, err = c.Add(f.Name())
	if err != nil {
		os.Remove(f.Name())
	}
	return digest, release, err
}

func inc(c prometheus.Counter) {
	if c != nil {
		c.Inc()
	}
}

func add(c prometheus.Counter, n int64) {
	if c != nil {
		c.Add(float64(n))
	}
}

func set(g prometheus.Gauge, n int64) {
	if g != nil {
		g.Set(float64(n))
	}
}
