package gateway

import "github.com/rodon-compute/rodon/api"

// FilesChanged is what a step (or a run's steps together) changed in the
// workspace (api.FilesChanged, the payload of a files_changed event).
type FilesChanged = api.FilesChanged

func newFilesChanged() *FilesChanged {
	return &FilesChanged{Added: []string{}, Modified: []string{}, Removed: []string{}}
}

// cloneFilesChanged returns a copy of fc (nil for nil), with empty lists
// rather than absent ones.
func cloneFilesChanged(fc *FilesChanged) *FilesChanged {
	if fc == nil {
		return nil
	}
	out := newFilesChanged()
	out.Added = append(out.Added, fc.Added...)
	out.Modified = append(out.Modified, fc.Modified...)
	out.Removed = append(out.Removed, fc.Removed...)
	out.More = fc.More
	return out
}

// unionFilesChanged is what steps changed together: each list is the
// union of the steps' lists in step order, each path once (at its first
// place), and More the sum of the steps' (an upper bound: a path not named
// by one step may be named by another). It is a union, not a net change:
// a file added by one step and removed by a later one is in both Added
// and Removed. Nil when no step has a files_changed event.
func unionFilesChanged(steps []api.RunStep) *FilesChanged {
	var out *FilesChanged
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
