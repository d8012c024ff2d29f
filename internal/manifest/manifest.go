// Package manifest is the tree of one workspace revision: every path with
// its type, mode, size and content digest (SHA-256, hex). Contents live in
// a blob store under their digest (internal/blob); a manifest is itself
// stored there as a blob, in its canonical encoding (Encode), so a
// revision names its whole tree with one digest.
//
// The rules of a stored tree are here and nowhere else: paths are
// relative, slash-separated, clean, without NUL or control characters and
// within the Limits; a symlink's target stays inside the tree; a
// directory is listed only when it is empty (its other entries imply it).
package manifest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/rodon-compute/rodon/api"
)

// Type is the kind of a tree entry.
type Type string

const (
	File    Type = "file"
	Dir     Type = "dir"
	Symlink Type = "symlink"
)

// Entry is one path of a tree.
type Entry struct {
	Path string `json:"path"`
	Type Type   `json:"type"`
	// Mode is the permission bits (0o777 at most); only a file's
	// executable bits are kept by the stores (0o755 or 0o644).
	Mode uint32 `json:"mode"`
	// Size and SHA256 are a file's length and content digest.
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	// Target is a symlink's target, relative and inside the tree.
	Target string `json:"target,omitempty"`
}

// Manifest is a tree: its entries sorted by path, each path once.
type Manifest struct {
	Entries []Entry `json:"entries"`
}

// Limits bound a tree. Every store and every caller uses DefaultLimits
// unless an operator lowers them.
type Limits struct {
	// MaxPathBytes bounds a whole path, MaxNameBytes one component.
	MaxPathBytes int
	MaxNameBytes int
	// MaxDepth bounds the components of a path.
	MaxDepth int
	// MaxEntries bounds the entries of a tree (files per revision).
	MaxEntries int
	// MaxFileBytes bounds one file; MaxTotalBytes the sum of the files.
	MaxFileBytes  int64
	MaxTotalBytes int64
}

// DefaultLimits: paths as Linux allows them in one component (255) and a
// generous whole (1024 bytes, 64 deep), 100,000 entries, files up to the
// largest workspace a step may have (cluster.MaxLimits, 64 GiB).
var DefaultLimits = Limits{
	MaxPathBytes:  1024,
	MaxNameBytes:  255,
	MaxDepth:      64,
	MaxEntries:    100_000,
	MaxFileBytes:  64 << 30,
	MaxTotalBytes: 64 << 30,
}

// ErrPath is what every refused path wraps.
var ErrPath = errors.New("invalid path")

// Clean returns the stored form of a path given by a caller: a leading
// "/workspace/" or "./" is dropped, and what is left must be a valid path
// (CheckPath). It never resolves "..": a path with it is refused, not
// normalised, so that no caller can name a file outside by accident or
// on purpose.
func Clean(p string, l Limits) (string, error) {
	switch {
	case p == "/workspace" || p == "/workspace/":
		return "", fmt.Errorf("%w %q: the workspace itself is not a file", ErrPath, p)
	case strings.HasPrefix(p, "/workspace/"):
		p = strings.TrimPrefix(p, "/workspace/")
	}
	for strings.HasPrefix(p, "./") {
		p = p[2:]
	}
	if err := CheckPath(p, l); err != nil {
		return "", err
	}
	return p, nil
}

// CheckPath reports whether p is a valid stored path: not empty, relative,
// UTF-8, no NUL, no control characters, no backslash, no empty, "." or
// ".." component, within l's lengths and depth.
func CheckPath(p string, l Limits) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: empty", ErrPath)
	case len(p) > l.MaxPathBytes:
		return fmt.Errorf("%w %.40q...: %d bytes, more than %d", ErrPath, p, len(p), l.MaxPathBytes)
	case !utf8.ValidString(p):
		return fmt.Errorf("%w %q: not UTF-8", ErrPath, p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%w %q: absolute; want a path relative to the workspace", ErrPath, p)
	}
	for _, r := range p {
		if r == 0 || unicode.IsControl(r) || r == '\\' {
			return fmt.Errorf("%w %q: holds %U; NUL, control characters and backslashes are refused", ErrPath, p, r)
		}
	}
	names := strings.Split(p, "/")
	if len(names) > l.MaxDepth {
		return fmt.Errorf("%w %.40q...: %d components, more than %d", ErrPath, p, len(names), l.MaxDepth)
	}
	for _, n := range names {
		switch {
		case n == "":
			return fmt.Errorf("%w %q: empty component", ErrPath, p)
		case n == "." || n == "..":
			return fmt.Errorf("%w %q: %q components are refused", ErrPath, p, n)
		case len(n) > l.MaxNameBytes:
			return fmt.Errorf("%w %.40q...: a component of %d bytes, more than %d", ErrPath, p, len(n), l.MaxNameBytes)
		}
	}
	return nil
}

// CheckDigest reports whether d is a SHA-256 digest in lower-case hex.
func CheckDigest(d string) error {
	if len(d) != 64 {
		return fmt.Errorf("digest %.70q: want 64 lower-case hex digits of a SHA-256", d)
	}
	for i := 0; i < len(d); i++ {
		c := d[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("digest %.70q: want 64 lower-case hex digits of a SHA-256", d)
		}
	}
	return nil
}

// Digest is the SHA-256 of b, in hex.
func Digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Validate reports the first problem of m: entries unsorted or repeated,
// a bad path, type, mode, digest or size, a symlink whose target leaves
// the tree, a path below a file or symlink, or more than l allows.
func (m *Manifest) Validate(l Limits) error {
	if len(m.Entries) > l.MaxEntries {
		return fmt.Errorf("%d entries, more than %d", len(m.Entries), l.MaxEntries)
	}
	var total int64
	leaves := map[string]Type{}
	for i, e := range m.Entries {
		if err := CheckPath(e.Path, l); err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
		if i > 0 && m.Entries[i-1].Path >= e.Path {
			return fmt.Errorf("entry %d (%q): entries must be sorted by path, each once", i, e.Path)
		}
		if e.Mode&^0o777 != 0 {
			return fmt.Errorf("entry %q: mode %o: want permission bits only", e.Path, e.Mode)
		}
		switch e.Type {
		case File:
			if err := CheckDigest(e.SHA256); err != nil {
				return fmt.Errorf("entry %q: %w", e.Path, err)
			}
			if e.Size < 0 || e.Size > l.MaxFileBytes {
				return fmt.Errorf("entry %q: size %d: want 0 to %d", e.Path, e.Size, l.MaxFileBytes)
			}
			if e.Target != "" {
				return fmt.Errorf("entry %q: a file has no target", e.Path)
			}
			total += e.Size
			if total > l.MaxTotalBytes {
				return fmt.Errorf("files of %d bytes or more, more than %d", total, l.MaxTotalBytes)
			}
		case Dir:
			if e.Size != 0 || e.SHA256 != "" || e.Target != "" {
				return fmt.Errorf("entry %q: a directory has no size, digest or target", e.Path)
			}
		case Symlink:
			if e.Size != 0 || e.SHA256 != "" {
				return fmt.Errorf("entry %q: a symlink has no size or digest", e.Path)
			}
			if err := CheckTarget(e.Path, e.Target, l); err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q: type %q: want file, dir or symlink", e.Path, e.Type)
		}
		leaves[e.Path] = e.Type
	}
	// No entry may sit below a file or a symlink (a symlink is never a
	// directory of the tree), and a listed directory must be empty.
	for _, e := range m.Entries {
		for dir := path.Dir(e.Path); dir != "."; dir = path.Dir(dir) {
			if t, ok := leaves[dir]; ok {
				if t == Dir {
					return fmt.Errorf("entry %q: directory %q is listed, but only empty directories are", e.Path, dir)
				}
				return fmt.Errorf("entry %q: below %q, a %s", e.Path, dir, t)
			}
		}
	}
	return nil
}

// CheckTarget reports whether a symlink at p with target t stays inside
// the tree: t relative, not empty, and resolving (lexically, from p's
// directory) to a path inside.
func CheckTarget(p, t string, l Limits) error {
	switch {
	case t == "":
		return fmt.Errorf("%w: symlink %q has an empty target", ErrPath, p)
	case len(t) > l.MaxPathBytes || strings.ContainsRune(t, 0):
		return fmt.Errorf("%w: symlink %q: target too long or holds NUL", ErrPath, p)
	case strings.HasPrefix(t, "/"):
		return fmt.Errorf("%w: symlink %q points at %q, outside the workspace (absolute)", ErrPath, p, t)
	}
	j := path.Join(path.Dir(p), t)
	if j == ".." || strings.HasPrefix(j, "../") {
		return fmt.Errorf("%w: symlink %q points at %q, outside the workspace", ErrPath, p, t)
	}
	return nil
}

// Encode is m's canonical encoding (the blob stored for it) and its
// digest. Entries must be sorted (Sort); the encoding of equal trees is
// equal.
func Encode(m *Manifest) ([]byte, string) {
	if m.Entries == nil {
		m = &Manifest{Entries: []Entry{}}
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err) // plain structs of strings and numbers
	}
	return b, Digest(b)
}

// Decode reads and validates a manifest (at most maxBytes of it).
func Decode(r io.Reader, maxBytes int64, l Limits) (*Manifest, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	if int64(len(b)) > maxBytes {
		return nil, fmt.Errorf("manifest larger than %d bytes", maxBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("decode manifest: %w", err)
	}
	if err := m.Validate(l); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	return &m, nil
}

// MaxEncodedBytes bounds the encoding of a tree within DefaultLimits.
const MaxEncodedBytes = 64 << 20

// Sort sorts m's entries by path.
func (m *Manifest) Sort() {
	slices.SortFunc(m.Entries, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
}

// Lookup returns the entry at p.
func (m *Manifest) Lookup(p string) (Entry, bool) {
	i, ok := slices.BinarySearchFunc(m.Entries, p, func(e Entry, p string) int { return strings.Compare(e.Path, p) })
	if !ok {
		return Entry{}, false
	}
	return m.Entries[i], true
}

// Digests returns the distinct digests of m's files.
func (m *Manifest) Digests() map[string]int64 {
	out := map[string]int64{}
	for _, e := range m.Entries {
		if e.Type == File {
			out[e.SHA256] = e.Size
		}
	}
	return out
}

// TotalBytes is the sum of m's file sizes.
func (m *Manifest) TotalBytes() int64 {
	var n int64
	for _, e := range m.Entries {
		n += e.Size
	}
	return n
}

// same reports whether a and b are the same entry content.
func same(a, b Entry) bool {
	return a.Type == b.Type && a.Mode == b.Mode && a.SHA256 == b.SHA256 && a.Size == b.Size && a.Target == b.Target
}

// Diff is what changed from a to b (nil a or b: an empty tree), each list
// sorted: a path in both with other content or type is modified.
func Diff(a, b *Manifest) api.FilesChanged {
	out := api.FilesChanged{Added: []string{}, Modified: []string{}, Removed: []string{}}
	var ae, be []Entry
	if a != nil {
		ae = a.Entries
	}
	if b != nil {
		be = b.Entries
	}
	i, j := 0, 0
	for i < len(ae) || j < len(be) {
		switch {
		case j == len(be) || i < len(ae) && ae[i].Path < be[j].Path:
			out.Removed = append(out.Removed, ae[i].Path)
			i++
		case i == len(ae) || be[j].Path < ae[i].Path:
			out.Added = append(out.Added, be[j].Path)
			j++
		default:
			if !same(ae[i], be[j]) {
				out.Modified = append(out.Modified, ae[i].Path)
			}
			i++
			j++
		}
	}
	return out
}

// Rebase applies the changes from base to mine onto head, for a writer
// whose parent (base) is no longer the head: the result is head with
// mine's changes. A path both changed differently, or a path one changed
// below or above a path the other changed (a file become a directory),
// is a conflict: Rebase returns the conflicting paths, sorted, and no
// tree. Changes equal on both sides are not conflicts.
func Rebase(base, head, mine *Manifest) (*Manifest, []string) {
	theirs := changedSet(base, head)
	ours := changedSet(base, mine)
	var conflicts []string
	for p := range ours {
		if _, ok := theirs[p]; ok {
			he, hok := head.Lookup(p)
			me, mok := mine.Lookup(p)
			if hok != mok || hok && !same(he, me) {
				conflicts = append(conflicts, p)
			}
			continue
		}
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if _, ok := theirs[dir]; ok {
				conflicts = append(conflicts, p)
				break
			}
		}
	}
	for p := range theirs {
		if _, ok := ours[p]; ok {
			continue
		}
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if _, ok := ours[dir]; ok {
				conflicts = append(conflicts, dir)
				break
			}
		}
	}
	if len(conflicts) > 0 {
		slices.Sort(conflicts)
		return nil, slices.Compact(conflicts)
	}
	byPath := map[string]Entry{}
	for _, e := range head.Entries {
		byPath[e.Path] = e
	}
	for p := range ours {
		if e, ok := mine.Lookup(p); ok {
			byPath[p] = e
		} else {
			delete(byPath, p)
		}
	}
	out := &Manifest{Entries: make([]Entry, 0, len(byPath))}
	for _, e := range byPath {
		out.Entries = append(out.Entries, e)
	}
	out.Sort()
	out.dropImpliedDirs()
	return out, nil
}

// dropImpliedDirs removes directory entries that are no longer empty.
func (m *Manifest) dropImpliedDirs() {
	parents := map[string]bool{}
	for _, e := range m.Entries {
		for dir := path.Dir(e.Path); dir != "."; dir = path.Dir(dir) {
			parents[dir] = true
		}
	}
	m.Entries = slices.DeleteFunc(m.Entries, func(e Entry) bool { return e.Type == Dir && parents[e.Path] })
}

func changedSet(a, b *Manifest) map[string]struct{} {
	d := Diff(a, b)
	out := make(map[string]struct{}, len(d.Added)+len(d.Modified)+len(d.Removed))
	for _, l := range [][]string{d.Added, d.Modified, d.Removed} {
		for _, p := range l {
			out[p] = struct{}{}
		}
	}
	return out
}
