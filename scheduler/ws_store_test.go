package scheduler

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/internal/blob"
)

// memStore is a blob.Store in memory for the scheduler's tests, with
// URLs of its own served by its Handler under the base URL set later
// (the member's): a token in place of a signature.
type memStore struct {
	mu    sync.Mutex
	blobs map[string][]byte
	base  string
	// verified counts Verify calls.
	verified int
}

var _ blob.Store = (*memStore)(nil)

func newMemStore() *memStore { return &memStore{blobs: make(map[string][]byte)} }

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func (m *memStore) setBase(u string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.base = u
}

func (m *memStore) Put(_ context.Context, digest string, r io.Reader, size int64) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if digestOf(b) != digest || size >= 0 && int64(len(b)) != size {
		return fmt.Errorf("put %s: %w", digest, blob.ErrDigest)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.blobs[digest] = b
	return nil
}

func (m *memStore) PutUnknown(_ context.Context, r io.Reader, max int64) (string, int64, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return "", 0, err
	}
	if int64(len(b)) > max {
		return "", 0, blob.ErrTooLarge
	}
	d := digestOf(b)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.blobs[d] = b
	return d, int64(len(b)), nil
}

type memBlob struct{ *bytes.Reader }

func (memBlob) Close() error { return nil }

func (m *memStore) Open(_ context.Context, digest string) (blob.ReadSeekCloser, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.blobs[digest]
	if !ok {
		return nil, 0, fmt.Errorf("open %s: %w", digest, blob.ErrNotFound)
	}
	return memBlob{bytes.NewReader(b)}, int64(len(b)), nil
}

func (m *memStore) Stat(_ context.Context, digest string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.blobs[digest]
	if !ok {
		return 0, fmt.Errorf("stat %s: %w", digest, blob.ErrNotFound)
	}
	return int64(len(b)), nil
}

func (m *memStore) presign(method, digest string, size int64) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := url.Values{"method": {method}, "size": {fmt.Sprint(size)}, "sig": {"token-" + method + "-" + digest}}
	return m.base + "/v1/blobs/" + digest + "?" + q.Encode()
}

func (m *memStore) PresignGet(_ context.Context, digest string, _ time.Duration) (string, error) {
	return m.presign(http.MethodGet, digest, -1), nil
}

func (m *memStore) PresignPut(_ context.Context, digest string, size int64, _ time.Duration) (string, error) {
	return m.presign(http.MethodPut, digest, size), nil
}

func (m *memStore) Verify(ctx context.Context, digest string) error {
	m.mu.Lock()
	m.verified++
	m.mu.Unlock()
	_, err := m.Stat(ctx, digest)
	return err
}

func (m *memStore) Close() error { return nil }

// Handler serves the store's URLs, as blob.Local's does.
func (m *memStore) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := r.PathValue("digest")
		method := r.Method
		if method == http.MethodHead {
			method = http.MethodGet
		}
		if r.URL.Query().Get("sig") != "token-"+method+"-"+d {
			http.Error(w, "bad signature", http.StatusForbidden)
			return
		}
		switch r.Method {
		case http.MethodPut:
			if err := m.Put(r.Context(), d, r.Body, -1); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusCreated)
		default:
			rc, _, err := m.Open(r.Context(), d)
			if err != nil {
				http.Error(w, err.Error(), http.StatusNotFound)
				return
			}
			http.ServeContent(w, r, "", time.Time{}, rc)
		}
	})
}
