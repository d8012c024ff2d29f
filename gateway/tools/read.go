package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/manifest"
	"github.com/rodon-compute/rodon/internal/size"
)

// Bounds of what the tools read and answer.
const (
	// ReadLines is how many lines Read answers unless asked; MaxLineChars
	// cuts a longer line (Read, Grep).
	ReadLines    = 2000
	MaxLineChars = 2000
	// MaxReadBytes bounds Read's content.
	MaxReadBytes = 256 << 10
	// MaxFileBytes bounds a file Read or Edit takes, and Write writes.
	MaxFileBytes = 16 << 20
	// MaxGlobPaths bounds Glob's paths, MaxGrepMatches Grep's matches.
	MaxGlobPaths   = 1000
	MaxGrepMatches = 500
	// MaxGrepFileBytes: Grep skips larger files.
	MaxGrepFileBytes = 1 << 20
	// grepParallel is how many files Grep reads at once.
	grepParallel = 8
	// binarySniff is how much of a file is looked at for a NUL.
	binarySniff = 8000
)

// trees reads the workspace's head and, when p names the library, the
// library's.
func trees(ctx context.Context, env Env, p string) (head, library Tree, err error) {
	if head, err = env.Workspace.Head(ctx); err != nil {
		return nil, nil, fmt.Errorf("read the workspace head: %w", err)
	}
	if env.Library != nil && (p == libraryPrefix || strings.HasPrefix(p, libraryPrefix+"/")) {
		if library, err = env.Library.Head(ctx); err != nil {
			return nil, nil, fmt.Errorf("read the library: %w", err)
		}
	}
	return head, library, nil
}

// isBinary reports whether a file's content looks binary: a NUL in its
// first bytes (as git decides).
func isBinary(b []byte) bool {
	return bytes.IndexByte(b[:min(len(b), binarySniff)], 0) >= 0
}

// readFile reads the file at t (an entry of type file, at most max
// bytes).
func readFile(ctx context.Context, t Target, max int64) ([]byte, error) {
	rc, err := t.Tree.Open(ctx, t.Path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", t.Name(), err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	if t.Entry != nil {
		buf.Grow(int(min(t.Entry.Size, max)) + 1)
	}
	if _, err := buf.ReadFrom(io.LimitReader(rc, max+1)); err != nil {
		return nil, fmt.Errorf("read %s: %w", t.Name(), err)
	}
	b := buf.Bytes()
	if int64(len(b)) > max {
		return nil, fmt.Errorf("read %s: more than the %d bytes its entry says", t.Name(), t.Entry.Size)
	}
	return b, nil
}

// fileFailure is why t is not a file a tool can read ("" when it is):
// nothing there, a directory, a file too large.
func fileFailure(ix *index, t Target, given string, max int64) string {
	switch {
	case t.IsDir():
		return fmt.Sprintf("%s is a directory, not a file: list it with Glob", t.Name())
	case t.Entry == nil:
		msg := fmt.Sprintf("no such file: %s", quote(given))
		if !t.Library {
			// The path as given, then percent-decoded (a path taken
			// literally that was meant encoded).
			for _, p := range []string{t.Path, percentDecoded(t.Path)} {
				if s := ix.suggest(p); s != "" && s != workspacePrefix+"/"+t.Path {
					msg += "; did you mean " + s + "?"
					break
				}
			}
		}
		return msg
	case t.Entry.Type != string(manifest.File):
		return fmt.Sprintf("%s is a %s, not a file", t.Name(), t.Entry.Type)
	case t.Entry.Size > max:
		return fmt.Sprintf("%s (%d bytes) is larger than the %s a tool reads; use Grep, or Bash", t.Name(), t.Entry.Size, size.Format(max))
	}
	return ""
}

// refusalOrErr passes a *Refusal on as it is, anything else as an error.
func refusalOrErr(err error) error {
	var r *Refusal
	if errors.As(err, &r) {
		return r
	}
	return err
}

// cutLine cuts a line to MaxLineChars characters.
func cutLine(s string) string {
	if len(s) <= MaxLineChars {
		return s
	}
	n := 0
	for i := range s {
		if n == MaxLineChars {
			return s[:i]
		}
		n++
	}
	return s
}

// Read answers the lines of a file, numbered as cat -n does: from line
// Offset (1-based), Limit lines (ReadLines unless given), each cut at
// MaxLineChars, the whole at most MaxReadBytes.
func Read(ctx context.Context, env Env, in api.ReadInput) (api.ReadResult, error) {
	out := api.ReadResult{Path: in.Path}
	if in.Offset < 0 || in.Limit < 0 {
		return out, refuse(api.RefusedInput, in.Path, "", "offset %d, limit %d: want 0 or more", in.Offset, in.Limit)
	}
	head, library, err := trees(ctx, env, in.Path)
	if err != nil {
		return out, err
	}
	out.Revision = head.Revision()
	ix := indexOf(head)
	t, err := resolve(head, ix, library, in.Path, false)
	if err != nil {
		return out, refusalOrErr(err)
	}
	out.Path = t.Name()
	if t.Library {
		out.Revision = t.Tree.Revision()
	}
	if msg := fileFailure(ix, t, in.Path, MaxFileBytes); msg != "" {
		out.Error = msg
		return out, nil
	}
	b, err := readFile(ctx, t, MaxFileBytes)
	if err != nil {
		return out, err
	}
	if isBinary(b) {
		out.Error = fmt.Sprintf("%s is a binary file (%s): Read shows text only", t.Name(), size.Format(int64(len(b))))
		return out, nil
	}
	offset, limit := max(in.Offset, 1), in.Limit
	if limit == 0 {
		limit = ReadLines
	}
	var sb strings.Builder
	s := string(b)
	for n := 1; s != ""; n++ {
		line, rest, _ := strings.Cut(s, "\n")
		s = rest
		out.Lines = n
		if n < offset || out.Truncated {
			continue
		}
		if n >= offset+limit {
			out.Truncated = true
			continue
		}
		l := fmt.Sprintf("%6d\t%s\n", n, cutLine(strings.ToValidUTF8(line, string(utf8.RuneError))))
		if sb.Len()+len(l) > MaxReadBytes {
			out.Truncated = true
			continue
		}
		sb.WriteString(l)
	}
	out.Content = sb.String()
	return out, nil
}
