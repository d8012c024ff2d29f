package client

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// TestWorkspaceWriteHeaders: a file write streams its body and sends the
// author, message, If-Match and mode; the path's components are escaped
// one by one.
func TestWorkspaceWriteHeaders(t *testing.T) {
	var got struct {
		path, author, message, ifMatch, mode, body string
		length                                     int64
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.path, got.body, got.length = r.URL.EscapedPath(), string(b), r.ContentLength
		got.author, got.message = r.Header.Get(AuthorHeader), r.Header.Get(MessageHeader)
		got.ifMatch, got.mode = r.Header.Get("If-Match"), r.Header.Get(ModeHeader)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"rev-2","number":2}`)
	}))
	defer srv.Close()
	c, _ := New(srv.URL, Options{RetryFor: -1})
	rev, err := c.PutFile(t.Context(), "ws-a", "data/a b%?.csv", strings.NewReader("x,y\n"), 4,
		WriteOptions{Author: api.Author{Kind: api.AuthorAccount, ID: "acct-1"}, Message: "upload", IfMatch: "rev-1", Mode: 0o755})
	if err != nil || rev.ID != "rev-2" {
		t.Fatalf("PutFile = %+v, %v, want rev-2", rev, err)
	}
	want := "/v1/workspaces/ws-a/files/data/a%20b%25%3F.csv"
	if got.path != want || got.body != "x,y\n" || got.length != 4 || got.author != "account:acct-1" ||
		got.message != "upload" || got.ifMatch != "rev-1" || got.mode != "755" {
		t.Errorf("PutFile sent %+v, want path %s, body x,y, length 4, author account:acct-1, message, If-Match rev-1, mode 755", got, want)
	}
}

// TestStreamNotRetriedOnceSent: a write whose body was sent is not sent
// again to another member, even when the first answered no_leader; one
// that could not connect is.
func TestStreamNotRetriedOnceSent(t *testing.T) {
	var calls atomic.Int32
	noLeader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		io.Copy(io.Discard, r.Body)
		apiError(w, 503, api.CodeNoLeader, "no leader")
	}))
	defer noLeader.Close()
	var good atomic.Int32
	goodSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		good.Add(1)
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(201)
		io.WriteString(w, `{"id":"rev-1"}`)
	}))
	defer goodSrv.Close()

	c, _ := New(noLeader.URL+","+goodSrv.URL, Options{})
	if _, err := c.PutFile(t.Context(), "ws-a", "f", strings.NewReader("data"), -1, WriteOptions{}); !IsCode(err, api.CodeNoLeader) {
		t.Errorf("PutFile after the body was sent = %v, want the no_leader answer", err)
	}
	if calls.Load() != 1 || good.Load() != 0 {
		t.Errorf("members called %d and %d times, want 1 and 0", calls.Load(), good.Load())
	}
	c, _ = New(deadURL(t)+","+goodSrv.URL, Options{})
	if _, err := c.PutFile(t.Context(), "ws-a", "f", strings.NewReader("data"), 4, WriteOptions{}); err != nil || good.Load() != 1 {
		t.Errorf("PutFile past a dead member = %v (%d calls), want it sent to the next", err, good.Load())
	}
}

// TestFileRead: a read passes Range and rev, and returns the answer's
// status, headers and body open; a 304 is an answer, a 404 an error.
func TestFileRead(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Query().Get("rev") == "rev-missing":
			apiError(w, 404, api.CodeNotFound, "no revision")
		case r.Header.Get("If-None-Match") != "":
			w.WriteHeader(http.StatusNotModified)
		default:
			w.Header().Set("ETag", `"abc"`)
			w.Header().Set("Content-Range", "bytes 1-2/4")
			w.WriteHeader(http.StatusPartialContent)
			io.WriteString(w, r.Header.Get("Range")+" "+r.URL.Query().Get("rev"))
		}
	}))
	defer srv.Close()
	c, _ := New(srv.URL, Options{RetryFor: -1})
	ctx := context.Background()
	f, err := c.File(ctx, "ws-a", "a.txt", FileOptions{Rev: "rev-1", Range: "bytes=1-2"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f.Body)
	f.Body.Close()
	if f.Status != 206 || f.Header.Get("ETag") != `"abc"` || string(b) != "bytes=1-2 rev-1" {
		t.Errorf("File = %d %v %q, want 206 with the ETag and the Range echoed", f.Status, f.Header, b)
	}
	f, err = c.File(ctx, "ws-a", "a.txt", FileOptions{IfNoneMatch: `"abc"`})
	if err != nil || f.Status != 304 {
		t.Errorf("File(If-None-Match) = %v, %v, want 304", f, err)
	} else {
		f.Body.Close()
	}
	if _, err := c.File(ctx, "ws-a", "a.txt", FileOptions{Rev: "rev-missing"}); !IsNotFound(err) {
		t.Errorf("File(missing rev) = %v, want not found", err)
	}
}

// TestBlobProxy: Blob sends the path, the signed query and the body as
// they are, and returns any answer open, errors included.
func TestBlobProxy(t *testing.T) {
	var got struct{ path, sig, method, body string }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.path, got.sig, got.method, got.body = r.URL.EscapedPath(), r.URL.Query().Get("sig"), r.URL.Query().Get("method"), string(b)
		apiError(w, 403, api.CodeForbidden, "bad signature")
	}))
	defer srv.Close()
	c, _ := New(srv.URL, Options{RetryFor: -1})
	d := strings.Repeat("ab", 32)
	f, err := c.Blob(t.Context(), "PUT", "/v1/blobs/"+d, "method=PUT&size=3&sig=abc%2B", strings.NewReader("xyz"), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f.Body)
	f.Body.Close()
	if f.Status != 403 || !strings.Contains(string(b), "bad signature") || got.path != "/v1/blobs/"+d || got.sig != "abc+" || got.method != "PUT" || got.body != "xyz" {
		t.Errorf("Blob = %d %s, sent %+v; want the 403 answer and the request as given", f.Status, b, got)
	}
	if _, err := c.Blob(t.Context(), "GET", "/v1/steps/x", "", nil, 0, nil); err == nil {
		t.Error("Blob of a path outside /v1/blobs/ = nil error, want one")
	}
}

// TestCommitNotRetried: an upload commit and a restore that reached a
// member are not sent to another one; a request for URLs is.
func TestCommitNotRetried(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		apiError(w, 503, api.CodeUnavailable, "member cannot reach its leader")
	}))
	defer srv.Close()
	c, _ := New(srv.URL+","+srv.URL, Options{RetryFor: time.Second})
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"commit": func() error {
			_, err := c.Uploads(ctx, "ws-a", api.UploadRequest{Commit: true}, WriteOptions{})
			return err
		},
		"restore": func() error {
			_, err := c.Restore(ctx, "ws-a", api.RestoreRequest{Rev: "rev-1"}, WriteOptions{})
			return err
		},
		"delete": func() error { _, err := c.DeleteFile(ctx, "ws-a", "f", WriteOptions{}); return err },
	} {
		calls.Store(0)
		if err := call(); err == nil || calls.Load() != 1 {
			t.Errorf("%s: %v after %d calls, want the error after 1", name, err, calls.Load())
		}
	}
	calls.Store(0)
	if _, err := c.Uploads(ctx, "ws-a", api.UploadRequest{}, WriteOptions{}); err == nil || calls.Load() < 2 {
		t.Errorf("uploads without commit: %v after %d calls, want it retried", err, calls.Load())
	}
}
