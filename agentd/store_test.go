package agentd

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/manifest"
)

// testStore stands in for the scheduler's blob store and its presigned
// URLs, on loopback: GET and PUT /v1/blobs/{digest}?sig=test, a PUT
// verified against its digest, as blob.Local's handler does. The
// scheduler side of assignments and uploads (another helper's) is played
// by recordingScheduler with it.
type testStore struct {
	srv *httptest.Server

	mu    sync.Mutex
	blobs map[string][]byte
	// gets and puts count the requests by digest.
	gets, puts map[string]int
	// failPuts fails the next PUTs with 503.
	failPuts int
}

func newTestStore(t *testing.T) *testStore {
	s := &testStore{blobs: map[string][]byte{}, gets: map[string]int{}, puts: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *testStore) serve(w http.ResponseWriter, r *http.Request) {
	d := strings.TrimPrefix(r.URL.Path, "/v1/blobs/")
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Method {
	case http.MethodGet:
		s.gets[d]++
		b, ok := s.blobs[d]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	case http.MethodPut:
		s.puts[d]++
		if s.failPuts > 0 {
			s.failPuts--
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil || manifest.Digest(b) != d {
			http.Error(w, "digest mismatch", http.StatusBadRequest)
			return
		}
		s.blobs[d] = b
		w.WriteHeader(http.StatusCreated)
	default:
		http.Error(w, "method", http.StatusMethodNotAllowed)
	}
}

func (s *testStore) url(d string) string { return s.srv.URL + "/v1/blobs/" + d + "?sig=test" }

// add stores b and returns its digest.
func (s *testStore) add(b []byte) string {
	d := manifest.Digest(b)
	s.mu.Lock()
	s.blobs[d] = b
	s.mu.Unlock()
	return d
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
	s.mu.Lock()
	b := s.blobs[digest]
	s.mu.Unlock()
	m, err := manifest.Decode(bytes.NewReader(b), manifest.MaxEncodedBytes, manifest.DefaultLimits)
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
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.blobs[e.SHA256]
	return string(b), ok
}

// uploads answers an UploadsRequest: PUT URLs for what the store lacks.
func (s *testStore) uploads(req cluster.UploadsRequest) cluster.UploadsResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := cluster.UploadsResponse{URLs: map[string]string{}, Expires: time.Now().Add(time.Hour)}
	for _, b := range req.Blobs {
		if _, ok := s.blobs[b.SHA256]; !ok {
			out.URLs[b.SHA256] = s.url(b.SHA256)
		}
	}
	return out
}
