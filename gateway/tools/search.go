package tools

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"strings"
	"unicode"

	"github.com/bmatcuk/doublestar/v4"
	"golang.org/x/sync/errgroup"
	"golang.org/x/text/unicode/norm"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/manifest"
	"github.com/rodon-compute/rodon/internal/size"
)

// checkPattern refuses a glob pattern that could only mean a path outside
// (a ".." component), or that holds what a path may not (NUL, control
// characters, look-alikes).
func checkPattern(ix *index, what, p string) error {
	if strings.IndexFunc(p, func(r rune) bool { return r == 0 || unicode.IsControl(r) }) >= 0 {
		return refuse(api.RefusedPath, p, "", "%s %s holds NUL or control characters", what, quote(p))
	}
	if n := norm.NFKC.String(p); n != p {
		return refuse(api.RefusedLookalike, p, "", "%s %s holds characters that look like others (under NFKC it reads %s); write patterns in plain characters", what, quote(p), quote(n))
	}
	for _, n := range strings.Split(p, "/") {
		if n == ".." {
			return refuse(api.RefusedPath, p, ix.suggest(p), "%s %s is outside the workspace: \"..\" components are refused", what, quote(p))
		}
	}
	return nil
}

// under reports whether tree path p is base or below it ("" is the root).
func under(p, base string) (rel string, ok bool) {
	switch {
	case base == "":
		return p, true
	case p == base:
		return path.Base(p), true
	case strings.HasPrefix(p, base+"/"):
		return p[len(base)+1:], true
	}
	return "", false
}

// name is tree path p of t's tree as results show it.
func (t Target) name(p string) string {
	return Target{Library: t.Library, Path: p}.Name()
}

// Glob answers the paths of files (and symlinks) matching a doublestar
// pattern (`**` for any depth), relative to Path (default the
// workspace); an absolute pattern (/workspace/..., /library/...) names
// its own base. Sorted, at most MaxGlobPaths.
func Glob(ctx context.Context, env Env, in api.GlobInput) (api.GlobResult, error) {
	out := api.GlobResult{Paths: []string{}}
	base, pattern := in.Path, in.Pattern
	if strings.HasPrefix(pattern, "/") {
		base, pattern = doublestar.SplitPattern(pattern)
		if pattern == "" || base == "/" {
			base, pattern = in.Pattern, "**"
		}
	}
	head, library, err := trees(ctx, env, base)
	if err != nil {
		return out, err
	}
	out.Revision = head.Revision()
	ix := indexOf(head)
	if in.Pattern == "" {
		out.Error = "empty pattern: want one such as **/*.csv"
		return out, nil
	}
	if err := checkPattern(ix, "pattern", in.Pattern); err != nil {
		return out, err
	}
	t, err := resolve(head, ix, library, base, false)
	if err != nil {
		return out, refusalOrErr(err)
	}
	if !doublestar.ValidatePattern(pattern) {
		out.Error = fmt.Sprintf("pattern %s is not a valid glob pattern", quote(in.Pattern))
		return out, nil
	}
	if !t.IsDir() {
		out.Error = fmt.Sprintf("%s is not a directory", quote(in.Path))
		if t.Entry == nil {
			out.Error = fmt.Sprintf("no such directory: %s", quote(base))
		}
		return out, nil
	}
	tix := ix
	if t.Library {
		tix = indexOf(t.Tree)
		out.Revision = t.Tree.Revision()
	}
	for _, e := range tix.entries {
		if e.Type == string(manifest.Dir) {
			continue
		}
		rel, ok := under(e.Path, t.Path)
		if !ok || e.Path == t.Path {
			continue
		}
		if doublestar.MatchUnvalidated(pattern, rel) {
			if len(out.Paths) == MaxGlobPaths {
				out.Truncated = true
				break
			}
			out.Paths = append(out.Paths, t.name(e.Path))
		}
	}
	return out, nil
}

// Grep answers the lines matching an RE2 regular expression in the text
// files under Path (a file or a directory; default the workspace),
// filtered by a glob (of the base name, or of the path below Path when it
// holds a "/"): each match as path, line and text, at most
// MaxGrepMatches, all of them counted. Binary files and files over
// MaxGrepFileBytes are skipped.
func Grep(ctx context.Context, env Env, in api.GrepInput) (api.GrepResult, error) {
	out := api.GrepResult{Matches: []api.GrepMatch{}}
	head, library, err := trees(ctx, env, in.Path)
	if err != nil {
		return out, err
	}
	out.Revision = head.Revision()
	ix := indexOf(head)
	if in.Glob != "" {
		if err := checkPattern(ix, "glob", in.Glob); err != nil {
			return out, err
		}
	}
	t, err := resolve(head, ix, library, in.Path, false)
	if err != nil {
		return out, refusalOrErr(err)
	}
	expr := in.Pattern
	if in.IgnoreCase {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	whole := wholeText(expr)
	switch {
	case in.Pattern == "":
		out.Error = "empty pattern: want a regular expression (RE2)"
		return out, nil
	case err != nil:
		out.Error = fmt.Sprintf("pattern %s: %v", quote(in.Pattern), err)
		return out, nil
	case in.Glob != "" && !doublestar.ValidatePattern(in.Glob):
		out.Error = fmt.Sprintf("glob %s is not a valid glob pattern", quote(in.Glob))
		return out, nil
	case t.Entry == nil && t.Path != "":
		out.Error = fmt.Sprintf("no such file or directory: %s", quote(in.Path))
		return out, nil
	case t.Entry != nil && t.Entry.Type == string(manifest.File) && t.Entry.Size > MaxGrepFileBytes:
		out.Error = fmt.Sprintf("%s (%d bytes) is larger than the %s Grep reads of a file; use Bash", t.Name(), t.Entry.Size, size.Format(MaxGrepFileBytes))
		return out, nil
	}
	tix := ix
	if t.Library {
		tix = indexOf(t.Tree)
		out.Revision = t.Tree.Revision()
	}
	var files []api.TreeEntry
	for _, e := range tix.entries {
		rel, ok := under(e.Path, t.Path)
		if !ok || e.Type != string(manifest.File) || e.Size > MaxGrepFileBytes {
			continue
		}
		if in.Glob != "" {
			subject := path.Base(e.Path)
			if strings.Contains(in.Glob, "/") {
				subject = rel
			}
			if !doublestar.MatchUnvalidated(in.Glob, subject) {
				continue
			}
		}
		files = append(files, e)
	}
	type found struct {
		matches []api.GrepMatch
		count   int
	}
	results := make([]found, len(files))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(grepParallel)
	for i, e := range files {
		g.Go(func() error {
			ft := Target{Tree: t.Tree, Library: t.Library, Path: e.Path, Entry: &e}
			b, err := readFile(gctx, ft, MaxGrepFileBytes)
			if err != nil {
				return err
			}
			if isBinary(b) {
				return nil
			}
			matchLines(re, whole, string(b), func(n int, line string) {
				results[i].count++
				if len(results[i].matches) < MaxGrepMatches {
					text := cutLine(strings.ToValidUTF8(strings.TrimSuffix(line, "\r"), "\uFFFD"))
					results[i].matches = append(results[i].matches, api.GrepMatch{Path: ft.Name(), Line: n, Text: text})
				}
			})
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return out, err
	}
	for _, r := range results {
		if r.count == 0 {
			continue
		}
		out.Count += r.count
		out.Files++
		for _, m := range r.matches {
			if len(out.Matches) == MaxGrepMatches {
				break
			}
			out.Matches = append(out.Matches, m)
		}
	}
	out.Truncated = len(out.Matches) < out.Count
	return out, nil
}

// wholeText is the expression that finds expr's matching lines in a
// whole file at once ((?m): ^ and $ at each line), or nil when expr may
// mean something else there: it sets flags of its own or anchors at the
// text's ends (\A, \z).
func wholeText(expr string) *regexp.Regexp {
	if strings.Contains(expr, "(?") || strings.Contains(expr, `\A`) || strings.Contains(expr, `\z`) {
		return nil
	}
	re, err := regexp.Compile("(?m)" + expr)
	if err != nil {
		return nil
	}
	return re
}

// matchLines calls f with each line of s that re matches, and its
// number. With whole, it searches the rest of s from one line's start at
// a time and checks with re the line a match starts in, so that the
// lines are exactly those re matches, without a call per line; the first
// match whose line re does not match (one spanning lines) turns it to a
// search line by line for the rest, so that no text is searched twice.
func matchLines(re, whole *regexp.Regexp, s string, f func(n int, line string)) {
	byLine := func(s string, n int) {
		for ; s != ""; n++ {
			line, rest, _ := strings.Cut(s, "\n")
			s = rest
			if re.MatchString(line) {
				f(n, line)
			}
		}
	}
	if whole == nil {
		byLine(s, 1)
		return
	}
	pos, n := 0, 1 // a line's start, and its number
	for pos < len(s) {
		loc := whole.FindStringIndex(s[pos:])
		if loc == nil {
			return
		}
		if start := pos + loc[0]; start > pos {
			if nl := strings.LastIndexByte(s[pos:start], '\n'); nl >= 0 {
				n += strings.Count(s[pos:pos+nl+1], "\n")
				pos += nl + 1
			}
		}
		if pos == len(s) {
			return // the match is after the last newline: no line there
		}
		end := strings.IndexByte(s[pos:], '\n')
		if end < 0 {
			end = len(s) - pos
		}
		line := s[pos : pos+end]
		if !re.MatchString(line) {
			byLine(s[pos:], n)
			return
		}
		f(n, line)
		pos, n = pos+end+1, n+1
	}
}
