package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/manifest"
	"github.com/rodon-compute/rodon/internal/size"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// Files is the scheduler's workspace API as the gateway uses it
// (docs/design/workspaces.md, "Scheduler workspace API"); *client.Client
// implements it. The gateway holds no blob store: every byte of a file
// goes through here, streamed.
type Files interface {
	Revisions(ctx context.Context, ws string, limit int, cursor string) ([]api.Revision, string, error)
	Revision(ctx context.Context, ws, rev string) (api.Revision, error)
	Tree(ctx context.Context, ws, rev, path string) ([]api.TreeEntry, error)
	File(ctx context.Context, ws, p string, opts client.FileOptions) (*client.File, error)
	PutFile(ctx context.Context, ws, p string, body io.Reader, size int64, opts client.WriteOptions) (api.Revision, error)
	DeleteFile(ctx context.Context, ws, p string, opts client.WriteOptions) (api.Revision, error)
	Uploads(ctx context.Context, ws string, req api.UploadRequest, opts client.WriteOptions) (api.UploadResponse, error)
	Archive(ctx context.Context, ws, rev string) (*client.File, error)
	Diff(ctx context.Context, ws, from, to string) (api.WorkspaceDiff, error)
	Restore(ctx context.Context, ws string, req api.RestoreRequest, opts client.WriteOptions) (api.Revision, error)
	// Blob sends a local store's blob request to a member unchanged.
	Blob(ctx context.Context, method, rawPath, rawQuery string, body io.Reader, size int64, header http.Header) (*client.File, error)
	// URLs are the members' base URLs: a presigned URL under one of them
	// is rewritten to the gateway's own /v1/blobs/.
	URLs() []string
}

// Bounds of --max-file-size: one file written through the gateway.
const (
	DefaultMaxFileSize = 1 << 30
	// MaxMaxFileSize is the largest file a tree may hold.
	MaxMaxFileSize = 64 << 30
)

// Bounds of a diff's text (docs/design/workspaces.md, "Limits").
const (
	maxDiffFiles    = 100
	maxDiffFileText = 1 << 20
	// maxUploadBody bounds POST uploads: a revision's files by digest.
	maxUploadBody = 32 << 20
	// maxMessage bounds a revision's message, in bytes (the scheduler's
	// bound of a reason).
	maxMessage = 1024
)

// filesAPI returns the scheduler's workspace API, or an error answer
// when the gateway was built without one.
func (g *Gateway) filesAPI() (Files, error) {
	if g.files == nil {
		return nil, &httpError{Status: http.StatusNotImplemented, Code: "not_implemented",
			Message: "this gateway has no workspace API: its step API does not serve files"}
	}
	return g.files, nil
}

// filesWorkspace checks that the caller may read (write: change) the
// files of the workspace the URL names, and returns it with the API. The
// account library is read by everyone in the organisation and written by
// its admins only.
func (g *Gateway) filesWorkspace(c *call, write bool) (string, Files, error) {
	f, err := g.filesAPI()
	if err != nil {
		return "", nil, err
	}
	ws := c.r.PathValue("id")
	c.target, c.auditWS = ws, ws
	lib, err := g.libraryID(c.ctx)
	if err != nil {
		return "", nil, err
	}
	if ws == lib {
		if write && (c.p.Role < api.RoleAdmin || len(c.p.Workspaces) > 0) {
			return "", nil, forbidden("only an admin of the whole organisation changes the account library; %s %s is %s", c.p.actor.Kind, c.p.actor.ID, c.p.Role)
		}
		return ws, f, nil
	}
	return ws, f, g.checkWorkspace(c, "workspace", ws)
}

// filePath is the file path of the URL, decoded once (as every URL
// path is), in its stored form: anything manifest.Clean refuses is a 400
// naming the problem, so no "..", absolute path, NUL, control character
// or backslash goes further, however it was encoded.
func filePath(c *call) (string, error) {
	p, err := manifest.Clean(c.r.PathValue("path"), manifest.DefaultLimits)
	if err != nil {
		return "", badRequest("file path: %v", err)
	}
	c.auditPath = p
	return p, nil
}

// refuseUncleanPaths answers 400 for a workspace URL whose path has ".",
// ".." or empty components (after decoding): the mux would redirect it to
// a cleaned path, which may name another file than the caller wrote.
func refuseUncleanPaths(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if strings.HasPrefix(p, "/v1/workspaces/") && cleanURLPath(p) != p {
			msg := fmt.Sprintf("path %q has empty, \".\" or \"..\" components", truncateText(p, 200))
			if i := strings.Index(p, "/files/"); i > 0 {
				if _, err := manifest.Clean(p[i+len("/files/"):], manifest.DefaultLimits); err != nil {
					msg = "file path: " + err.Error()
				}
			}
			writeError(w, &httpError{Status: http.StatusBadRequest, Code: api.CodeBadRequest, Message: msg})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// cleanURLPath is p as ServeMux cleans it (path.Clean, keeping a final
// slash).
func cleanURLPath(p string) string {
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}

// revParam checks an optional revision id given by the caller
// (cluster.ValidateRevisionID). The id is checked as the error quotes it,
// cut to 80 bytes: a longer one is refused either way (at most 63, and
// the cut ends in "...").
func revParam(name, rev string) error {
	if rev == "" {
		return nil
	}
	if err := cluster.ValidateRevisionID(truncateText(rev, 80)); err != nil {
		return badRequest("%s: %v", name, err)
	}
	return nil
}

// writeOptions are the caller's author and the request's message and
// If-Match, checked.
func writeOptions(c *call, message string) (client.WriteOptions, error) {
	opts := client.WriteOptions{Author: api.Author{Kind: c.p.actor.Kind, ID: c.p.actor.ID}, Message: message}
	if len(message) > maxMessage || !utf8.ValidString(message) || strings.IndexFunc(message, unicode.IsControl) >= 0 {
		return opts, badRequest("message: want at most %d bytes of one line of UTF-8", maxMessage)
	}
	opts.IfMatch = strings.Trim(c.r.Header.Get("If-Match"), `"`)
	if err := revParam("If-Match", opts.IfMatch); err != nil {
		return opts, err
	}
	return opts, nil
}

// fromScheduler turns the scheduler's answer to a workspace call into
// the caller's: its refusals (bad path, no such revision or file,
// conflict, precondition, too large, bad range) keep their status and
// code, their message scrubbed; anything else is asHTTPError's.
func (g *Gateway) fromScheduler(ctx context.Context, err error) error {
	var ce *client.Error
	if errors.As(err, &ce) {
		switch ce.Status {
		case http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusPreconditionFailed,
			http.StatusRequestEntityTooLarge, http.StatusRequestedRangeNotSatisfiable:
			he := &httpError{Status: ce.Status, Code: ce.Code, Message: Scrub(ce.Message, g.nodes.known(ctx)...)}
			if ce.Revision != nil {
				rev := g.publicRevision(ctx, *ce.Revision)
				he.Revision = &rev
			}
			return he
		}
	}
	return err
}

// publicRevision is rev as the API shows it: a step's message is the
// scheduler's text, scrubbed; a person's or a key's is their own.
func (g *Gateway) publicRevision(ctx context.Context, rev api.Revision) api.Revision {
	if rev.Author.Kind == api.AuthorStep {
		rev.Message = Scrub(rev.Message, g.nodes.known(ctx)...)
		// A step of a run the gateway drove names its run (its id is
		// the run's and its index); other steps (schedctl's) name none.
		if run, _, err := parseStepID(rev.Author.ID); err == nil && rev.Run == "" {
			rev.Run = run
		}
	}
	return rev
}

func (g *Gateway) handleRevisions(c *call) error {
	ws, f, err := g.filesWorkspace(c, false)
	if err != nil {
		return err
	}
	list := "revisions/" + ws
	pg, err := parsePage(c.r.URL.Query(), list)
	if err != nil {
		return err
	}
	revs, next, err := f.Revisions(c.ctx, ws, pg.limit, pg.at.store)
	if err != nil {
		return g.fromScheduler(c.ctx, err)
	}
	out := make([]api.Revision, 0, len(revs))
	for _, r := range revs {
		out = append(out, g.publicRevision(c.ctx, r))
	}
	return c.page(list, out, position{store: next})
}

func (g *Gateway) handleRevision(c *call) error {
	ws, f, err := g.filesWorkspace(c, false)
	if err != nil {
		return err
	}
	id := c.r.PathValue("rev")
	if id == "" {
		return badRequest("revision: want a revision id such as rev-...")
	}
	if err := revParam("revision", id); err != nil {
		return err
	}
	rev, err := f.Revision(c.ctx, ws, id)
	if err != nil {
		return g.fromScheduler(c.ctx, err)
	}
	return c.json(http.StatusOK, g.publicRevision(c.ctx, rev))
}

func (g *Gateway) handleTree(c *call) error {
	ws, f, err := g.filesWorkspace(c, false)
	if err != nil {
		return err
	}
	q := c.r.URL.Query()
	rev, p := q.Get("rev"), q.Get("path")
	if err := revParam("query parameter rev", rev); err != nil {
		return err
	}
	if p != "" {
		if p, err = manifest.Clean(p, manifest.DefaultLimits); err != nil {
			return badRequest("query parameter path: %v", err)
		}
	}
	entries, err := f.Tree(c.ctx, ws, rev, p)
	if err != nil {
		return g.fromScheduler(c.ctx, err)
	}
	if entries == nil {
		entries = []api.TreeEntry{}
	}
	return c.json(http.StatusOK, entries)
}

// maxFileSize is --max-file-size.
func (g *Gateway) maxFileSize() int64 { return g.cfg.MaxFileSize }

// tooLarge is the answer for a file over --max-file-size.
func (g *Gateway) tooLarge(n int64) error {
	what := "the body is larger"
	if n >= 0 {
		what = size.Format(n) + " is larger"
	}
	return &httpError{Status: http.StatusRequestEntityTooLarge, Code: api.CodeTooLarge,
		Message: fmt.Sprintf("file too large: %s than this gateway's --max-file-size of %s", what, size.Format(g.maxFileSize()))}
}

// capped reads at most max bytes of r; more sets over and fails the read,
// so the request to the scheduler fails and nothing is committed.
type capped struct {
	r    io.Reader
	left int64
	over bool
}

var errOverMax = errors.New("request body over --max-file-size")

func (c *capped) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, errOverMax
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		c.over = true
		return 0, errOverMax
	}
	return n, err
}

func (g *Gateway) handlePutFile(c *call) error {
	ws, f, err := g.filesWorkspace(c, true)
	if err != nil {
		return err
	}
	p, err := filePath(c)
	if err != nil {
		return err
	}
	opts, err := writeOptions(c, c.r.Header.Get(client.MessageHeader))
	if err != nil {
		return err
	}
	switch m := c.r.Header.Get(client.ModeHeader); m {
	case "":
	case "755", "644":
		v, _ := strconv.ParseUint(m, 8, 32)
		opts.Mode = uint32(v)
	default:
		return badRequest("header %s %q: want 755 or 644", client.ModeHeader, truncateText(m, 20))
	}
	if c.r.ContentLength > g.maxFileSize() {
		return g.tooLarge(c.r.ContentLength)
	}
	body := &capped{r: c.r.Body, left: g.maxFileSize()}
	rev, err := f.PutFile(c.ctx, ws, p, body, c.r.ContentLength, opts)
	if body.over {
		return g.tooLarge(-1)
	}
	if err != nil {
		return g.fromScheduler(c.ctx, err)
	}
	c.auditRev = rev.ID
	return c.json(http.StatusCreated, g.publicRevision(c.ctx, rev))
}

func (g *Gateway) handleDeleteFile(c *call) error {
	ws, f, err := g.filesWorkspace(c, true)
	if err != nil {
		return err
	}
	p, err := filePath(c)
	if err != nil {
		return err
	}
	opts, err := writeOptions(c, c.r.Header.Get(client.MessageHeader))
	if err != nil {
		return err
	}
	rev, err := f.DeleteFile(c.ctx, ws, p, opts)
	if err != nil {
		return g.fromScheduler(c.ctx, err)
	}
	c.auditRev = rev.ID
	return c.json(http.StatusOK, g.publicRevision(c.ctx, rev))
}

func (g *Gateway) handleRestore(c *call) error {
	ws, f, err := g.filesWorkspace(c, true)
	if err != nil {
		return err
	}
	var req api.RestoreRequest
	if err := c.decode(&req); err != nil {
		return err
	}
	if req.Rev == "" {
		return badRequest("field \"rev\": want the revision to restore, such as rev-...")
	}
	if err := revParam("field \"rev\"", req.Rev); err != nil {
		return err
	}
	opts, err := writeOptions(c, req.Message)
	if err != nil {
		return err
	}
	rev, err := f.Restore(c.ctx, ws, req, opts)
	if err != nil {
		return g.fromScheduler(c.ctx, err)
	}
	c.auditRev = rev.ID
	return c.json(http.StatusCreated, g.publicRevision(c.ctx, rev))
}

func (g *Gateway) handleDiff(c *call) error {
	ws, f, err := g.filesWorkspace(c, false)
	if err != nil {
		return err
	}
	q := c.r.URL.Query()
	from, to := q.Get("from"), q.Get("to")
	for _, p := range []struct{ name, v string }{{"from", from}, {"to", to}} {
		if err := revParam("query parameter "+p.name, p.v); err != nil {
			return err
		}
	}
	d, err := f.Diff(c.ctx, ws, from, to)
	if err != nil {
		return g.fromScheduler(c.ctx, err)
	}
	capDiff(&d)
	return c.json(http.StatusOK, d)
}

// capDiff bounds a diff's text: maxDiffFiles files, maxDiffFileText
// bytes each (marked truncated).
func capDiff(d *api.WorkspaceDiff) {
	if d.Text == nil {
		d.Text = []api.FileDiff{}
	}
	if len(d.Text) > maxDiffFiles {
		d.Text = d.Text[:maxDiffFiles]
	}
	for i := range d.Text {
		if len(d.Text[i].Diff) > maxDiffFileText {
			d.Text[i].Diff, d.Text[i].Truncated = truncateUTF8(d.Text[i].Diff, maxDiffFileText), true
		}
	}
	for _, l := range []*[]string{&d.Changes.Added, &d.Changes.Modified, &d.Changes.Removed} {
		if *l == nil {
			*l = []string{}
		}
	}
}
