package gateway

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/gateway/tools"
	"github.com/rodon-compute/rodon/internal/manifest"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// The file tools' workspaces (gateway/tools): a workspace's revision
// store over the scheduler's workspace API, each write a revision by the
// tool call's step, and the account library read-only. File contents are
// read through the gateway's content cache: a file's bytes are immutable
// by digest and a revision's tree by its id, so a second Grep over the
// same tree reads no file again, and a call at an unchanged head reads
// only which revision is the head.

// toolEnv is the environment of one tool call of a run in workspace ws:
// its writes are authored by author (the call's step).
func (g *Gateway) toolEnv(ctx context.Context, ws string, author api.Author) (tools.Env, error) {
	f, err := g.filesAPI()
	if err != nil {
		return tools.Env{}, err
	}
	lib, err := g.libraryID(ctx)
	if err != nil {
		return tools.Env{}, err
	}
	return tools.Env{
		Workspace: &toolWorkspace{g: g, f: f, ws: ws, author: author},
		Library:   &toolWorkspace{g: g, f: f, ws: lib, readOnly: true},
	}, nil
}

// toolWorkspace is a tools.Workspace over the scheduler's workspace API.
type toolWorkspace struct {
	g        *Gateway
	f        Files
	ws       string
	author   api.Author
	readOnly bool
}

// Head reads the newest revision's tree (an empty one before the first
// revision).
func (w *toolWorkspace) Head(ctx context.Context) (tools.Tree, error) {
	revs, _, err := w.f.Revisions(ctx, w.ws, 1, "")
	if err != nil {
		return nil, fmt.Errorf("read the head of workspace %s: %w", w.ws, w.g.fromScheduler(ctx, err))
	}
	t := &toolTree{w: w}
	if len(revs) == 0 {
		return t, nil
	}
	t.rev = revs[0].ID
	var ok bool
	if t.entries, ok = w.g.contents.tree(w.ws, t.rev); !ok {
		if t.entries, err = w.f.Tree(ctx, w.ws, t.rev, ""); err != nil {
			return nil, fmt.Errorf("read the tree of %s in workspace %s: %w", t.rev, w.ws, w.g.fromScheduler(ctx, err))
		}
		w.g.contents.putTree(w.ws, t.rev, t.entries)
	}
	return t, nil
}

// Commit writes changes from parent as one revision by w's author: one
// file with PutFile, one deletion with DeleteFile, several files through
// the uploads route. A conflict is a *tools.Conflict naming the paths,
// wrapping the gateway's 409 (with its detached revision).
func (w *toolWorkspace) Commit(ctx context.Context, parent string, changes []tools.Change, message string) (api.Revision, error) {
	if w.readOnly {
		return api.Revision{}, fmt.Errorf("workspace %s is the account library: read-only", w.ws)
	}
	if len(changes) == 0 {
		return api.Revision{}, errors.New("commit: no changes")
	}
	opts := client.WriteOptions{Author: w.author, Message: truncateUTF8(message, maxMessage), IfMatch: parent}
	var rev api.Revision
	var err error
	switch c := changes[0]; {
	case len(changes) == 1 && c.Delete:
		rev, err = w.f.DeleteFile(ctx, w.ws, c.Path, opts)
	case len(changes) == 1:
		opts.Mode = c.Mode
		rev, err = w.f.PutFile(ctx, w.ws, c.Path, bytes.NewReader(c.Content), int64(len(c.Content)), opts)
	default:
		rev, err = w.commitMany(ctx, parent, changes, opts)
	}
	if err != nil {
		return rev, w.conflict(ctx, parent, err)
	}
	return w.g.publicRevision(ctx, rev), nil
}

// conflict is err as Commit answers it: a workspace conflict (409) as a
// *tools.Conflict, anything else the gateway's error.
func (w *toolWorkspace) conflict(ctx context.Context, parent string, err error) error {
	var ce *client.Error
	if errors.As(err, &ce) && ce.Status == http.StatusConflict {
		c := &tools.Conflict{Parent: parent, Err: w.g.fromScheduler(ctx, err)}
		if ce.Revision != nil {
			c.Paths, c.Detached = ce.Revision.Conflict, ce.Revision.ID
		}
		return c
	}
	return fmt.Errorf("write workspace %s: %w", w.ws, w.g.fromScheduler(ctx, err))
}

// commitMany commits several changes as one revision: the blobs of the
// files uploaded first (those the store lacks), then the uploads route's
// commit with the files and the deletions.
func (w *toolWorkspace) commitMany(ctx context.Context, parent string, changes []tools.Change, opts client.WriteOptions) (api.Revision, error) {
	req := api.UploadRequest{Parent: parent, Message: opts.Message}
	content := map[string][]byte{}
	for _, c := range changes {
		if c.Delete {
			req.Delete = append(req.Delete, c.Path)
			continue
		}
		d := manifest.Digest(c.Content)
		content[d] = c.Content
		req.Files = append(req.Files, api.UploadFile{Path: c.Path, SHA256: d, Size: int64(len(c.Content)), Mode: c.Mode})
	}
	var resp api.UploadResponse
	var err error
	if len(req.Files) > 0 {
		if resp, err = w.f.Uploads(ctx, w.ws, req, opts); err != nil {
			return api.Revision{}, err
		}
	}
	for d, u := range resp.URLs {
		if err := w.upload(ctx, u, content[d]); err != nil {
			return api.Revision{}, fmt.Errorf("upload blob %s: %w", d, err)
		}
	}
	req.Commit = true
	if resp, err = w.f.Uploads(ctx, w.ws, req, opts); err != nil {
		return api.Revision{}, err
	}
	if resp.Revision == nil {
		return api.Revision{}, errors.New("the scheduler committed no revision")
	}
	return *resp.Revision, nil
}

// upload PUTs b to a presigned URL: a member's (the local store's)
// through the workspace API's blob proxy, any other (S3's) directly.
func (w *toolWorkspace) upload(ctx context.Context, u string, b []byte) error {
	pu, err := url.Parse(u)
	if err != nil {
		return fmt.Errorf("presigned url: %w", err)
	}
	h := http.Header{"Content-Type": {"application/octet-stream"}}
	for _, m := range w.f.URLs() {
		mu, err := url.Parse(m)
		if err != nil || mu.Scheme != pu.Scheme || mu.Host != pu.Host || !strings.HasPrefix(pu.EscapedPath(), "/v1/blobs/") {
			continue
		}
		ans, err := w.f.Blob(ctx, http.MethodPut, pu.EscapedPath(), pu.RawQuery, bytes.NewReader(b), int64(len(b)), h)
		if err != nil {
			return err
		}
		defer ans.Body.Close()
		if ans.Status >= 300 {
			msg, _ := io.ReadAll(io.LimitReader(ans.Body, 512))
			return fmt.Errorf("status %d: %s", ans.Status, bytes.TrimSpace(msg))
		}
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header = h
	resp, err := uploadClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}

// uploadClient PUTs blobs to an object store's presigned URLs.
var uploadClient = &http.Client{Timeout: 5 * time.Minute}

// toolTree is one revision's tree: its entries sorted by path, as the
// scheduler answers them, shared with the cache (never modified).
type toolTree struct {
	w       *toolWorkspace
	rev     string
	entries []api.TreeEntry
}

func (t *toolTree) Revision() string         { return t.rev }
func (t *toolTree) Entries() []api.TreeEntry { return t.entries }

// Open reads a file of the tree: from the content cache by its digest
// when it is there, else from the scheduler (cached when small, its
// digest checked first).
func (t *toolTree) Open(ctx context.Context, p string) (io.ReadCloser, error) {
	i, ok := slices.BinarySearchFunc(t.entries, p, func(e api.TreeEntry, p string) int { return strings.Compare(e.Path, p) })
	if !ok || t.entries[i].Type != string(manifest.File) {
		return nil, fmt.Errorf("%s is not a file of revision %s", p, t.rev)
	}
	e := t.entries[i]
	if b, ok := t.w.g.contents.get(e.SHA256); ok {
		return io.NopCloser(bytes.NewReader(b)), nil
	}
	file, err := t.w.f.File(ctx, t.w.ws, p, client.FileOptions{Rev: t.rev})
	if err != nil {
		return nil, t.w.g.fromScheduler(ctx, err)
	}
	if file.Status != http.StatusOK {
		file.Body.Close()
		return nil, fmt.Errorf("read %s of %s: status %d", p, t.rev, file.Status)
	}
	if e.Size > maxCachedContent {
		return file.Body, nil
	}
	defer file.Body.Close()
	b, err := io.ReadAll(io.LimitReader(file.Body, e.Size+1))
	if err != nil {
		return nil, fmt.Errorf("read %s of %s: %w", p, t.rev, err)
	}
	if d := manifest.Digest(b); d != e.SHA256 {
		return nil, fmt.Errorf("read %s of %s: its content's digest is %s, its entry's %s", p, t.rev, d, e.SHA256)
	}
	t.w.g.contents.put(e.SHA256, b)
	return io.NopCloser(bytes.NewReader(b)), nil
}

// Bounds of the content cache.
const (
	// maxCachedContent: larger files are streamed, never cached.
	maxCachedContent = 1 << 20
	// contentCacheBytes bounds the cache's file contents, treeCacheBytes
	// its trees (counted as their paths and digests).
	contentCacheBytes = 64 << 20
	treeCacheBytes    = 32 << 20
)

// contentCache holds what the file tools read and cannot change: file
// contents by SHA-256, and revisions' trees by workspace and revision,
// the least recently used dropped past their bounds. Its zero value is
// empty and ready; it is safe for concurrent use.
type contentCache struct {
	mu    sync.Mutex
	files lru[[]byte]
	trees lru[[]api.TreeEntry]
}

func (c *contentCache) get(digest string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.files.get(digest)
}

func (c *contentCache) put(digest string, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.files.put(digest, b, int64(len(b)), contentCacheBytes)
}

func (c *contentCache) tree(ws, rev string) ([]api.TreeEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trees.get(ws + "/" + rev)
}

func (c *contentCache) putTree(ws, rev string, entries []api.TreeEntry) {
	var cost int64
	for _, e := range entries {
		cost += int64(len(e.Path)+len(e.SHA256)+len(e.Target)) + 48
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trees.put(ws+"/"+rev, entries, cost, treeCacheBytes)
}

// lru is a map whose least recently used entries go past a total cost.
// Its zero value is empty; its user locks it.
type lru[V any] struct {
	order *list.List // of *lruEntry[V], most recent first
	byKey map[string]*list.Element
	cost  int64
}

type lruEntry[V any] struct {
	key  string
	v    V
	cost int64
}

func (l *lru[V]) get(key string) (V, bool) {
	el, ok := l.byKey[key]
	if !ok {
		var zero V
		return zero, false
	}
	l.order.MoveToFront(el)
	return el.Value.(*lruEntry[V]).v, true
}

func (l *lru[V]) put(key string, v V, cost, max int64) {
	if l.byKey == nil {
		l.byKey, l.order = map[string]*list.Element{}, list.New()
	}
	if _, ok := l.byKey[key]; ok || cost > max {
		return
	}
	l.byKey[key] = l.order.PushFront(&lruEntry[V]{key: key, v: v, cost: cost})
	l.cost += cost
	for l.cost > max {
		el := l.order.Back()
		e := el.Value.(*lruEntry[V])
		l.order.Remove(el)
		delete(l.byKey, e.key)
		l.cost -= e.cost
	}
}
