package agentd

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/blob"
	"github.com/rodon-compute/rodon/internal/manifest"
)

// testStore is the scheduler's blob store (blob.Local, its signed URLs
// and their handler) on loopback, counting the requests by digest; the
// scheduler side of assignments and uploads (another helper's) is played
// by recordingScheduler with it.
type testStore struct {
	srv   *httptest.Server
	local *blob.Local

	mu sync.Mutex
	// gets and puts count the requests by digest.
	gets, puts map[string]int
	// failPuts fails the next PUTs with 503.
	failPuts int
}

func newTestStore(t *testing.T) *testStore {
	s := &testStore{gets: map[string]int{}, puts: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	key := make([]byte, 32)
	rand.Read(key)
	var err error
	if s.local, err = blob.NewLocal(t.TempDir(), key, s.srv.URL); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *testStore) serve(w http.ResponseWriter, r *http.Request) {
	d := strings.TrimPrefix(r.URL.Path, "/v1/blobs/")
	s.mu.Lock()
	fail := false
	switch r.Method {
	case http.MethodGet:
		s.gets[d]++
	case http.MethodPut:
		s.puts[d]++
		if s.failPuts > 0 {
			s.failPuts--
			fail = true
		}
	}
	s.mu.Unlock()
	if fail {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	s.local.Handler().ServeHTTP(w, r)
}

func (s *testStore) url(d string) string {
	u, err := s.local.PresignGet(context.Background(), d, time.Hour)
	if err != nil {
		panic(err)
	}
	return u
}

// add stores b and returns its digest.
func (s *testStore) add(b []byte) string {
	d := manifest.Digest(b)
	if err := s.local.Put(context.Background(), d, bytes.NewReader(b), int64(len(b))); err != nil {
		panic(err)
	}
	return d
}

// read is blob d, or nil.
func (s *testStore) read(d string) []byte {
	f, _, err := s.local.Open(context.Background(), d)
	if err != nil {
		return nil
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	return b
}

// commit stores a tree of files (path -> content, mode 0644; a path
// ending in "*" is 0755) and returns its manifest's digest.
func (s *testStore) commit(files map[string]string) string {
	m := &manifest.Manifest{}
	for p, c := range files {
		mode := uint32(0o644)
		if q, ok := strings.CutSuffix(p, "*"); ok {
			p, mode = q, 0o755
		}
		m.Entries = append(m.Entries, manifest.Entry{Path: p, Type: manifest.File, Mode: mode, Size: int64(len(c)), SHA256: s.add([]byte(c))})
	}
	m.Sort()
	b, _ := manifest.Encode(m)
	return s.add(b)
}

// access is the assignment's access to the revision of ws whose manifest
// is digest ("" for an empty workspace).
func (s *testStore) access(ws, digest string, readOnly bool) *cluster.WorkspaceAccess {
	acc := &cluster.WorkspaceAccess{Workspace: ws, Revision: "rev-" + ws, Manifest: digest, URLs: map[string]string{},
		Expires: time.Now().Add(time.Hour), ReadOnly: readOnly}
	if digest == "" {
		return acc
	}
	acc.URLs[digest] = s.url(digest)
	for d := range s.tree(digest).Digests() {
		acc.URLs[d] = s.url(d)
	}
	return acc
}

// tree is the manifest stored as digest.
func (s *testStore) tree(digest string) *manifest.Manifest {
	m, err := manifest.Decode(bytes.NewReader(s.read(digest)), manifest.MaxEncodedBytes, manifest.DefaultLimits)
	if err != nil {
		panic(err)
	}
	return m
}

// file is the content of path in the tree digest, and whether it is
// there.
func (s *testStore) file(digest, path string) (string, bool) {
	if digest == "" {
		return "", false
	}
	e, ok := s.tree(digest).Lookup(path)
	if !ok {
		return "", false
	}
	b := s.read(e.SHA256)
	return string(b), b != nil
}

// uploads answers an UploadsRequest: PUT URLs for what the store lacks.
func (s *testStore) uploads(req cluster.UploadsRequest) cluster.UploadsResponse {
	out := cluster.UploadsResponse{URLs: map[string]string{}, Expires: time.Now().Add(time.Hour)}
	for _, b := range req.Blobs {
		if _, err := s.local.Stat(context.Background(), b.SHA256); err == nil {
			continue
		}
		u, err := s.local.PresignPut(context.Background(), b.SHA256, b.Size, time.Hour)
		if err != nil {
			panic(err)
		}
		out.URLs[b.SHA256] = u
	}
	return out
}
