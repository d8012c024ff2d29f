package textdiff

import (
	"fmt"
	"strconv"
	"strings"
)

// Patches: the unified diffs this package makes, and git's (`git diff`),
// parsed into one FilePatch per file and applied to a file's text. Only
// text changes are taken: a rename, a copy, a mode change without text,
// or a binary patch is refused by name.

// FilePatch is the change of one file.
type FilePatch struct {
	// Old and New are the file's paths before and after, their a/ and b/
	// prefixes dropped; "" is /dev/null (a new file, or a deleted one).
	Old, New string
	Hunks    []Hunk
}

// Hunk is one @@ block.
type Hunk struct {
	OldStart, OldLines, NewStart, NewLines int
	// Lines are the hunk's lines, each with its kind (' ', '-' or '+')
	// first and its newline unless the file ends without one there.
	Lines []string
}

// Path is the path the patch changes: New, or Old for a deletion.
func (f FilePatch) Path() string {
	if f.New == "" {
		return f.Old
	}
	return f.New
}

// ParsePatch parses a unified diff of one or more files.
func ParsePatch(patch string) ([]FilePatch, error) {
	lines := splitLines(patch)
	var out []FilePatch
	for i := 0; i < len(lines); {
		l := strings.TrimRight(lines[i], "\r\n")
		switch {
		case strings.HasPrefix(l, "rename from ") || strings.HasPrefix(l, "copy from "):
			return nil, fmt.Errorf("line %d: renames and copies are not taken: give the new file whole, and delete the old", i+1)
		case strings.HasPrefix(l, "GIT binary patch") || strings.HasPrefix(l, "Binary files "):
			return nil, fmt.Errorf("line %d: binary patches are not taken", i+1)
		case strings.HasPrefix(l, "--- "):
		default:
			i++ // diff --git, index, new file mode, and any prose
			continue
		}
		if i+1 == len(lines) || !strings.HasPrefix(lines[i+1], "+++ ") {
			return nil, fmt.Errorf("line %d: a --- line without its +++ line", i+1)
		}
		f := FilePatch{Old: patchPath(l[4:], "a/"), New: patchPath(strings.TrimRight(lines[i+1], "\r\n")[4:], "b/")}
		if f.Old == "" && f.New == "" {
			return nil, fmt.Errorf("line %d: both sides are /dev/null", i+1)
		}
		i += 2
		for i < len(lines) && strings.HasPrefix(lines[i], "@@ ") {
			h, next, err := parseHunk(lines, i)
			if err != nil {
				return nil, err
			}
			f.Hunks = append(f.Hunks, h)
			i = next
		}
		if len(f.Hunks) == 0 {
			return nil, fmt.Errorf("line %d: %s has no hunk", i, f.Path())
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no file in the patch: want a unified diff (--- a/PATH, +++ b/PATH, @@ hunks)")
	}
	return out, nil
}

// patchPath is the path of a ---/+++ line: its timestamp dropped, and the
// prefix git puts.
func patchPath(s, prefix string) string {
	if i := strings.IndexByte(s, '\t'); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimSpace(s)
	if s == "/dev/null" {
		return ""
	}
	return strings.TrimPrefix(s, prefix)
}

// parseHunk parses the hunk whose header is lines[i], answering where the
// next line is.
func parseHunk(lines []string, i int) (Hunk, int, error) {
	var h Hunk
	head := strings.TrimRight(lines[i], "\r\n")
	rest, ok := strings.CutPrefix(head, "@@ -")
	old, rest, ok2 := strings.Cut(rest, " +")
	nw, _, ok3 := strings.Cut(rest, " @@")
	var err error
	if ok && ok2 && ok3 {
		if h.OldStart, h.OldLines, err = hunkRangeOf(old); err == nil {
			h.NewStart, h.NewLines, err = hunkRangeOf(nw)
		}
	}
	if !ok || !ok2 || !ok3 || err != nil {
		return h, 0, fmt.Errorf("line %d: hunk header %q: want @@ -START,COUNT +START,COUNT @@", i+1, head)
	}
	i++
	na, nb := 0, 0
	for i < len(lines) && (na < h.OldLines || nb < h.NewLines) {
		l := lines[i]
		switch {
		case l == "\n" || l == "\r\n":
			l = " " + l // a context line whose space an editor dropped
			fallthrough
		case l[0] == ' ':
			na, nb = na+1, nb+1
		case l[0] == '-':
			na++
		case l[0] == '+':
			nb++
		case strings.HasPrefix(l, `\`):
			if err := noNewline(&h, i); err != nil {
				return h, 0, err
			}
			i++
			continue
		default:
			return h, 0, fmt.Errorf("line %d: %q in a hunk: want a line starting with ' ', '-' or '+'", i+1, strings.TrimRight(l, "\n"))
		}
		h.Lines = append(h.Lines, l)
		i++
	}
	if na != h.OldLines || nb != h.NewLines {
		return h, 0, fmt.Errorf("line %d: the hunk ends after %d old and %d new lines, its header says %d and %d", i, na, nb, h.OldLines, h.NewLines)
	}
	if i < len(lines) && strings.HasPrefix(lines[i], `\`) {
		if err := noNewline(&h, i); err != nil {
			return h, 0, err
		}
		i++
	}
	return h, i, nil
}

// noNewline applies a "\ No newline at end of file" line to the hunk's
// last line.
func noNewline(h *Hunk, i int) error {
	if len(h.Lines) == 0 {
		return fmt.Errorf("line %d: \\ before any line of the hunk", i+1)
	}
	last := &h.Lines[len(h.Lines)-1]
	*last = strings.TrimSuffix(*last, "\n")
	return nil
}

// hunkRangeOf parses START[,COUNT] (COUNT 1 when left out).
func hunkRangeOf(s string) (int, int, error) {
	a, b, ok := strings.Cut(s, ",")
	start, err := strconv.Atoi(a)
	if err != nil || start < 0 {
		return 0, 0, fmt.Errorf("start %q", a)
	}
	n := 1
	if ok {
		if n, err = strconv.Atoi(b); err != nil || n < 0 {
			return 0, 0, fmt.Errorf("count %q", b)
		}
	}
	return start, n, nil
}

// Apply applies f's hunks to text, in order: each where its header says
// (its old start), or else at the nearest place after the previous hunk
// where its old lines are.
func (f FilePatch) Apply(text string) (string, error) {
	lines := splitLines(text)
	var out []string
	at := 0 // the next line of lines not yet copied
	for n, h := range f.Hunks {
		var old, nw []string
		for _, l := range h.Lines {
			if l[0] != '+' {
				old = append(old, l[1:])
			}
			if l[0] != '-' {
				nw = append(nw, l[1:])
			}
		}
		want := h.OldStart - 1
		if h.OldLines == 0 {
			want = h.OldStart
		}
		pos := findLines(lines, old, at, want)
		if pos < 0 {
			return "", fmt.Errorf("hunk %d (@@ -%d,%d +%d,%d @@) of %s does not apply: its %d old lines are not in the file from line %d on", n+1, h.OldStart, h.OldLines, h.NewStart, h.NewLines, f.Path(), len(old), at+1)
		}
		out = append(out, lines[at:pos]...)
		out = append(out, nw...)
		at = pos + len(old)
	}
	out = append(out, lines[at:]...)
	return strings.Join(out, ""), nil
}

// findLines is where old is in lines at from or after: want if it is
// there, else the nearest such place; -1 when nowhere.
func findLines(lines, old []string, from, want int) int {
	match := func(p int) bool {
		if p < from || p+len(old) > len(lines) {
			return false
		}
		for i, l := range old {
			if lines[p+i] != l {
				return false
			}
		}
		return true
	}
	want = max(want, from)
	for d := 0; want-d >= from || want+d <= len(lines); d++ {
		if match(want - d) {
			return want - d
		}
		if match(want + d) {
			return want + d
		}
	}
	return -1
}
