package blob

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/httpapi"
)

// A Local URL is BASE/v1/blobs/DIGEST?method=M&expires=UNIX&size=N&sig=HEX,
// sig the HMAC-SHA256 with the store's key of
//
//	"rodon-blob-v1\n" + M + "\n" + DIGEST + "\n" + UNIX + "\n" + N
//
// M is GET or PUT, UNIX the last second (Unix time) the URL is valid, N
// the size a PUT must have (-1 in a GET URL: any). The signature is the
// only authority: it does not cover the host, so a proxy (the gateway)
// may forward the path and query unchanged.

// PresignGet implements Store. The blob need not exist yet.
func (l *Local) PresignGet(ctx context.Context, digest string, ttl time.Duration) (string, error) {
	return l.presign(http.MethodGet, digest, -1, ttl)
}

// PresignPut implements Store: the URL accepts exactly size bytes that
// hash to digest.
func (l *Local) PresignPut(ctx context.Context, digest string, size int64, ttl time.Duration) (string, error) {
	if size < 0 {
		return "", fmt.Errorf("presign put of blob %s: size %d: want 0 or more", digest, size)
	}
	return l.presign(http.MethodPut, digest, size, ttl)
}

func (l *Local) presign(method, digest string, size int64, ttl time.Duration) (string, error) {
	if err := checkDigest(digest); err != nil {
		return "", err
	}
	if ttl <= 0 || ttl > MaxTTL {
		return "", fmt.Errorf("presign blob %s: ttl %v: want more than 0, at most %v", digest, ttl, MaxTTL)
	}
	expires := l.now().Add(ttl + time.Second - 1).Unix()
	q := url.Values{
		"method":  {method},
		"expires": {strconv.FormatInt(expires, 10)},
		"size":    {strconv.FormatInt(size, 10)},
		"sig":     {l.sign(method, digest, expires, size)},
	}
	return l.baseURL + "/v1/blobs/" + digest + "?" + q.Encode(), nil
}

func (l *Local) sign(method, digest string, expires, size int64) string {
	m := hmac.New(sha256.New, l.key)
	fmt.Fprintf(m, "rodon-blob-v1\n%s\n%s\n%d\n%d", method, digest, expires, size)
	return hex.EncodeToString(m.Sum(nil))
}

// check verifies the signature of a request for digest (already checked)
// with method (HEAD counts as GET) and returns the size it allows.
func (l *Local) check(r *http.Request, method, digest string) (int64, error) {
	q := r.URL.Query()
	if q.Get("sig") == "" {
		return 0, errors.New("no sig: blob URLs are presigned; ask the scheduler for one")
	}
	if got := q.Get("method"); got != method {
		return 0, fmt.Errorf("the URL is for method %q, not %s", got, method)
	}
	expires, err := strconv.ParseInt(q.Get("expires"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("expires %q: want a Unix time", q.Get("expires"))
	}
	size, err := strconv.ParseInt(q.Get("size"), 10, 64)
	if err != nil || size < -1 {
		return 0, fmt.Errorf("size %q: want -1 or more", q.Get("size"))
	}
	want, _ := hex.DecodeString(l.sign(method, digest, expires, size))
	got, err := hex.DecodeString(q.Get("sig"))
	if err != nil || !hmac.Equal(got, want) {
		return 0, errors.New("bad signature: the URL was altered or signed with another key")
	}
	// Checked after the signature, so that the answer says nothing about
	// a forged URL's fields.
	if now := l.now().Unix(); now > expires {
		return 0, fmt.Errorf("the URL expired %v ago", time.Duration(now-expires)*time.Second)
	}
	return size, nil
}

// Handler serves the store's URLs: GET, HEAD and PUT /v1/blobs/{digest}
// (mount it at "/v1/blobs/" of the base URL). A request's signature is its
// only authority. Errors answer api.Error documents: 400 for a malformed
// digest or a PUT whose bytes are not those of the URL (nothing is then
// stored), 403 for a missing, bad or expired signature, 404 for an absent
// blob. GET answers Range requests and ETag "DIGEST".
func (l *Local) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/blobs/{digest}", l.serveGet) // and HEAD
	mux.HandleFunc("PUT /v1/blobs/{digest}", l.servePut)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpapi.NoRoute(mux, w, r, "docs/design/workspaces.md")
	})
	return mux
}

// authorize checks the digest and the signature of r, writing the error
// answer when it fails.
func (l *Local) authorize(w http.ResponseWriter, r *http.Request, method string) (digest string, size int64, ok bool) {
	digest = r.PathValue("digest")
	if err := checkDigest(digest); err != nil {
		httpapi.WriteError(w, &httpapi.Error{Status: http.StatusBadRequest, Code: api.CodeBadRequest, Message: err.Error()})
		return "", 0, false
	}
	size, err := l.check(r, method, digest)
	if err != nil {
		httpapi.WriteError(w, &httpapi.Error{Status: http.StatusForbidden, Code: api.CodeForbidden,
			Message: fmt.Sprintf("%s blob %s: %v", r.Method, digest, err)})
		return "", 0, false
	}
	return digest, size, true
}

func (l *Local) serveGet(w http.ResponseWriter, r *http.Request) {
	digest, _, ok := l.authorize(w, r, http.MethodGet)
	if !ok {
		return
	}
	f, _, err := l.Open(r.Context(), digest)
	if err != nil {
		writeStoreError(w, err)
		return
	}
	defer f.Close()
	h := w.Header()
	h.Set("ETag", `"`+digest+`"`)
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "private, max-age=31536000, immutable")
	http.ServeContent(w, r, "", time.Time{}, f)
}

func (l *Local) servePut(w http.ResponseWriter, r *http.Request) {
	digest, size, ok := l.authorize(w, r, http.MethodPut)
	if !ok {
		return
	}
	if size < 0 {
		writeStoreError(w, fmt.Errorf("put blob %s: the URL names no size: %w", digest, ErrDigest))
		return
	}
	if r.ContentLength >= 0 && r.ContentLength != size {
		writeStoreError(w, fmt.Errorf("put blob %s: body of %d bytes, the URL is for %d: %w", digest, r.ContentLength, size, ErrDigest))
		return
	}
	if err := l.Put(r.Context(), digest, r.Body, size); err != nil {
		writeStoreError(w, err)
		return
	}
	w.Header().Set("ETag", `"`+digest+`"`)
	w.WriteHeader(http.StatusOK)
}

// writeStoreError answers an error of the store.
func writeStoreError(w http.ResponseWriter, err error) {
	e := &httpapi.Error{Status: http.StatusInternalServerError, Code: api.CodeInternal, Message: err.Error()}
	switch {
	case errors.Is(err, ErrNotFound):
		e.Status, e.Code = http.StatusNotFound, api.CodeNotFound
	case errors.Is(err, ErrDigest):
		e.Status, e.Code = http.StatusBadRequest, api.CodeBadRequest
	}
	httpapi.WriteError(w, e)
}
