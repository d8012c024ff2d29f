package tools

import (
	"path"
	"sort"
	"strings"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/manifest"
)

// index is a tree's entries by path, with the directories its entries
// imply, for lookups and suggestions.
type index struct {
	entries []api.TreeEntry
	byPath  map[string]api.TreeEntry
	// dirs holds every directory: listed (empty) or implied.
	dirs map[string]bool
	// byFold maps a folded path to the tree's paths that fold to it.
	byFold map[string][]string
}

func indexOf(t Tree) *index {
	ix := &index{byPath: map[string]api.TreeEntry{}, dirs: map[string]bool{}, byFold: map[string][]string{}}
	if t == nil {
		return ix
	}
	ix.entries = t.Entries()
	for _, e := range ix.entries {
		ix.byPath[e.Path] = e
		if e.Type == string(manifest.Dir) {
			ix.dirs[e.Path] = true
		}
		for d := path.Dir(e.Path); d != "." && !ix.dirs[d]; d = path.Dir(d) {
			ix.dirs[d] = true
		}
	}
	for p := range ix.byPath {
		ix.byFold[fold(p)] = append(ix.byFold[fold(p)], p)
	}
	for d := range ix.dirs {
		if _, ok := ix.byPath[d]; !ok {
			ix.byFold[fold(d)] = append(ix.byFold[fold(d)], d)
		}
	}
	for _, l := range ix.byFold {
		sort.Strings(l)
	}
	return ix
}

func fold(s string) string { return strings.ToLower(s) }

// lookup returns the entry at p, a directory entry for an implied one.
func (ix *index) lookup(p string) (api.TreeEntry, bool) {
	if e, ok := ix.byPath[p]; ok {
		return e, true
	}
	if ix.dirs[p] {
		return api.TreeEntry{Path: p, Type: string(manifest.Dir), Mode: 0o755}, true
	}
	return api.TreeEntry{}, false
}

// folded returns the tree path that equals p but for case.
func (ix *index) folded(p string) (string, bool) {
	l := ix.byFold[fold(p)]
	if len(l) == 0 {
		return "", false
	}
	return l[0], true
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
	for _, folded := range []bool{false, true} {
		best, bestScore, bestDist := "", -1, 0
		consider := func(c string) {
			cb := path.Base(c)
			if folded && fold(cb) != fold(base) || !folded && cb != base {
				return
			}
			score := trailing(strings.Split(c, "/"), names, folded)
			dist := distance(c, strings.Join(names, "/"))
			if score > bestScore || score == bestScore && (dist < bestDist || dist == bestDist && c < best) {
				best, bestScore, bestDist = c, score, dist
			}
		}
		for _, e := range ix.entries {
			consider(e.Path)
		}
		for d := range ix.dirs {
			if _, ok := ix.byPath[d]; !ok {
				consider(d)
			}
		}
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
