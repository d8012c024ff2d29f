package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/rodon-compute/rodon/api"
)

// The scheduler's workspace API (docs/design/workspaces.md, "Scheduler
// workspace API"): the routes and shapes of the gateway's (SPEC.md,
// "Workspaces and revisions") under /v1/workspaces/{id}/..., for the
// gateway and operators. Bodies stream both ways: a file read or an
// archive is an open *File, a file write reads its body as it sends it.
// A write is tried again on another member only when it surely did not
// reach one (a repeat would make a second revision).

// Headers of the workspace API.
const (
	// AuthorHeader names a write's author as KIND:ID (api.Author); the
	// scheduler accepts it only from the gateway's identity.
	AuthorHeader = "X-Rodon-Author"
	// MessageHeader is a write's message.
	MessageHeader = "X-Rodon-Message"
	// ModeHeader is a written file's mode, in octal (755 or 644).
	ModeHeader = "X-Rodon-Mode"
)

// WriteOptions are what a workspace write says besides its body.
type WriteOptions struct {
	// Author is who writes; zero sends no AuthorHeader (the caller's
	// identity is the author).
	Author api.Author
	// Message is the revision's message.
	Message string
	// IfMatch, if not empty, is the revision (rev-...) the write is made
	// from: the scheduler refuses it (412) when that is not a revision of
	// the workspace, and as a conflict (409) when a path it changes
	// changed since. Empty: the head when the request began.
	IfMatch string
	// Mode is a written file's permission bits (0o755 or 0o644); zero is
	// the scheduler's default.
	Mode uint32
}

func (o WriteOptions) header() http.Header {
	h := http.Header{}
	if o.Author != (api.Author{}) {
		h.Set(AuthorHeader, o.Author.Kind+":"+o.Author.ID)
	}
	if o.Message != "" {
		h.Set(MessageHeader, o.Message)
	}
	if o.IfMatch != "" {
		h.Set("If-Match", o.IfMatch)
	}
	if o.Mode != 0 {
		h.Set(ModeHeader, strconv.FormatUint(uint64(o.Mode), 8))
	}
	return h
}

// FileOptions are what a file read asks for.
type FileOptions struct {
	// Rev is the revision to read (rev-...); empty is the head.
	Rev string
	// Range and IfNoneMatch are sent as the headers of those names.
	Range, IfNoneMatch string
}

// File is an open answer whose body streams: a file, an archive, a blob.
// The caller closes Body.
type File struct {
	// Status is 200, 206 (a Range), 304 (If-None-Match matched), or for a
	// blob proxied by Blob, whatever the member answered.
	Status int
	// Header holds the answer's headers (Content-Length, Content-Range,
	// ETag, Content-Type, ...).
	Header http.Header
	Body   io.ReadCloser
}

// workspacePath is the escaped path of a route of workspace ws: what
// follows /v1/workspaces/{ws}/.
func workspacePath(ws, rest string) (string, error) {
	if ws == "" || ws == "." || ws == ".." || strings.Contains(ws, "/") {
		return "", fmt.Errorf("workspace %q: want a workspace id such as ws-...", ws)
	}
	return "/v1/workspaces/" + escape(ws) + "/" + rest, nil
}

// filePath is the escaped path of file p (slash-separated, relative) of
// workspace ws; each component is escaped, so that no '%', '?' or '#' of
// a name changes the URL. The scheduler checks the path.
func filePath(ws, p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("workspace %s: empty file path", ws)
	}
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = escape(s)
	}
	return workspacePath(ws, "files/"+strings.Join(parts, "/"))
}

func revQuery(key, rev string) url.Values {
	q := url.Values{}
	if rev != "" {
		q.Set(key, rev)
	}
	return q
}

// Revisions returns one page of workspace ws's revisions, newest first:
// at most limit (0: the server's default) from cursor ("" for the first
// page), and the cursor of the next page ("" on the last).
func (c *Client) Revisions(ctx context.Context, ws string, limit int, cursor string) ([]api.Revision, string, error) {
	p, err := workspacePath(ws, "revisions")
	if err != nil {
		return nil, "", err
	}
	return listPage[api.Revision](ctx, c, p, nil, limit, cursor)
}

// Revision returns revision rev of workspace ws (detached ones included).
func (c *Client) Revision(ctx context.Context, ws, rev string) (api.Revision, error) {
	var out api.Revision
	p, err := workspacePath(ws, "revisions/"+escape(rev))
	if err != nil {
		return out, err
	}
	_, err = c.call(ctx, request{method: http.MethodGet, path: p}, nil, &out)
	return out, err
}

// Tree returns the entries of revision rev (empty: the head) of workspace
// ws, sorted by path: all of them, or with path the entry at path and
// every entry under it. A workspace without revisions has an empty tree.
func (c *Client) Tree(ctx context.Context, ws, rev, path string) ([]api.TreeEntry, error) {
	p, err := workspacePath(ws, "tree")
	if err != nil {
		return nil, err
	}
	q := revQuery("rev", rev)
	if path != "" {
		q.Set("path", path)
	}
	var out []api.TreeEntry
	_, err = c.call(ctx, request{method: http.MethodGet, path: p, query: q}, nil, &out)
	return out, err
}

// File opens file p of workspace ws. The caller closes the answer's Body.
func (c *Client) File(ctx context.Context, ws, p string, opts FileOptions) (*File, error) {
	fp, err := filePath(ws, p)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	if opts.Range != "" {
		h.Set("Range", opts.Range)
	}
	if opts.IfNoneMatch != "" {
		h.Set("If-None-Match", opts.IfNoneMatch)
	}
	return c.open(ctx, request{method: http.MethodGet, path: fp, query: revQuery("rev", opts.Rev), header: h, open: true})
}

// PutFile writes body, size bytes long (-1: unknown), as file p of
// workspace ws, and returns the revision it made. body is read once, as
// it is sent; it is not closed.
func (c *Client) PutFile(ctx context.Context, ws, p string, body io.Reader, size int64, opts WriteOptions) (api.Revision, error) {
	var out api.Revision
	fp, err := filePath(ws, p)
	if err != nil {
		return out, err
	}
	h := opts.header()
	h.Set("Content-Type", "application/octet-stream")
	_, err = c.call(ctx, request{method: http.MethodPut, path: fp, header: h, stream: body, length: size, retry: retryUnsent}, nil, &out)
	return out, err
}

// DeleteFile removes path p (a file, a symlink, or a directory with
// everything under it) from workspace ws and returns the revision it
// made.
func (c *Client) DeleteFile(ctx context.Context, ws, p string, opts WriteOptions) (api.Revision, error) {
	var out api.Revision
	fp, err := filePath(ws, p)
	if err != nil {
		return out, err
	}
	opts.Mode = 0
	_, err = c.call(ctx, request{method: http.MethodDelete, path: fp, header: opts.header(), retry: retryUnsent}, nil, &out)
	return out, err
}

// Uploads asks for presigned PUT URLs for the blobs of req the store
// lacks or, with req.Commit, makes the revision of req's files (then the
// answer's Revision is set). A commit is not repeated on another member
// once sent.
func (c *Client) Uploads(ctx context.Context, ws string, req api.UploadRequest, opts WriteOptions) (api.UploadResponse, error) {
	var out api.UploadResponse
	p, err := workspacePath(ws, "uploads")
	if err != nil {
		return out, err
	}
	retry := retrySafe
	if req.Commit {
		retry = retryUnsent
	}
	opts.Mode = 0
	_, err = c.call(ctx, request{method: http.MethodPost, path: p, header: opts.header(), retry: retry}, req, &out)
	return out, err
}

// Archive opens the tar.gz of revision rev (empty: the head) of
// workspace ws. The caller closes the answer's Body.
func (c *Client) Archive(ctx context.Context, ws, rev string) (*File, error) {
	p, err := workspacePath(ws, "archive")
	if err != nil {
		return nil, err
	}
	return c.open(ctx, request{method: http.MethodGet, path: p, query: revQuery("rev", rev), open: true})
}

// Diff returns the changes from revision from to revision to of
// workspace ws, with a text diff of each changed text file (capped).
func (c *Client) Diff(ctx context.Context, ws, from, to string) (api.WorkspaceDiff, error) {
	var out api.WorkspaceDiff
	p, err := workspacePath(ws, "diff")
	if err != nil {
		return out, err
	}
	q := revQuery("from", from)
	if to != "" {
		q.Set("to", to)
	}
	_, err = c.call(ctx, request{method: http.MethodGet, path: p, query: q}, nil, &out)
	return out, err
}

// Restore makes a new revision of workspace ws whose tree is revision
// req.Rev's.
func (c *Client) Restore(ctx context.Context, ws string, req api.RestoreRequest, opts WriteOptions) (api.Revision, error) {
	var out api.Revision
	p, err := workspacePath(ws, "restore")
	if err != nil {
		return out, err
	}
	opts.Mode = 0
	_, err = c.call(ctx, request{method: http.MethodPost, path: p, header: opts.header(), retry: retryUnsent}, req, &out)
	return out, err
}

// Blob sends a request for a blob URL of the local store unchanged to a
// member: rawPath is its escaped path (/v1/blobs/DIGEST), rawQuery its
// signed query, body (nil for none, size bytes, -1 unknown) and header
// (Range, Content-Type...) are sent as they are. The answer is returned
// whatever its status, for the caller to pass on; the caller closes its
// Body. The signature is the authority: the member checks it, not who
// asks.
func (c *Client) Blob(ctx context.Context, method, rawPath, rawQuery string, body io.Reader, size int64, header http.Header) (*File, error) {
	if !strings.HasPrefix(rawPath, "/v1/blobs/") {
		return nil, fmt.Errorf("blob path %q: want /v1/blobs/DIGEST", rawPath)
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, fmt.Errorf("blob query: %w", err)
	}
	r := request{method: method, path: rawPath, query: q, header: header, openAny: true}
	if body != nil {
		r.stream, r.length = body, size
	}
	return c.open(ctx, r)
}

// open sends r, whose answer's body is left unread.
func (c *Client) open(ctx context.Context, r request) (*File, error) {
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	return &File{Status: resp.open.StatusCode, Header: resp.open.Header, Body: resp.open.Body}, nil
}
