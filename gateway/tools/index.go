package tools

import (
	"path"
	"slices"
	"strings"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/manifest"
)

// index is a tree's entries, sorted by path, for lookups (by binary
// search: a call builds nothing per entry) and suggestions (by a scan,
// only for a path refused or not found). A directory is an entry only
// when it is empty; the others are implied by the entries below them,
// which sort together right after "DIR/".
type index struct {
	entries []api.TreeEntry
}

func indexOf(t Tree) *index {
	if t == nil {
		return &index{}
	}
	es := t.Entries()
	if !slices.IsSortedFunc(es, comparePaths) {
		es = slices.Clone(es)
		slices.SortFunc(es, comparePaths)
	}
	return &index{entries: es}
}

func comparePaths(a, b api.TreeEntry) int { return strings.Compare(a.Path, b.Path) }

// exact returns the entry listed at p.
func (ix *index) exact(p string) (api.TreeEntry, bool) {
	i, ok := slices.BinarySearchFunc(ix.entries, p, func(e api.TreeEntry, p string) int { return strings.Compare(e.Path, p) })
	if !ok {
		return api.TreeEntry{}, false
	}
	return ix.entries[i], true
}

// implied reports whether an entry lies below p (p is then a directory).
func (ix *index) implied(p string) bool {
	i, _ := slices.BinarySearchFunc(ix.entries, p+"/", func(e api.TreeEntry, p string) int { return strings.Compare(e.Path, p) })
	return i < len(ix.entries) && strings.HasPrefix(ix.entries[i].Path, p+"/")
}

// lookup returns the entry at p, a directory entry for an implied one.
func (ix *index) lookup(p string) (api.TreeEntry, bool) {
	if e, ok := ix.exact(p); ok {
		return e, true
	}
	if p != "" && ix.implied(p) {
		return api.TreeEntry{Path: p, Type: string(manifest.Dir), Mode: 0o755}, true
	}
	return api.TreeEntry{}, false
}

// paths calls f with every path of the tree, implied directories
// included (each once, after the first entry below it).
func (ix *index) paths(f func(p string)) {
	seen := map[string]bool{}
	for _, e := range ix.entries {
		f(e.Path)
		for d := path.Dir(e.Path); d != "." && !seen[d]; d = path.Dir(d) {
			seen[d] = true
			if _, listed := ix.exact(d); !listed {
				f(d)
			}
		}
	}
}

func fold(s string) string { return strings.ToLower(s) }

// folded returns the first tree path (in order) that equals p but for
// case.
func (ix *index) folded(p string) (string, bool) {
	for _, e := range ix.entries {
		if len(e.Path) < len(p) {
			continue
		}
		if strings.EqualFold(e.Path, p) {
			return e.Path, true
		}
		if len(e.Path) > len(p) && e.Path[len(p)] == '/' && strings.EqualFold(e.Path[:len(p)], p) {
			return e.Path[:len(p)], true
		}
	}
	return "", false
}

// components are the names of a path as a caller gave it, for matching:
// the workspace prefix, empty, "." and ".." components dropped.
func components(p string) []string {
	p = strings.TrimPrefix(p, workspacePrefix+"/")
	var out []string
	for _, n := range strings.Split(p, "/") {
		if n != "" && n != "." && n != ".." {
			out = append(out, n)
		}
	}
	return out
}

// suggestExact is the workspace path p names, if it names one (a
// look-alike's normal form), else suggest's guess.
func (ix *index) suggestExact(p string) string {
	if q, err := manifest.Clean(p, manifest.DefaultLimits); err == nil {
		if _, ok := ix.lookup(q); ok {
			return workspacePrefix + "/" + q
		}
	}
	return ix.suggest(p)
}

// suggest is the existing workspace path (as /workspace/...) a refused
// path p probably meant, or "": among the paths with p's base name (else
// with its base name but for case), the one whose trailing components
// match p's most, then the closest by edit distance.
func (ix *index) suggest(p string) string {
	names := components(p)
	if len(names) == 0 {
		return ""
	}
	base := names[len(names)-1]
	given := strings.Join(names, "/")
	for _, folded := range []bool{false, true} {
		best, bestScore, bestDist := "", -1, 0
		ix.paths(func(c string) {
			cb := path.Base(c)
			if folded && !strings.EqualFold(cb, base) || !folded && cb != base {
				return
			}
			score := trailing(strings.Split(c, "/"), names, folded)
			dist := distance(c, given)
			if score > bestScore || score == bestScore && (dist < bestDist || dist == bestDist && c < best) {
				best, bestScore, bestDist = c, score, dist
			}
		})
		if best != "" {
			return workspacePrefix + "/" + best
		}
	}
	return ""
}

// trailing counts the trailing components a and b share.
func trailing(a, b []string, folded bool) int {
	n := 0
	for n < len(a) && n < len(b) {
		x, y := a[len(a)-1-n], b[len(b)-1-n]
		if folded {
			x, y = fold(x), fold(y)
		}
		if x != y {
			break
		}
		n++
	}
	return n
}

// distance is the Levenshtein distance of a and b, by bytes, bounded: a
// pair longer than 1,024 bytes together counts as their length sum.
func distance(a, b string) int {
	if len(a)+len(b) > 1024 {
		return len(a) + len(b)
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
