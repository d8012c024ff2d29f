package gateway

import (
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/manifest"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// Files are served so that nothing uploaded runs in the gateway's origin:
// a type by extension from a fixed table (never sniffed: nosniff), shown
// inline only for the types a browser cannot run (raster images, plain
// text, CSV, JSON), anything else (HTML, SVG, PDF, scripts, unknown) as an
// attachment, and every file answer sandboxed by its own
// Content-Security-Policy whatever the browser does with it.

// fileTypes maps extensions to a type and whether it is shown inline.
var fileTypes = map[string]struct {
	typ    string
	inline bool
}{
	".png": {"image/png", true}, ".jpg": {"image/jpeg", true}, ".jpeg": {"image/jpeg", true},
	".gif": {"image/gif", true}, ".webp": {"image/webp", true},
	".txt": {"text/plain; charset=utf-8", true}, ".md": {"text/plain; charset=utf-8", true},
	".py": {"text/plain; charset=utf-8", true}, ".log": {"text/plain; charset=utf-8", true},
	".csv": {"text/csv; charset=utf-8", true}, ".json": {"application/json", true},
	".svg": {"image/svg+xml", false}, ".html": {"text/html; charset=utf-8", false}, ".htm": {"text/html; charset=utf-8", false},
	".pdf": {"application/pdf", false},
}

// fileCSP is the Content-Security-Policy of every file answer: a
// document opened from it runs nothing and loads nothing.
const fileCSP = "sandbox; default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'"

// setFileHeaders sets the type, disposition and sandbox of file p.
func setFileHeaders(h http.Header, p string) {
	t, ok := fileTypes[strings.ToLower(path.Ext(p))]
	if !ok {
		t.typ = "application/octet-stream"
	}
	disp := "attachment"
	if t.inline {
		disp = "inline"
	}
	h.Set("Content-Type", t.typ)
	cd := mime.FormatMediaType(disp, map[string]string{"filename": path.Base(p)})
	if cd == "" {
		cd = disp // a name it cannot carry: no name, never no disposition
	}
	h.Set("Content-Disposition", cd)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", fileCSP)
}

// TypeHeader says, on a file answer, what the path is: "symlink" for a
// link (the body is then its target: a link is never followed).
const TypeHeader = "X-Rodon-Type"

// TargetHeader is a symlink's target, on its answer.
const TargetHeader = "X-Rodon-Target"

// RevisionHeader names, on a file answer, the revision it was read from
// (when the scheduler says).
const RevisionHeader = "X-Rodon-Revision"

func (g *Gateway) handleGetFile(c *call) error {
	ws, f, err := g.filesWorkspace(c, false)
	if err != nil {
		return err
	}
	p, err := filePath(c)
	if err != nil {
		return err
	}
	rev := c.r.URL.Query().Get("rev")
	if err := revParam("query parameter rev", rev); err != nil {
		return err
	}
	// The tree says what p is: a link is answered as the link, from the
	// tree, and only a file is read.
	entries, err := f.Tree(c.ctx, ws, rev, p)
	if err != nil {
		return g.fromScheduler(c.ctx, err)
	}
	var e *api.TreeEntry
	dir := false
	for i := range entries {
		switch {
		case entries[i].Path == p:
			e = &entries[i]
		case strings.HasPrefix(entries[i].Path, p+"/"):
			dir = true // a directory is implied by what is under it
		}
	}
	switch {
	case e == nil && dir:
		return badRequest("%s is a directory: list it with GET /v1/workspaces/%s/tree?path=%s", p, ws, url.QueryEscape(p))
	case e == nil:
		return notFound("no file %s in workspace %s", p, ws)
	case e.Type == string(manifest.Dir):
		return badRequest("%s is a directory: list it with GET /v1/workspaces/%s/tree?path=%s", p, ws, url.QueryEscape(p))
	case e.Type == string(manifest.Symlink):
		h := c.w.Header()
		setFileHeaders(h, p+".link")
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set(TypeHeader, "symlink")
		h.Set(TargetHeader, url.PathEscape(e.Target))
		c.w.WriteHeader(http.StatusOK)
		io.WriteString(c.w, e.Target)
		return nil
	case e.Type != string(manifest.File):
		return notFound("no file %s in workspace %s", p, ws)
	}
	etag := `"` + e.SHA256 + `"`
	if inm := c.r.Header.Get("If-None-Match"); inm != "" && (inm == etag || inm == "*") {
		c.w.Header().Set("ETag", etag)
		c.w.WriteHeader(http.StatusNotModified)
		return nil
	}
	if c.r.Method == http.MethodHead {
		// The tree has all a HEAD answers.
		h := c.w.Header()
		setFileHeaders(h, p)
		h.Set("ETag", etag)
		h.Set("Accept-Ranges", "bytes")
		h.Set("Content-Length", strconv.FormatInt(e.Size, 10))
		c.w.WriteHeader(http.StatusOK)
		return nil
	}
	file, err := f.File(c.ctx, ws, p, client.FileOptions{Rev: rev, Range: c.r.Header.Get("Range")})
	if err != nil {
		return g.fromScheduler(c.ctx, err)
	}
	defer file.Body.Close()
	h := c.w.Header()
	setFileHeaders(h, p)
	h.Set("ETag", etag)
	if t := file.Header.Get("ETag"); t != "" {
		h.Set("ETag", t)
	}
	h.Set("Accept-Ranges", "bytes")
	copyHeaders(h, file.Header, "Content-Length", "Content-Range", RevisionHeader, client.ModeHeader)
	c.w.WriteHeader(file.Status)
	io.Copy(c.w, file.Body)
	return nil
}

func copyHeaders(dst, src http.Header, names ...string) {
	for _, n := range names {
		if v := src.Get(n); v != "" {
			dst.Set(n, v)
		}
	}
}

func (g *Gateway) handleArchive(c *call) error {
	ws, f, err := g.filesWorkspace(c, false)
	if err != nil {
		return err
	}
	rev := c.r.URL.Query().Get("rev")
	if err := revParam("query parameter rev", rev); err != nil {
		return err
	}
	file, err := f.Archive(c.ctx, ws, rev)
	if err != nil {
		return g.fromScheduler(c.ctx, err)
	}
	defer file.Body.Close()
	name := ws
	if rev != "" {
		name += "-" + rev
	}
	h := c.w.Header()
	h.Set("Content-Type", "application/gzip")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name + ".tar.gz"}))
	h.Set("Content-Security-Policy", fileCSP)
	copyHeaders(h, file.Header, "Content-Length")
	c.w.WriteHeader(file.Status)
	io.Copy(c.w, file.Body)
	return nil
}

func (g *Gateway) handleUploads(c *call) error {
	ws, f, err := g.filesWorkspace(c, true)
	if err != nil {
		return err
	}
	var req api.UploadRequest
	if err := decodeBodyMax(c.w, c.r, &req, maxUploadBody); err != nil {
		return err
	}
	if len(req.Files)+len(req.Delete) == 0 || len(req.Files) > manifest.DefaultLimits.MaxEntries || len(req.Delete) > manifest.DefaultLimits.MaxEntries {
		return badRequest("field \"files\": want 1 to %d files (or deletions)", manifest.DefaultLimits.MaxEntries)
	}
	for i, d := range req.Delete {
		p, err := manifest.Clean(d, manifest.DefaultLimits)
		if err != nil {
			return badRequest("delete[%d]: %v", i, err)
		}
		req.Delete[i] = p
	}
	for i := range req.Files {
		u := &req.Files[i]
		p, err := manifest.Clean(u.Path, manifest.DefaultLimits)
		if err != nil {
			return badRequest("files[%d].path: %v", i, err)
		}
		u.Path = p
		if err := manifest.CheckDigest(u.SHA256); err != nil {
			return badRequest("files[%d].sha256: %v", i, err)
		}
		if u.Size < 0 {
			return badRequest("files[%d].size %d: want the file's size in bytes", i, u.Size)
		}
		if u.Size > g.maxFileSize() {
			return g.tooLarge(u.Size)
		}
		if u.Mode != 0 && u.Mode != 0o755 && u.Mode != 0o644 {
			return badRequest("files[%d].mode %o: want 755 or 644 (octal; 0 is 644)", i, u.Mode)
		}
	}
	if len(req.Files) == 1 {
		c.auditPath = req.Files[0].Path
	}
	if err := revParam("field \"parent\"", req.Parent); err != nil {
		return err
	}
	opts, err := writeOptions(c, req.Message)
	if err != nil {
		return err
	}
	opts.IfMatch = req.Parent
	resp, err := f.Uploads(c.ctx, ws, req, opts)
	if err != nil {
		return g.fromScheduler(c.ctx, err)
	}
	if resp.URLs == nil {
		resp.URLs = map[string]string{}
	}
	for d, u := range resp.URLs {
		resp.URLs[d] = g.blobURL(f, u)
	}
	status := http.StatusOK
	if resp.Revision != nil {
		rev := g.publicRevision(c.ctx, *resp.Revision)
		resp.Revision, c.auditRev, status = &rev, rev.ID, http.StatusCreated
	}
	return c.json(status, resp)
}

// blobURL is u, a presigned URL the scheduler made, as the caller can use
// it: one of a member's own /v1/blobs/ (the local store's) is the
// gateway's, which proxies it unchanged; any other (S3's) is as it is.
func (g *Gateway) blobURL(f Files, u string) string {
	pu, err := url.Parse(u)
	if err != nil || !strings.HasPrefix(pu.EscapedPath(), "/v1/blobs/") {
		return u
	}
	for _, m := range f.URLs() {
		mu, err := url.Parse(m)
		if err == nil && mu.Scheme == pu.Scheme && mu.Host == pu.Host {
			return g.cfg.Site + pu.EscapedPath() + "?" + pu.RawQuery
		}
	}
	return u
}

// handleBlob proxies a local store's blob URL to a member, unchanged and
// streamed both ways. It needs no identity: the member checks the URL's
// signature, which names the blob, the method, the size and the expiry.
// A body is capped at --max-file-size.
func (g *Gateway) handleBlob(w http.ResponseWriter, r *http.Request) {
	f, err := g.filesAPI()
	if err != nil {
		he, _ := asHTTPError(err)
		writeError(w, he)
		return
	}
	if err := manifest.CheckDigest(r.PathValue("digest")); err != nil {
		writeError(w, &httpError{Status: http.StatusBadRequest, Code: api.CodeBadRequest, Message: "blob: " + err.Error()})
		return
	}
	h := http.Header{}
	copyHeaders(h, r.Header, "Range", "If-None-Match", "Content-Type")
	var body io.Reader
	var cb *capped
	if r.Method == http.MethodPut {
		if r.ContentLength > g.maxFileSize() {
			he, _ := asHTTPError(g.tooLarge(r.ContentLength))
			writeError(w, he)
			return
		}
		cb = &capped{r: r.Body, left: g.maxFileSize()}
		body = cb
	}
	ans, err := f.Blob(r.Context(), r.Method, r.URL.EscapedPath(), r.URL.RawQuery, body, r.ContentLength, h)
	if err != nil {
		if cb != nil && cb.over {
			err = g.tooLarge(-1)
		}
		he, internal := asHTTPError(err)
		if internal {
			g.log.Error("proxy blob", "method", r.Method, "error", err)
		}
		writeError(w, he)
		return
	}
	defer ans.Body.Close()
	copyHeaders(w.Header(), ans.Header, "Content-Length", "Content-Range", "Accept-Ranges", "ETag", "Content-Type")
	w.Header().Set("Content-Security-Policy", fileCSP)
	if w.Header().Get("Content-Type") == "" || r.Method == http.MethodGet && ans.Status < 300 {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", "attachment")
	}
	w.WriteHeader(ans.Status)
	io.Copy(w, ans.Body)
}
