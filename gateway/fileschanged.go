package gateway

import (
	"strconv"
	"strings"

	"github.com/rodon-compute/rodon/api"
)

// eventFilesChanged is the kind of the node's event sent once a step's
// workspace copy is mirrored back: "3 files changed: +chart.png,
// ~summary.csv, -old.txt" (cluster.EventFilesChanged).
const eventFilesChanged = "files_changed"

// maxFilesNamed is how many paths a node names in one files_changed event
// before ", and N more".
const maxFilesNamed = 20

func newFilesChanged() *api.FilesChanged {
	return &api.FilesChanged{Added: []string{}, Modified: []string{}, Removed: []string{}}
}

// parseFilesChanged reads a files_changed event: "no files changed", or
// "N file(s) changed: " and the paths, each after "+" (added), "~"
// (modified) or "-" (removed), joined by ", ", and ", and M more" when the
// node named only some (it names at most 20).
//
// The message has no quoting, so the split on ", " is a guess when a path
// contains ", ". A piece that does not start with a sign is taken as the
// rest of the previous path ("+a, b.txt" is the one path "a, b.txt"), and
// a trailing ", and M more" is taken as the tail when the counts agree or
// 20 paths were named; but a path
// containing ", +", ", ~" or ", -" is read as two paths. Such names are
// rare; the event's message keeps the node's text as it was.
func parseFilesChanged(msg string) (*api.FilesChanged, bool) {
	out := newFilesChanged()
	if msg == "no files changed" {
		return out, true
	}
	head, rest, ok := strings.Cut(msg, " changed: ")
	if !ok {
		return nil, false
	}
	num, unit, _ := strings.Cut(head, " ")
	total, err := strconv.Atoi(num)
	if err != nil || total <= 0 || (unit != "files" && unit != "file") || rest == "" {
		return nil, false
	}
	pieces := strings.Split(rest, ", ")
	var paths []string // with their sign
	for _, p := range pieces {
		switch {
		case p != "" && strings.ContainsRune("+~-", rune(p[0])):
			paths = append(paths, p)
		case len(paths) > 0:
			paths[len(paths)-1] += ", " + p
		default:
			return nil, false
		}
	}
	// The tail was joined to the last path; split it off when the counts
	// say it is one, or when the node named as many paths as it names at
	// most (then a tail is expected).
	last := paths[len(paths)-1]
	if i := strings.LastIndex(last, ", and "); i > 0 {
		if m, ok := strings.CutSuffix(last[i+len(", and "):], " more"); ok {
			if n, err := strconv.Atoi(m); err == nil && n > 0 && (len(paths)+n == total || len(paths) >= maxFilesNamed) {
				paths[len(paths)-1] = last[:i]
				out.More = n
			}
		}
	}
	for _, p := range paths {
		name := p[1:]
		if name == "" {
			return nil, false
		}
		switch p[0] {
		case '+':
			out.Added = append(out.Added, name)
		case '~':
			out.Modified = append(out.Modified, name)
		case '-':
			out.Removed = append(out.Removed, name)
		}
	}
	return out, true
}

// unionFilesChanged is what steps changed together: each list is the
// union of the steps' lists in step order, each path once (at its first
// place), and More the sum of the steps' (an upper bound: a path not named
// by one step may be named by another). It is a union, not a net change:
// a file added by one step and removed by a later one is in both Added
// and Removed. Nil when no step has a files_changed event.
func unionFilesChanged(steps []api.RunStep) *api.FilesChanged {
	var out *api.FilesChanged
	seen := map[string]bool{}
	add := func(list *[]string, sign string, paths []string) {
		for _, p := range paths {
			if !seen[sign+p] {
				seen[sign+p] = true
				*list = append(*list, p)
			}
		}
	}
	for _, s := range steps {
		fc := s.FilesChanged
		if fc == nil {
			continue
		}
		if out == nil {
			out = newFilesChanged()
		}
		add(&out.Added, "+", fc.Added)
		add(&out.Modified, "~", fc.Modified)
		add(&out.Removed, "-", fc.Removed)
		out.More += fc.More
	}
	return out
}
