package blob_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/blob"
	"github.com/rodon-compute/rodon/internal/blob/blobtest"
)

// newLocal returns a Local in a temp directory served over loopback.
func newLocal(t *testing.T) (*blob.Local, *httptest.Server) {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	srv.Start()
	t.Cleanup(srv.Close)
	key, err := blob.LoadOrCreateKey(filepath.Join(t.TempDir(), "blob-key"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := blob.NewLocal(t.TempDir(), key, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = l.Handler()
	return l, srv
}

func TestLocalConformance(t *testing.T) {
	l, srv := newLocal(t)
	blobtest.Conformance(t, l, blobtest.Options{Client: srv.Client(), PutChecksBytes: true})
	if ents, _ := os.ReadDir(filepath.Join(l.Dir(), "tmp")); len(ents) > 0 {
		t.Errorf("temp files left: %v", ents)
	}
}

func TestLocalLayout(t *testing.T) {
	l, _ := newLocal(t)
	b, d := blobtest.Random(t, 10)
	if err := l.Put(t.Context(), d, bytes.NewReader(b), 10); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(l.Dir(), d[:2], d)
	st, err := os.Stat(p)
	if err != nil {
		t.Fatalf("blob not at dir/aa/digest: %v", err)
	}
	if st.Mode().Perm() != 0o444 {
		t.Errorf("blob mode %v, want 0444", st.Mode().Perm())
	}
	if err := l.Put(t.Context(), d, bytes.NewReader(b), 10); err != nil {
		t.Fatal(err)
	}
	st2, _ := os.Stat(p)
	if st.Sys().(*syscall.Stat_t).Ino != st2.Sys().(*syscall.Stat_t).Ino {
		t.Error("a second Put wrote the blob again")
	}
	r, _, err := l.Open(t.Context(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, ok := r.(*os.File); !ok {
		t.Errorf("Open returned a %T, want *os.File", r)
	}
}

func TestLocalSweepsTempFiles(t *testing.T) {
	dir := t.TempDir()
	key := bytes.Repeat([]byte{1}, 32)
	if _, err := blob.NewLocal(dir, key, "http://127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	old, fresh := filepath.Join(dir, "tmp", "put-1"), filepath.Join(dir, "tmp", "put-2")
	for _, p := range []string{old, fresh} {
		if err := os.WriteFile(p, []byte("half a blob"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	hourAgo := time.Now().Add(-time.Hour)
	os.Chtimes(old, hourAgo, hourAgo)
	if _, err := blob.NewLocal(dir, key, "http://127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a temp file of an hour ago survived a start: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a temp file being written (fresh) was removed: %v", err)
	}
}

func TestNewLocalRefuses(t *testing.T) {
	key := bytes.Repeat([]byte{1}, 32)
	for _, tc := range []struct {
		key  []byte
		base string
		want string
	}{
		{key[:31], "http://127.0.0.1:1", "key of 31 bytes"},
		{key, "127.0.0.1:1", "base URL"},
		{key, "ftp://h:1", "base URL"},
		{key, "http://h:1/?q=1", "base URL"},
	} {
		_, err := blob.NewLocal(t.TempDir(), tc.key, tc.base)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewLocal(%d-byte key, %q) = %v, want an error naming %q", len(tc.key), tc.base, err, tc.want)
		}
	}
}

func TestLoadOrCreateKey(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "blob-key")
	k1, err := blob.LoadOrCreateKey(p)
	if err != nil || len(k1) != 32 {
		t.Fatalf("LoadOrCreateKey(new) = %d bytes, %v", len(k1), err)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v, want 0600", st.Mode().Perm(), err)
	}
	k2, err := blob.LoadOrCreateKey(p)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Errorf("LoadOrCreateKey(existing) = another key, %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(p)); len(ents) != 1 {
		t.Errorf("key directory holds %d files, want 1", len(ents))
	}
	os.WriteFile(p, []byte("short"), 0o600)
	if _, err := blob.LoadOrCreateKey(p); err == nil || !strings.Contains(err.Error(), "5 bytes, want 32") {
		t.Errorf("LoadOrCreateKey(5-byte file) = %v, want an error naming the size", err)
	}
}

// TestLocalHandlerErrors checks the answers that name the problem.
func TestLocalHandlerErrors(t *testing.T) {
	l, srv := newLocal(t)
	b, d := blobtest.Random(t, 100)
	_, absent := blobtest.Random(t, 100)
	put, _ := l.PresignPut(t.Context(), d, 100, time.Minute)
	getAbsent, _ := l.PresignGet(t.Context(), absent, time.Minute)
	for _, tc := range []struct {
		method, url string
		body        []byte
		status      int
		code, want  string
	}{
		{"PUT", put, b[:99], 400, api.CodeBadRequest, "body of 99 bytes, the URL is for 100"},
		{"PUT", put, append(b[:99:99], 'x'), 400, api.CodeBadRequest, "the bytes hash to"},
		{"GET", getAbsent, nil, 404, api.CodeNotFound, "blob not found"},
		{"GET", srv.URL + "/v1/blobs/" + d, nil, 403, api.CodeForbidden, "no sig"},
		{"GET", srv.URL + "/v1/blobs/" + strings.ToUpper(d) + "?sig=00", nil, 400, api.CodeBadRequest, "lower-case hex"},
		{"GET", srv.URL + "/v1/blobs/..%2F..%2Fetc%2Fpasswd?sig=00", nil, 400, api.CodeBadRequest, "lower-case hex"},
		{"POST", put, b, 405, api.CodeMethodNotAllowed, "method not allowed"},
	} {
		req, _ := http.NewRequest(tc.method, tc.url, nil)
		if tc.body != nil {
			req.Body = io.NopCloser(bytes.NewReader(tc.body))
			req.ContentLength = int64(len(tc.body))
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var doc api.Error
		json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		if resp.StatusCode != tc.status || doc.Detail.Code != tc.code || !strings.Contains(doc.Detail.Message, tc.want) {
			t.Errorf("%s %s = %d %+v, want %d %s naming %q", tc.method, tc.url, resp.StatusCode, doc.Detail, tc.status, tc.code, tc.want)
		}
	}
	if _, err := l.Stat(t.Context(), d); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("after refused PUTs: Stat = %v, want ErrNotFound", err)
	}
}

// TestLocalStreamsOverHTTP puts and gets 256 MiB through presigned URLs
// with a heap that grows far less.
func TestLocalStreamsOverHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: -short")
	}
	l, srv := newLocal(t)
	const n = 256 << 20
	h := blobtest.NewHash()
	io.Copy(h, blobtest.NewPattern(n, 2))
	d := h.Hex()
	put, _ := l.PresignPut(t.Context(), d, n, time.Minute)
	get, _ := l.PresignGet(t.Context(), d, time.Minute)
	var got string
	grew := blobtest.HeapPeak(func() {
		req, _ := http.NewRequest("PUT", put, blobtest.NewPattern(n, 2))
		req.ContentLength = n
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("PUT 256 MiB = %d", resp.StatusCode)
			return
		}
		resp, err = srv.Client().Get(get)
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		h := blobtest.NewHash()
		io.Copy(h, resp.Body)
		got = h.Hex()
	})
	if got != d {
		t.Errorf("GET of the 256 MiB PUT hashes to %s, want %s", got, d)
	}
	if grew > n/8 {
		t.Errorf("PUT and GET of 256 MiB grew the heap by %d MiB, want at most %d", grew>>20, n/8>>20)
	}
	t.Logf("PUT and GET of 256 MiB over HTTP grew the heap by %.1f MiB", float64(grew)/(1<<20))
}

func TestLocalGetHeaders(t *testing.T) {
	l, srv := newLocal(t)
	b, d := blobtest.Random(t, 100)
	if err := l.Put(t.Context(), d, bytes.NewReader(b), 100); err != nil {
		t.Fatal(err)
	}
	get, _ := l.PresignGet(t.Context(), d, time.Minute)
	resp, err := srv.Client().Head(get)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength != 100 || resp.Header.Get("ETag") != `"`+d+`"` {
		t.Errorf("HEAD = %d, %d bytes, ETag %s, want 200, 100, %q", resp.StatusCode, resp.ContentLength, resp.Header.Get("ETag"), `"`+d+`"`)
	}
	req, _ := http.NewRequest("GET", get, nil)
	req.Header.Set("If-None-Match", `"`+d+`"`)
	resp, err = srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotModified {
		t.Errorf("GET If-None-Match its ETag = %d, want 304", resp.StatusCode)
	}
}

// TestLocalOtherKeyRefused: a store sharing the directory under another
// key refuses the first one's URLs.
func TestLocalOtherKeyRefused(t *testing.T) {
	l, _ := newLocal(t)
	b, d := blobtest.Random(t, 100)
	if err := l.Put(t.Context(), d, bytes.NewReader(b), 100); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	srv.Start()
	defer srv.Close()
	other, err := blob.NewLocal(l.Dir(), bytes.Repeat([]byte{7}, 32), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = other.Handler()
	get, _ := l.PresignGet(t.Context(), d, time.Minute)
	resp, err := srv.Client().Get(srv.URL + get[strings.Index(get, "/v1/"):])
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET with a URL signed under another key = %d, want 403", resp.StatusCode)
	}
}
