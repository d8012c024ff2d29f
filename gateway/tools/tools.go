// Package tools is an agent run's file tools (SPEC.md, "Agents, grants,
// tools and gates"): Read, Glob, Grep, Write, Edit, ProposeChange's diff,
// and the confinement of every path they are given. Tools act on a
// workspace's revision store through Workspace; they run in the gateway,
// no sandbox needed. Results are what a model reads (api.*Result).
//
// A tool never decides what the grant allows: the gateway checks the tool
// is granted before calling it. A tool does decide where a path may lead:
// Resolve confines it to the workspace and, read-only, the library, and a
// refusal is a *Refusal naming the path the caller probably meant.
package tools

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/rodon-compute/rodon/api"
)

// Tree is one revision of a workspace as the tools read it.
type Tree interface {
	// Revision is the revision's id ("" for an empty workspace).
	Revision() string
	// Entries is every entry of the tree (files, directories, symlinks),
	// sorted by path.
	Entries() []api.TreeEntry
	// Open opens the file at path (a cleaned tree path, type file).
	Open(ctx context.Context, path string) (io.ReadCloser, error)
}

// Workspace is what the tools need of a workspace (the gateway's adapter
// over scheduler/client; an in-memory one in tests).
type Workspace interface {
	// Head reads the head revision's tree.
	Head(ctx context.Context) (Tree, error)
	// Commit writes changes made from revision parent as one revision
	// authored by the step, answering it; a conflict (a path changed
	// since parent) is an error naming the paths.
	Commit(ctx context.Context, parent string, changes []Change, message string) (api.Revision, error)
}

// Change is one path a commit changes: its new content, or Delete.
type Change struct {
	Path    string
	Content []byte
	Mode    uint32
	Delete  bool
}

// Env is what one tool call acts on.
type Env struct {
	Workspace Workspace
	// Library is the account library (read-only at /library); nil when
	// the account has none.
	Library Workspace
}

// Refusal is a call the confinement refused: its api.Refusal.
type Refusal struct{ api.Refusal }

func (r *Refusal) Error() string { return r.Message }

// Conflict is what a Workspace's Commit answers when a path it changes
// changed since its parent: the paths, and the detached revision that
// keeps the change (workspaces keep a refused tree). A tool makes it its
// result's Error; Err is the store's own error.
type Conflict struct {
	Parent   string
	Paths    []string
	Detached string
	Err      error
}

func (c *Conflict) Error() string {
	since := "the revision it was read at"
	if c.Parent != "" {
		since = c.Parent
	}
	msg := fmt.Sprintf("conflict: %s changed since %s", strings.Join(c.Paths, ", "), since)
	if len(c.Paths) == 0 {
		msg = "conflict: the workspace changed since " + since
	}
	if c.Detached != "" {
		msg += " (the change is kept as detached revision " + c.Detached + ")"
	}
	return msg + "; read it again and retry"
}

func (c *Conflict) Unwrap() error { return c.Err }

// Failure is an error a model should read (a file not found, a directory,
// an old_string not found): the tool's result's Error, not the
// gateway's. ProposalDiff answers one; the tools put theirs in Error.
type Failure string

func (f Failure) Error() string { return string(f) }

func failf(format string, args ...any) Failure { return Failure(fmt.Sprintf(format, args...)) }
