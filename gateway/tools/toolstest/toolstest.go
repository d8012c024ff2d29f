// Package toolstest is an in-memory workspace for tests of the file
// tools and their callers: revisions with a linear history, a commit that
// refuses as a conflict a change to a path changed since its parent, and
// trees with files, empty directories and symlinks.
package toolstest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/gateway/tools"
	"github.com/rodon-compute/rodon/internal/manifest"
)

// Workspace is an in-memory tools.Workspace. Its methods are safe for
// concurrent use.
type Workspace struct {
	mu   sync.Mutex
	revs []*Tree // the history, oldest first
	// Opens counts the files opened, by path.
	Opens map[string]int
	// Commits are the commits made, in order.
	Commits []Commit
}

// Commit is one commit a Workspace made.
type Commit struct {
	Parent, Revision, Message string
	Changes                   []tools.Change
}

// Tree is one revision of a Workspace.
type Tree struct {
	ws      *Workspace
	rev     string
	entries []api.TreeEntry
	content map[string][]byte
}

// New is a workspace with one revision holding files (path: content;
// a content "-> TARGET" makes a symlink, a path ending in "/" an empty
// directory), or none when files is empty.
func New(files map[string]string) *Workspace {
	w := &Workspace{Opens: map[string]int{}}
	if len(files) > 0 {
		t := &Tree{ws: w, content: map[string][]byte{}}
		for p, c := range files {
			switch {
			case strings.HasSuffix(p, "/"):
				t.entries = append(t.entries, api.TreeEntry{Path: strings.TrimSuffix(p, "/"), Type: string(manifest.Dir), Mode: 0o755})
			case strings.HasPrefix(c, "-> "):
				t.entries = append(t.entries, api.TreeEntry{Path: p, Type: string(manifest.Symlink), Mode: 0o777, Target: c[3:]})
			default:
				t.entries = append(t.entries, fileEntry(p, []byte(c), 0o644))
				t.content[p] = []byte(c)
			}
		}
		w.add(t)
	}
	return w
}

func fileEntry(p string, b []byte, mode uint32) api.TreeEntry {
	return api.TreeEntry{Path: p, Type: string(manifest.File), Size: int64(len(b)), SHA256: manifest.Digest(b), Mode: mode}
}

// add appends t to the history (w.mu held or not yet shared).
func (w *Workspace) add(t *Tree) {
	slices.SortFunc(t.entries, func(a, b api.TreeEntry) int { return strings.Compare(a.Path, b.Path) })
	t.rev = fmt.Sprintf("rev-%d", len(w.revs)+1)
	w.revs = append(w.revs, t)
}

// Head is the newest revision's tree.
func (w *Workspace) Head(ctx context.Context) (tools.Tree, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.revs) == 0 {
		return &Tree{ws: w, content: map[string][]byte{}}, nil
	}
	return w.revs[len(w.revs)-1], nil
}

// File returns a file's content at the head.
func (w *Workspace) File(p string) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.revs) == 0 {
		return "", false
	}
	b, ok := w.revs[len(w.revs)-1].content[p]
	return string(b), ok
}

// Revisions is the number of revisions.
func (w *Workspace) Revisions() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.revs)
}

// Commit applies changes made from parent as a new revision; a change to
// a path changed since parent is a *tools.Conflict.
func (w *Workspace) Commit(ctx context.Context, parent string, changes []tools.Change, message string) (api.Revision, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var head *Tree
	if len(w.revs) > 0 {
		head = w.revs[len(w.revs)-1]
	}
	if head != nil && parent != head.rev {
		i := slices.IndexFunc(w.revs, func(t *Tree) bool { return t.rev == parent })
		if i < 0 && parent != "" {
			return api.Revision{}, fmt.Errorf("parent %s: not a revision of the workspace", parent)
		}
		var base *Tree
		if i >= 0 {
			base = w.revs[i]
		}
		var paths []string
		for _, c := range changes {
			if entryOf(base, c.Path) != entryOf(head, c.Path) {
				paths = append(paths, c.Path)
			}
		}
		if len(paths) > 0 {
			return api.Revision{}, &tools.Conflict{Parent: parent, Paths: paths, Detached: "rev-detached"}
		}
	}
	t := &Tree{ws: w, content: map[string][]byte{}}
	if head != nil {
		t.entries = slices.Clone(head.entries)
		for p, b := range head.content {
			t.content[p] = b
		}
	}
	for _, c := range changes {
		t.entries = slices.DeleteFunc(t.entries, func(e api.TreeEntry) bool {
			return e.Path == c.Path || strings.HasPrefix(e.Path, c.Path+"/") ||
				e.Type == string(manifest.Dir) && strings.HasPrefix(c.Path, e.Path+"/")
		})
		delete(t.content, c.Path)
		if !c.Delete {
			t.entries = append(t.entries, fileEntry(c.Path, c.Content, c.Mode))
			t.content[c.Path] = bytes.Clone(c.Content)
		}
	}
	w.add(t)
	w.Commits = append(w.Commits, Commit{Parent: parent, Revision: t.rev, Message: message, Changes: changes})
	return api.Revision{ID: t.rev, Number: int64(len(w.revs)), Parent: parent, Message: message}, nil
}

func entryOf(t *Tree, p string) api.TreeEntry {
	if t == nil {
		return api.TreeEntry{}
	}
	i, ok := slices.BinarySearchFunc(t.entries, p, func(e api.TreeEntry, p string) int { return strings.Compare(e.Path, p) })
	if !ok {
		return api.TreeEntry{}
	}
	return t.entries[i]
}

// Revision is the tree's revision id.
func (t *Tree) Revision() string { return t.rev }

// Entries is the tree's entries, sorted.
func (t *Tree) Entries() []api.TreeEntry { return t.entries }

// Open opens a file of the tree.
func (t *Tree) Open(ctx context.Context, p string) (io.ReadCloser, error) {
	b, ok := t.content[path.Clean(p)]
	if !ok {
		return nil, fmt.Errorf("%s: not a file of %s", p, t.rev)
	}
	t.ws.mu.Lock()
	t.ws.Opens[p]++
	t.ws.mu.Unlock()
	return io.NopCloser(bytes.NewReader(b)), nil
}
