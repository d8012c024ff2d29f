package agentd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/rodon-compute/rodon/agentd/blobcache"
	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/manifest"
	"github.com/rodon-compute/rodon/internal/size"
)

// A step's workspace of the store lives on the node only while the step
// does (docs/design/workspaces.md, "Agent"): its starting revision is
// fetched into the blob cache and materialised in a directory of the
// attempt (hard links into the cache), which the sandbox copies in and
// reads back into as for any workspace; what came back becomes a
// manifest, its new files are moved into the cache and uploaded by the
// URLs the scheduler gives, and the directory goes with the attempt.

// treesDir holds the attempts' trees: DATA-DIR/trees/{sandbox id}/
// {workspace,library}. Nothing else lives there.
func treesDir(cfg RuntimeConfig) string { return filepath.Join(cfg.DataDir, "trees") }

// materialise fetches the revision acc names (its manifest and the blobs
// the cache lacks) and makes the directory dst (which must not exist) that
// tree: files are hard links into the cache (their modes are the cache's;
// the manifest has the tree's), empty directories and symlinks as the
// manifest has them. A tree of more than maxBytes fails with
// ErrWorkspaceTooLarge. The blobs stay pinned in the cache until release.
func (a *Agent) materialise(ctx context.Context, acc *cluster.WorkspaceAccess, dst string, maxBytes int64) (m *manifest.Manifest, release func(), err error) {
	m, err = a.fetchManifest(ctx, acc)
	if err != nil {
		return nil, nil, err
	}
	if total := m.TotalBytes(); total > maxBytes {
		return nil, nil, failure(api.CauseWorkspaceTooLarge,
			fmt.Sprintf("revision %s of the workspace holds %s, more than the step's workspace limit of %s", acc.Revision, size.Format(total), size.Format(maxBytes)),
			fmt.Errorf("%w: %d bytes, limit %d", ErrWorkspaceTooLarge, total, maxBytes))
	}
	var blobs []blobcache.Blob
	for d, n := range m.Digests() {
		if n == 0 {
			continue // empty files are made, not fetched
		}
		u, ok := acc.URLs[d]
		if !ok {
			return nil, nil, unavailable(acc, fmt.Errorf("the assignment has no URL for blob %s", d))
		}
		blobs = append(blobs, blobcache.Blob{Digest: d, Size: n, URL: u})
	}
	release, err = a.cache.Get(ctx, blobs)
	if err != nil {
		return nil, nil, unavailable(acc, err)
	}
	if err := writeTree(dst, m, a.cache); err != nil {
		release()
		return nil, nil, fmt.Errorf("materialise revision %s: %w", acc.Revision, err)
	}
	return m, release, nil
}

// unavailable is the failure of a step whose revision could not be
// fetched.
func unavailable(acc *cluster.WorkspaceAccess, err error) error {
	what := "workspace " + acc.Workspace
	if acc.ReadOnly {
		what = "library " + acc.Workspace
	}
	return failure(api.CauseWorkspaceUnavailable, fmt.Sprintf("the node could not fetch revision %s of %s from the blob store", acc.Revision, what), err)
}

// fetchManifest returns the manifest acc names, fetched into the cache
// and checked against its digest: an empty tree when acc names none.
func (a *Agent) fetchManifest(ctx context.Context, acc *cluster.WorkspaceAccess) (*manifest.Manifest, error) {
	if acc.Manifest == "" {
		return &manifest.Manifest{}, nil
	}
	u, ok := acc.URLs[acc.Manifest]
	if !ok {
		return nil, unavailable(acc, fmt.Errorf("the assignment has no URL for manifest %s", acc.Manifest))
	}
	release, err := a.cache.Get(ctx, []blobcache.Blob{{Digest: acc.Manifest, Size: -1, URL: u}})
	if err != nil {
		return nil, unavailable(acc, err)
	}
	defer release()
	f, err := os.Open(a.cache.Path(acc.Manifest))
	if err != nil {
		return nil, unavailable(acc, err)
	}
	defer f.Close()
	m, err := manifest.Decode(f, manifest.MaxEncodedBytes, manifest.DefaultLimits)
	if err != nil {
		return nil, unavailable(acc, err)
	}
	return m, nil
}

// writeTree makes dst the tree of m, its files linked from cache (whose
// blobs m names are present). Every path is created below dst, which the
// agent made and nothing else writes; symlinks come last, so that no path
// is created through one.
func writeTree(dst string, m *manifest.Manifest, cache *blobcache.Cache) error {
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer root.Close()
	mkdirs := func(p string) error {
		if p == "." {
			return nil
		}
		return root.MkdirAll(p, 0o755)
	}
	for _, e := range m.Entries {
		var err error
		switch e.Type {
		case manifest.Dir:
			err = mkdirs(e.Path)
		case manifest.File:
			if err = mkdirs(path.Dir(e.Path)); err != nil {
				break
			}
			if e.Size == 0 {
				var f *os.File
				if f, err = root.OpenFile(e.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fs.FileMode(e.Mode)); err == nil {
					err = f.Close()
				}
				break
			}
			err = os.Link(cache.Path(e.SHA256), filepath.Join(dst, filepath.FromSlash(e.Path)))
		}
		if err != nil {
			return fmt.Errorf("%s: %w", e.Path, err)
		}
	}
	for _, e := range m.Entries {
		if e.Type != manifest.Symlink {
			continue
		}
		if err := mkdirs(path.Dir(e.Path)); err != nil {
			return fmt.Errorf("%s: %w", e.Path, err)
		}
		if err := root.Symlink(e.Target, e.Path); err != nil {
			return fmt.Errorf("%s: %w", e.Path, err)
		}
	}
	return nil
}

// modes is the Step.WorkspacePerm of a materialised tree: the manifest's
// mode of each file.
func modes(m *manifest.Manifest) func(rel string) uint32 {
	return func(rel string) uint32 {
		if e, ok := m.Lookup(rel); ok {
			return e.Mode
		}
		return 0o644
	}
}

// dropped is a path of a read-back tree that is not in its manifest, and
// why.
type dropped struct {
	path, why string
}

// buildResult makes the manifest of the tree at dir (the read-back of a
// step's workspace), moving each of its files into the cache under its
// digest (they stay pinned until release). Nothing is followed: the walk
// is inside an os.Root, symlinks are read as links, and a symlink whose
// target leaves the tree, a path the store cannot hold and a special file
// are left out (and listed in drops). Files keep only their executable
// bit (0755 or 0644).
//
// Every file is hashed: the materialised tree the read-back compared with
// holds the cache's modes, so its change list names every file.
func buildResult(dir string, cache *blobcache.Cache, l manifest.Limits) (m *manifest.Manifest, drops []dropped, release func(), err error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	defer root.Close()
	var releases []func()
	release = func() {
		for _, r := range releases {
			r()
		}
	}
	m = &manifest.Manifest{Entries: []manifest.Entry{}}
	// dirs are the directories seen, true once something below is kept.
	dirs := map[string]bool{}
	keep := func(e manifest.Entry) {
		m.Entries = append(m.Entries, e)
		for d := path.Dir(e.Path); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		if err := manifest.CheckPath(p, l); err != nil {
			drops = append(drops, dropped{p, "a path the store cannot hold"})
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		switch t := d.Type(); {
		case t.IsDir():
			if _, ok := dirs[p]; !ok {
				dirs[p] = false
			}
		case t == fs.ModeSymlink:
			target, err := root.Readlink(p)
			if err != nil {
				return err
			}
			if err := manifest.CheckTarget(p, target, l); err != nil {
				drops = append(drops, dropped{p + " -> " + target, "points outside the workspace"})
				return nil
			}
			keep(manifest.Entry{Path: p, Type: manifest.Symlink, Mode: 0o777, Target: target})
		case t.IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			digest, n, rel, err := cache.Add(filepath.Join(dir, filepath.FromSlash(p)))
			if err != nil {
				return err
			}
			releases = append(releases, rel)
			mode := uint32(0o644)
			if fi.Mode().Perm()&0o111 != 0 {
				mode = 0o755
			}
			keep(manifest.Entry{Path: p, Type: manifest.File, Mode: mode, Size: n, SHA256: digest})
		default:
			drops = append(drops, dropped{p, "not a file, directory or symlink"})
		}
		return nil
	})
	if err == nil {
		for d, full := range dirs {
			if !full {
				m.Entries = append(m.Entries, manifest.Entry{Path: d, Type: manifest.Dir, Mode: 0o755})
			}
		}
		m.Sort()
		err = m.Validate(l)
	}
	if err != nil {
		release()
		return nil, nil, nil, fmt.Errorf("read the workspace's tree: %w", err)
	}
	return m, drops, release, nil
}

// droppedEvent is the warning that drops are not in the step's revision:
// its payload names at most api.MaxFilesNamed of them (Paths, and More
// for the rest), its message quotes them (a path may hold any byte the
// step chose, a newline included).
func droppedEvent(drops []dropped, ev func(string, string) cluster.Event) cluster.Event {
	var b strings.Builder
	fmt.Fprintf(&b, "%d paths not saved in the workspace's revision: ", len(drops))
	var paths []string
	for i, d := range drops {
		if i == api.MaxFilesNamed {
			fmt.Fprintf(&b, ", and %d more", len(drops)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q (%s)", d.path, d.why)
		paths = append(paths, d.path)
	}
	e := ev(api.WarningWorkspacePathsDropped, b.String())
	e.Warning.Paths, e.Warning.More = paths, len(drops)-len(paths)
	return e
}

// errUploadRefused marks an upload the scheduler refused for good.
var errUploadRefused = errors.New("upload refused")
