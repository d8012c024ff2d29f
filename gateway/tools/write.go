package tools

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/manifest"
	"github.com/rodon-compute/rodon/internal/size"
)

// Modes a tool writes: a new file's, unless the file it replaces had
// another (kept).
const newFileMode = 0o644

// writable is why t cannot be written as a file ("" when it can): the
// workspace itself, a directory, a path below a file.
func writable(ix *index, t Target) string {
	switch {
	case t.Path == "":
		return "the workspace itself is not a file: give a path inside it"
	case t.IsDir():
		return fmt.Sprintf("%s is a directory, not a file", t.Name())
	case t.Entry != nil && t.Entry.Type != string(manifest.File):
		return fmt.Sprintf("%s is a %s, not a file", t.Name(), t.Entry.Type)
	}
	for d := path.Dir(t.Path); d != "."; d = path.Dir(d) {
		if e, ok := ix.exact(d); ok && e.Type != string(manifest.Dir) {
			return fmt.Sprintf("%s cannot be written: %s is a %s, not a directory", t.Name(), d, e.Type)
		}
	}
	return ""
}

// commit writes one file made from head as one revision, answering it; a
// conflict is a Failure naming the paths.
func commit(ctx context.Context, env Env, head Tree, t Target, content []byte, message string) (api.Revision, error) {
	mode := uint32(newFileMode)
	if t.Entry != nil && t.Entry.Mode != 0 {
		mode = t.Entry.Mode
	}
	rev, err := env.Workspace.Commit(ctx, head.Revision(), []Change{{Path: t.Path, Content: content, Mode: mode}}, message)
	var c *Conflict
	if errors.As(err, &c) {
		return rev, Failure(c.Error())
	}
	return rev, err
}

// failed reports whether err is a Failure, putting it in *msg.
func failed(err error, msg *string) bool {
	var f Failure
	if errors.As(err, &f) {
		*msg = f.Error()
		return true
	}
	return false
}

// writeTarget reads the head and confines p in it as a write.
func writeTarget(ctx context.Context, env Env, p string) (Tree, *index, Target, error) {
	head, err := env.Workspace.Head(ctx)
	if err != nil {
		return nil, nil, Target{}, fmt.Errorf("read the workspace head: %w", err)
	}
	ix := indexOf(head)
	t, err := resolve(head, ix, nil, p, true)
	if err != nil {
		return nil, nil, Target{}, refusalOrErr(err)
	}
	return head, ix, t, nil
}

// commitWrite commits content as t's and answers the revision made; a
// failure the model should read (a conflict) is set in *errText instead.
func commitWrite(ctx context.Context, env Env, head Tree, t Target, content []byte, message string, errText *string) (string, error) {
	rev, err := commit(ctx, env, head, t, content, message)
	if failed(err, errText) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return rev.ID, nil
}

// Write writes a file (made, or replaced whole) as one revision.
func Write(ctx context.Context, env Env, in api.WriteInput) (api.WriteResult, error) {
	out := api.WriteResult{Path: in.Path}
	head, ix, t, err := writeTarget(ctx, env, in.Path)
	if err != nil {
		return out, err
	}
	out.Path = t.Name()
	if msg := writable(ix, t); msg != "" {
		out.Error = msg
		return out, nil
	}
	if len(in.Content) > MaxFileBytes {
		out.Error = fmt.Sprintf("content of %s is more than the %s a tool writes; write it with Bash", size.Format(int64(len(in.Content))), size.Format(MaxFileBytes))
		return out, nil
	}
	rev, err := commitWrite(ctx, env, head, t, []byte(in.Content), "Write "+t.Name(), &out.Error)
	if err != nil || out.Error != "" {
		return out, err
	}
	out.Bytes, out.Revision = int64(len(in.Content)), rev
	return out, nil
}

// Edit replaces old_string in a file with new_string, as one revision:
// old_string must occur exactly once unless ReplaceAll.
func Edit(ctx context.Context, env Env, in api.EditInput) (api.EditResult, error) {
	out := api.EditResult{Path: in.Path}
	head, ix, t, err := writeTarget(ctx, env, in.Path)
	if err != nil {
		return out, err
	}
	out.Path = t.Name()
	if msg := fileFailure(ix, t, in.Path, MaxFileBytes); msg != "" {
		out.Error = msg
		return out, nil
	}
	switch {
	case in.OldString == "":
		out.Error = "old_string is empty: give the text to replace (to write a whole file, use Write)"
		return out, nil
	case in.OldString == in.NewString:
		out.Error = "old_string and new_string are the same: nothing would change"
		return out, nil
	}
	b, err := readFile(ctx, t, MaxFileBytes)
	if err != nil {
		return out, err
	}
	if isBinary(b) {
		out.Error = fmt.Sprintf("%s is a binary file: Edit changes text only", t.Name())
		return out, nil
	}
	s := string(b)
	n := strings.Count(s, in.OldString)
	switch {
	case n == 0:
		out.Error = fmt.Sprintf("old_string not found in %s: Read it and give the exact text, whitespace included", t.Name())
		return out, nil
	case n > 1 && !in.ReplaceAll:
		out.Error = fmt.Sprintf("old_string occurs %d times in %s: give more of the text around it to make it unique, or set replace_all", n, t.Name())
		return out, nil
	}
	s = strings.ReplaceAll(s, in.OldString, in.NewString)
	if len(s) > MaxFileBytes {
		out.Error = fmt.Sprintf("the edited file would be %s, more than the %s a tool writes", size.Format(int64(len(s))), size.Format(MaxFileBytes))
		return out, nil
	}
	rev, err := commitWrite(ctx, env, head, t, []byte(s), "Edit "+t.Name(), &out.Error)
	if err != nil || out.Error != "" {
		return out, err
	}
	out.Replacements, out.Revision = n, rev
	return out, nil
}
