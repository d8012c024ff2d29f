package agentd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/manifest"
	"github.com/rodon-compute/rodon/internal/treecopy"
)

// An attempt's trees: what prepareTrees made and the read-back needs.
type trees struct {
	// dir is DATA-DIR/trees/{sandbox id}.
	dir string
	// base is the workspace's starting tree, nil until known (an adopted
	// attempt fetches it again for its result).
	base *manifest.Manifest
	// releases unpin the attempt's blobs in the cache.
	releases []func()
}

func (r *stepRun) treesDir() string {
	return filepath.Join(treesDir(r.a.rt.cfg), Step{ID: r.id, Attempt: r.attempt}.sandboxID())
}

// prepareTrees materialises the step's starting revision and library in
// the attempt's directory and points st at them.
func (r *stepRun) prepareTrees(ctx context.Context, st *Step) error {
	ws, lib := r.spec.WorkspaceAccess, r.spec.LibraryAccess
	if ws == nil && lib == nil {
		return nil
	}
	r.trees.dir = r.treesDir()
	if err := os.MkdirAll(filepath.Dir(r.trees.dir), 0o755); err != nil {
		return fmt.Errorf("create trees directory: %w", err)
	}
	// What an earlier agent left of this attempt is not adopted: start
	// from the revision again.
	if err := os.RemoveAll(r.trees.dir); err != nil {
		return fmt.Errorf("remove old tree: %w", err)
	}
	if err := os.Mkdir(r.trees.dir, 0o755); err != nil {
		return fmt.Errorf("create the attempt's tree directory: %w", err)
	}
	// A fetch that hangs ends when the scheduler gives up on the attempt
	// (or cancels it).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-r.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	if ws != nil {
		dir := filepath.Join(r.trees.dir, "workspace")
		m, release, err := r.a.materialise(ctx, ws, dir, r.limits.WorkspaceBytes)
		if err != nil {
			return err
		}
		r.trees.base = m
		r.trees.releases = append(r.trees.releases, release)
		st.Workspace, st.WorkspacePerm = dir, modes(m)
	}
	if lib != nil {
		// The library is read-only and seen as it is: its files keep the
		// cache's modes (0444).
		dir := filepath.Join(r.trees.dir, "library")
		_, release, err := r.a.materialise(ctx, lib, dir, cluster.MaxLimits.WorkspaceBytes)
		if err != nil {
			return err
		}
		r.trees.releases = append(r.trees.releases, release)
		st.Library = dir
	}
	return nil
}

// removeTrees removes the attempt's directory and unpins its blobs.
func (r *stepRun) removeTrees() {
	for _, rel := range r.trees.releases {
		rel()
	}
	r.trees.releases = nil
	// An adopted attempt's is where its first agent made it.
	if err := os.RemoveAll(r.treesDir()); err != nil {
		r.a.logger.Warn("remove the attempt's tree", "step", r.id, "error", err)
	}
}

// readBack makes the step's workspace directory what the step left (see
// Sandbox.ReadBack), and for a workspace of the store saves it: the
// result to report with the exit, nil when the tree is unchanged or could
// not be saved (a warning event says why). It records a files_changed
// event (in lg too, unless nil) with what changed from the base.
func (r *stepRun) readBack(ctx context.Context, lg *logstore.Log, sb *Sandbox) *cluster.WorkspaceResult {
	changes, err := sb.ReadBack()
	if err != nil {
		r.a.logger.Warn("copy workspace back", "step", r.id, "error", err)
		r.event(ctx, lg, cluster.Event{Time: time.Now().UTC(), Kind: cluster.EventWarning, Message: notCopiedMessage(err),
			Warning: &api.Warning{Cause: api.WarningWorkspaceNotCopied}})
		return nil
	}
	acc := r.spec.WorkspaceAccess
	if acc == nil {
		r.event(ctx, lg, filesChangedEvent(changes, time.Now().UTC()))
		return nil
	}
	res, err := r.saveWorkspace(ctx, lg, acc, sb.Step().Workspace)
	if err != nil {
		r.a.logger.Warn("save workspace", "step", r.id, "error", err)
		r.event(ctx, lg, warning(api.WarningWorkspaceNotSaved, notSavedMessage(err)))
		return nil
	}
	return res
}

func (r *stepRun) event(ctx context.Context, lg *logstore.Log, ev cluster.Event) {
	if lg != nil {
		if err := lg.Event(ev); err != nil {
			r.a.logger.Warn("record workspace event", "step", r.id, "error", err)
		}
	}
	r.report(ctx, "events", func(ctx context.Context) error {
		return r.a.sched.StepEvents(ctx, cluster.StepEvents{Step: r.id, Node: r.a.cfg.Node, Attempt: r.attempt, Events: []cluster.Event{ev}})
	})
}

func warning(cause, msg string) cluster.Event {
	return cluster.Event{Time: time.Now().UTC(), Kind: cluster.EventWarning, Message: msg, Warning: &api.Warning{Cause: cause}}
}

// notSavedMessage is the message of the warning that the workspace was
// not saved after err; err itself goes to the node's log.
func notSavedMessage(err error) string {
	const msg = "workspace not saved: the step's changes are not in a revision"
	if errors.Is(err, errUploadRefused) {
		return msg + " (the scheduler refused the upload)"
	}
	return msg
}

// saveWorkspace builds the manifest of the tree the step left in dir,
// reports its changes from the base, and uploads what the store lacks.
func (r *stepRun) saveWorkspace(ctx context.Context, lg *logstore.Log, acc *cluster.WorkspaceAccess, dir string) (*cluster.WorkspaceResult, error) {
	if r.trees.base == nil {
		// An adopted attempt: the base is fetched again.
		m, err := r.a.fetchManifest(ctx, acc)
		if err != nil {
			return nil, err
		}
		r.trees.base = m
	}
	l := manifest.DefaultLimits
	l.MaxFileBytes, l.MaxTotalBytes = r.limits.WorkspaceBytes, r.limits.WorkspaceBytes
	m, drops, release, err := buildResult(dir, r.a.cache, l)
	if err != nil {
		return nil, err
	}
	defer release()
	if len(drops) > 0 {
		r.event(ctx, lg, droppedEvent(drops, warning))
	}
	// The event says what the revision holds: it is sent once the
	// result is uploaded (or there is none to upload).
	diff := manifest.Diff(r.trees.base, m)
	changed := func() {
		r.event(ctx, lg, filesChangedEvent(treecopy.Changes{Added: diff.Added, Modified: diff.Modified, Removed: diff.Removed}, time.Now().UTC()))
	}
	b, digest := manifest.Encode(m)
	base := acc.Manifest
	if digest == base || base == "" && len(m.Entries) == 0 {
		changed()
		return nil, nil // unchanged: no revision
	}
	_, relManifest, err := r.a.cache.Put(b)
	if err != nil {
		return nil, fmt.Errorf("keep the result's manifest: %w", err)
	}
	defer relManifest()
	// The blobs the base has are in the store already.
	have := r.trees.base.Digests()
	sizes := map[string]int64{digest: int64(len(b))}
	blobs := []cluster.BlobSize{{SHA256: digest, Size: int64(len(b))}}
	for d, n := range m.Digests() {
		if _, ok := have[d]; !ok {
			sizes[d] = n
			blobs = append(blobs, cluster.BlobSize{SHA256: d, Size: n})
		}
	}
	if err := r.upload(ctx, blobs, sizes); err != nil {
		return nil, err
	}
	changed()
	return &cluster.WorkspaceResult{Base: base, Manifest: digest}, nil
}

// uploadTries is how often an upload is tried before the result is given
// up (the exit is reported without it).
const uploadTries = 3

// upload asks the scheduler for PUT URLs of the blobs and puts each the
// store lacks, from the cache; it tries again a few times.
func (r *stepRun) upload(ctx context.Context, blobs []cluster.BlobSize, sizes map[string]int64) error {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Minute)
	defer cancel()
	var err error
	for try := range uploadTries {
		if try > 0 {
			select {
			case <-uctx.Done():
				return errors.Join(err, uctx.Err())
			case <-time.After(time.Duration(try) * time.Second):
			}
		}
		err = r.uploadOnce(uctx, blobs, sizes)
		if err == nil || errors.Is(err, errUploadRefused) {
			return err
		}
		r.a.logger.Warn("upload workspace result; trying again", "step", r.id, "try", try+1, "error", err)
	}
	return err
}

func (r *stepRun) uploadOnce(ctx context.Context, blobs []cluster.BlobSize, sizes map[string]int64) error {
	resp, err := r.a.sched.Uploads(ctx, cluster.UploadsRequest{Step: r.id, Node: r.a.cfg.Node, Attempt: r.attempt, Blobs: blobs})
	if err != nil {
		if errors.Is(err, ErrReportRefused) {
			return errors.Join(errUploadRefused, err)
		}
		return fmt.Errorf("ask for upload URLs: %w", err)
	}
	for d, u := range resp.URLs {
		n, ok := sizes[d]
		if !ok {
			return fmt.Errorf("the scheduler gave an upload URL for blob %s, not asked for", d)
		}
		if err := r.put(ctx, d, n, u); err != nil {
			return err
		}
	}
	return nil
}

// put uploads blob d (n bytes) from the cache to the presigned URL u.
func (r *stepRun) put(ctx context.Context, d string, n int64, u string) error {
	f, err := os.Open(r.a.cache.Path(d))
	if err != nil {
		return fmt.Errorf("upload blob %s: %w", d, err)
	}
	defer f.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, f)
	if err != nil {
		return fmt.Errorf("upload blob %s: %w", d, err)
	}
	req.ContentLength = n
	if n == 0 {
		req.Body = http.NoBody
	}
	resp, err := r.a.blobClient().Do(req)
	if err != nil {
		return fmt.Errorf("upload blob %s: %w", d, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var msg [512]byte
		k, _ := resp.Body.Read(msg[:])
		return fmt.Errorf("upload blob %s: %s: %s", d, resp.Status, strings.TrimSpace(string(msg[:k])))
	}
	r.a.metrics.uploaded.Add(float64(n))
	return nil
}
