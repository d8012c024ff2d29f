package scheduler

import (
	"bytes"
	"container/list"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/blob"
	"github.com/rodon-compute/rodon/internal/manifest"
)

// The leader's side of workspace commits (docs/design/workspaces.md, 1):
// every writer, a step's exit or a write of the workspace API, computes
// the tree to commit from its base, the head and its own tree under the
// workspace's lock (commits of one workspace are serialised on the
// leader), and proposes it as a compare-and-set on the head.

// errNoStore answers what needs the blob store on a member without one.
var errNoStore = &httpError{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable,
	Message: "this scheduler member has no blob store (scheduler serve --blob-store)"}

// workspaceLocks serialises the commits of each workspace on the leader.
type workspaceLocks struct {
	mu    sync.Mutex
	locks map[string]*wsLock
}

type wsLock struct {
	mu    sync.Mutex
	users int
}

// lock locks workspace ws and returns its unlock.
func (l *workspaceLocks) lock(ws string) func() {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = make(map[string]*wsLock)
	}
	k := l.locks[ws]
	if k == nil {
		k = &wsLock{}
		l.locks[ws] = k
	}
	k.users++
	l.mu.Unlock()
	k.mu.Lock()
	return func() {
		k.mu.Unlock()
		l.mu.Lock()
		if k.users--; k.users == 0 {
			delete(l.locks, ws)
		}
		l.mu.Unlock()
	}
}

// manifestCache keeps parsed manifests by digest, least recently used
// dropped first, bounded by their entries in all. Cached manifests are
// shared: no caller changes one.
type manifestCache struct {
	mu      sync.Mutex
	max     int
	entries int
	order   *list.List // of *cachedManifest, most recent first
	byID    map[string]*list.Element
}

type cachedManifest struct {
	digest string
	m      *manifest.Manifest
}

// manifestCacheEntries bounds the entries of the cached manifests: ten
// trees of the largest size.
const manifestCacheEntries = 10 * 100_000

func newManifestCache(max int) *manifestCache {
	return &manifestCache{max: max, order: list.New(), byID: make(map[string]*list.Element)}
}

func (c *manifestCache) get(digest string) (*manifest.Manifest, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byID[digest]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*cachedManifest).m, true
}

func (c *manifestCache) put(digest string, m *manifest.Manifest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byID[digest]; ok || len(m.Entries) > c.max {
		return
	}
	c.byID[digest] = c.order.PushFront(&cachedManifest{digest, m})
	c.entries += len(m.Entries)
	for c.entries > c.max {
		last := c.order.Back()
		cm := last.Value.(*cachedManifest)
		c.order.Remove(last)
		delete(c.byID, cm.digest)
		c.entries -= len(cm.m.Entries)
	}
}

// remove drops digest from the cache.
func (c *manifestCache) remove(digest string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byID[digest]; ok {
		c.order.Remove(e)
		delete(c.byID, digest)
		c.entries -= len(e.Value.(*cachedManifest).m.Entries)
	}
}

// errManifest is what a manifest that cannot be used wraps (absent,
// not a manifest, over the limits, not of its digest).
var errManifest = errors.New("invalid manifest")

// manifestOf reads, checks (manifest.DefaultLimits) and caches the
// manifest blob digest; "" is the empty tree.
func (s *Server) manifestOf(ctx context.Context, digest string) (*manifest.Manifest, error) {
	if digest == "" {
		return &manifest.Manifest{}, nil
	}
	if s.blobs == nil {
		return nil, errNoStore
	}
	if m, ok := s.manifests.get(digest); ok {
		return m, nil
	}
	if err := manifest.CheckDigest(digest); err != nil {
		return nil, fmt.Errorf("manifest: %w: %w", err, errManifest)
	}
	rc, _, err := s.blobs.Open(ctx, digest)
	if errors.Is(err, blob.ErrNotFound) {
		return nil, fmt.Errorf("manifest %s: not in the blob store: %w", digest, errManifest)
	} else if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", digest, err)
	}
	defer rc.Close()
	h := sha256.New()
	m, err := manifest.Decode(io.TeeReader(rc, h), manifest.MaxEncodedBytes, manifest.DefaultLimits)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w: %w", digest, err, errManifest)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != digest {
		return nil, fmt.Errorf("manifest %s: its bytes hash to %s: %w", digest, got, errManifest)
	}
	s.manifests.put(digest, m)
	return m, nil
}

// checkSizes checks m's files against the size limits of lim (the others
// are manifest.DefaultLimits', which manifestOf checked).
func checkSizes(m *manifest.Manifest, lim manifest.Limits) error {
	var total int64
	for _, e := range m.Entries {
		if e.Size > lim.MaxFileBytes {
			return fmt.Errorf("file %q of %d bytes, more than the limit of %d: %w", e.Path, e.Size, lim.MaxFileBytes, errManifest)
		}
		total += e.Size
	}
	if total > lim.MaxTotalBytes {
		return fmt.Errorf("files of %d bytes, more than the limit of %d: %w", total, lim.MaxTotalBytes, errManifest)
	}
	return nil
}

// putManifest stores m and returns its digest.
func (s *Server) putManifest(ctx context.Context, m *manifest.Manifest) (string, error) {
	b, digest := manifest.Encode(m)
	if err := s.blobs.Put(ctx, digest, bytes.NewReader(b), int64(len(b))); err != nil {
		return "", fmt.Errorf("store manifest %s: %w", digest, err)
	}
	s.manifests.put(digest, m)
	return digest, nil
}

// revisionManifest returns the tree of revision rev of workspace ws ("":
// the empty tree), or a 404 (412 with ifMatch) naming it.
func (s *Server) revisionManifest(ctx context.Context, ws, rev string) (cluster.Revision, *manifest.Manifest, error) {
	if rev == "" {
		return cluster.Revision{}, &manifest.Manifest{}, nil
	}
	r, ok := s.fsm.State().Revision(rev)
	if !ok || r.Workspace != ws {
		return r, nil, notFound("revision %s: not a revision of workspace %s", rev, ws)
	}
	m, err := s.manifestOf(ctx, r.Manifest)
	return r, m, err
}

var revisionIDEncoding = stepIDEncoding

// newRevisionID returns a fresh random revision id, "rev-" and 16
// characters.
func newRevisionID() string {
	b := make([]byte, 10)
	rand.Read(b)
	return "rev-" + strings.ToLower(revisionIDEncoding.EncodeToString(b))
}

// commitPlan is a revision computed for a writer, ready to propose.
type commitPlan struct {
	cmd cluster.CommitRevision
	// head is the head the writer's base was rebased onto, or that it
	// conflicts with.
	head string
}

// planCommit computes the revision a writer makes: its tree mine (digest
// mineDigest, in the store) made from base (a revision id, "" for the
// empty workspace, with tree baseM). When the head is still base, mine is
// the new head; else mine's changes are rebased onto the head (a rebased
// manifest is written to the store), and a path both changed makes the
// revision detached, with the paths in Conflict. rev holds the author,
// message and step; the rest is filled in. The caller holds the
// workspace's lock.
func (s *Server) planCommit(ctx context.Context, ws, base string, baseM, mine *manifest.Manifest, mineDigest string, rev cluster.Revision) (commitPlan, error) {
	w, _ := s.fsm.State().Workspace(ws)
	rev.ID, rev.Workspace, rev.CreatedAt = newRevisionID(), ws, s.now()
	rev.Number, rev.Detached, rev.Conflict = 0, false, nil
	plan := commitPlan{head: w.Head, cmd: cluster.CommitRevision{ExpectHead: w.Head}}
	parentM, tree, digest := baseM, mine, mineDigest
	rev.Parent = base
	if w.Head != base {
		_, headM, err := s.revisionManifest(ctx, ws, w.Head)
		if err != nil {
			return plan, err
		}
		merged, conflicts := manifest.Rebase(baseM, headM, mine)
		if len(conflicts) > 0 {
			rev.Detached = true
			rev.Conflict = conflicts[:min(len(conflicts), api.MaxRevisionPaths)]
		} else {
			rev.Parent, parentM, tree = w.Head, headM, merged
			if digest, err = s.putManifest(ctx, merged); err != nil {
				return plan, err
			}
		}
	}
	rev.Manifest = digest
	rev.Files, rev.Bytes = 0, tree.TotalBytes()
	for _, e := range tree.Entries {
		if e.Type == manifest.File {
			rev.Files++
		}
	}
	rev.Changes = capChanges(manifest.Diff(parentM, tree))
	plan.cmd.Revision = rev
	return plan, nil
}

// conflictReason is the reason of a writer refused as a conflict.
func conflictReason(plan commitPlan) string {
	r := plan.cmd.Revision
	since := r.Parent
	if since == "" {
		since = "the empty workspace"
	}
	return fmt.Sprintf("workspace conflict: %s changed by %s since %s", r.Conflict[0], plan.head, since)
}

// blobTTL is how long a step's URLs last: its timeout, its start timeout
// and ten minutes, at most blob.MaxTTL.
func (s *Server) blobTTL(spec cluster.StepSpec) time.Duration {
	return min(limitsOfSpec(spec).Timeout+s.cfg.StartTimeout+10*time.Minute, blob.MaxTTL)
}

// stepLimits are the manifest limits of a step's tree: its workspace
// limit bounds a file and the whole.
func stepLimits(spec cluster.StepSpec) manifest.Limits {
	l := manifest.DefaultLimits
	wb := limitsOfSpec(spec).WorkspaceBytes
	l.MaxFileBytes, l.MaxTotalBytes = min(l.MaxFileBytes, wb), min(l.MaxTotalBytes, wb)
	return l
}

// missingBlobs checks that every file of mine that base lacks is in the
// store, whole (Verify).
func (s *Server) missingBlobs(ctx context.Context, baseM, mine *manifest.Manifest) error {
	have := baseM.Digests()
	for d := range mine.Digests() {
		if _, ok := have[d]; ok {
			continue
		}
		if err := s.blobs.Verify(ctx, d); err != nil {
			return fmt.Errorf("blob %s: %w", d, err)
		}
	}
	return nil
}

// warnLocalStore warns when this member's own local store (DATA-DIR/blobs)
// serves a cluster of more than one member: a revision's blobs are then on
// one member's disk only (docs/design/workspaces.md, 0.6). A directory
// the members share (local:///PATH) or S3 is what a cluster wants.
func (s *Server) warnLocalStore() {
	if !s.ownBlobs || s.cfg.BlobStore != "local" {
		return
	}
	if n := len(s.fsm.State().Members()); n > 1 {
		s.logger.Warn("a local blob store in this member's data dir serves a cluster of several members: "+
			"workspace contents live on one member's disk; use --blob-store local:///SHARED/PATH or s3://...", "members", n)
	}
}
