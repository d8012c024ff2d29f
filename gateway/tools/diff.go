package tools

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/manifest"
	"github.com/rodon-compute/rodon/internal/textdiff"
)

// MaxDiffFileBytes bounds one file's diff in a proposal's diff.
const MaxDiffFileBytes = 1 << 20

// ProposalDiff is the unified diff (textdiff's, as the workspace diff
// route makes) of a proposal's files against head, by path. Each path is
// confined as a write is (a *Refusal: outside, the library, agents/, or a
// path proposed twice); a deletion of nothing, or a file over a
// directory, is a Failure; a file that is binary on either side is named
// ("Binary files a/P and b/P differ").
func ProposalDiff(ctx context.Context, head Tree, files []api.ProposedFile) (string, error) {
	ix := indexOf(head)
	type side struct {
		t   Target
		new string
		del bool
	}
	var sides []side
	seen := map[string]bool{}
	for _, f := range files {
		t, err := resolve(head, ix, nil, f.Path, true)
		if err != nil {
			return "", refusalOrErr(err)
		}
		if seen[t.Path] {
			return "", refuse(api.RefusedInput, f.Path, "", "path %s is proposed more than once", quote(f.Path))
		}
		seen[t.Path] = true
		switch {
		case f.Delete && f.Content != "":
			return "", refuse(api.RefusedInput, f.Path, "", "path %s: a deleted file has no content", quote(f.Path))
		case f.Delete && t.Entry == nil:
			return "", failf("cannot delete %s: no such file", quote(f.Path))
		case f.Delete && t.IsDir():
			return "", failf("cannot delete %s: a directory; propose its files' deletions", t.Name())
		case !f.Delete:
			if msg := writable(ix, t); msg != "" {
				return "", Failure(msg)
			}
		}
		sides = append(sides, side{t: t, new: f.Content, del: f.Delete})
	}
	slices.SortFunc(sides, func(a, b side) int { return strings.Compare(a.t.Path, b.t.Path) })
	var sb strings.Builder
	for _, s := range sides {
		old := ""
		if s.t.Entry != nil {
			if s.t.Entry.Type != string(manifest.File) || s.t.Entry.Size > MaxDiffFileBytes {
				fmt.Fprintf(&sb, "Binary files a/%s and b/%s differ\n", s.t.Path, s.t.Path)
				continue
			}
			b, err := readFile(ctx, s.t, MaxDiffFileBytes)
			if err != nil {
				return "", err
			}
			old = string(b)
		}
		if !textdiff.IsText(old) || !textdiff.IsText(s.new) || len(s.new) > MaxDiffFileBytes {
			if old != s.new {
				fmt.Fprintf(&sb, "Binary files a/%s and b/%s differ\n", s.t.Path, s.t.Path)
			}
			continue
		}
		d, _ := textdiff.Unified(s.t.Path, old, s.new, MaxDiffFileBytes)
		sb.WriteString(d)
	}
	return sb.String(), nil
}

// PatchFiles is the files a unified diff (git's format, several files)
// makes of head: each changed file's new content whole, or its deletion,
// as ProposeChange takes them. Each path is confined as a write is (a
// *Refusal); a patch that does not parse or apply, a renamed or binary
// file, a new file that exists or a change to one that does not, is a
// Failure saying which hunk of which file.
func PatchFiles(ctx context.Context, head Tree, patch string) ([]api.ProposedFile, error) {
	ps, err := textdiff.ParsePatch(patch)
	if err != nil {
		return nil, failf("patch: %v", err)
	}
	ix := indexOf(head)
	var out []api.ProposedFile
	seen := map[string]bool{}
	for _, p := range ps {
		if p.Old != "" && p.New != "" && p.Old != p.New {
			return nil, failf("patch: %s is renamed to %s: renames are not taken; give the new file whole, and delete the old", quote(p.Old), quote(p.New))
		}
		t, err := resolve(head, ix, nil, p.Path(), true)
		if err != nil {
			return nil, refusalOrErr(err)
		}
		if seen[t.Path] {
			return nil, refuse(api.RefusedInput, p.Path(), "", "path %s is patched more than once", quote(p.Path()))
		}
		seen[t.Path] = true
		old := ""
		switch {
		case p.Old == "" && t.Entry != nil:
			return nil, failf("patch: it makes %s, which exists already", t.Name())
		case p.Old != "":
			if msg := fileFailure(ix, t, p.Path(), MaxFileBytes); msg != "" {
				return nil, failf("patch: %s", msg)
			}
			b, err := readFile(ctx, t, MaxFileBytes)
			if err != nil {
				return nil, err
			}
			if !textdiff.IsText(string(b)) {
				return nil, failf("patch: %s is not a text file", t.Name())
			}
			old = string(b)
		}
		text, err := p.Apply(old)
		if err != nil {
			return nil, failf("patch: %v", err)
		}
		if p.New == "" {
			if text != "" {
				return nil, failf("patch: it deletes %s, but the file has lines the patch does not remove", t.Name())
			}
			out = append(out, api.ProposedFile{Path: t.Path, Delete: true})
			continue
		}
		out = append(out, api.ProposedFile{Path: t.Path, Content: text})
	}
	return out, nil
}
