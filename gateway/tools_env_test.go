package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/gateway/tools"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// TestToolEnv: the file tools on the real scheduler's workspaces: a write
// is a revision by the step from the revision read, it reads back, a
// conflict names its paths, several files are one revision, the library
// is read-only, and a second Grep reads no file again.
func TestToolEnv(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	step := api.Author{Kind: api.AuthorStep, ID: "run-tools-0"}
	env, err := f.g.toolEnv(f.in(ctx), wsMain, step)
	if err != nil {
		t.Fatal(err)
	}
	head, err := env.Workspace.Head(ctx)
	if err != nil || head.Revision() != f.rev || len(head.Entries()) != 1 || head.Entries()[0].Path != "data/a.txt" {
		t.Fatalf("Head = %v, %v; want %s holding data/a.txt", head, err, f.rev)
	}

	// Write, then read back.
	w, err := tools.Write(ctx, env, api.WriteInput{Path: "/workspace/out/b.txt", Content: "one\ntwo\n"})
	if err != nil || w.Error != "" || w.Revision == "" {
		t.Fatalf("Write = %+v, %v", w, err)
	}
	rev, err := f.sched.Revision(ctx, wsMain, w.Revision)
	if err != nil || rev.Author != step || rev.Parent != f.rev || rev.Message != "Write out/b.txt" {
		t.Errorf("the Write's revision = %+v, %v; want authored by %v from %s", rev, err, step, f.rev)
	}
	r, err := tools.Read(ctx, env, api.ReadInput{Path: "out/b.txt"})
	if err != nil || r.Content != "     1\tone\n     2\ttwo\n" || r.Revision != w.Revision {
		t.Errorf("Read(out/b.txt) = %+v, %v", r, err)
	}
	e, err := tools.Edit(ctx, env, api.EditInput{Path: "out/b.txt", OldString: "two", NewString: "TWO"})
	if err != nil || e.Error != "" || e.Replacements != 1 {
		t.Errorf("Edit = %+v, %v", e, err)
	}
	// The same content again is a revision that changes nothing.
	same, err := tools.Write(ctx, env, api.WriteInput{Path: "out/b.txt", Content: "one\nTWO\n"})
	if err != nil || same.Error != "" || same.Revision == "" || same.Revision == e.Revision {
		t.Errorf("Write of the same content = %+v, %v; want a new revision", same, err)
	}

	// A conflict: the head moved since the revision a commit was made from.
	head, _ = env.Workspace.Head(ctx)
	if _, err := f.sched.PutFile(ctx, wsMain, "data/a.txt", strings.NewReader("theirs\n"), 7, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = env.Workspace.Commit(ctx, head.Revision(), []tools.Change{{Path: "data/a.txt", Content: []byte("mine\n")}}, "mine")
	var c *tools.Conflict
	var he *httpError
	if !errors.As(err, &c) || len(c.Paths) != 1 || c.Paths[0] != "data/a.txt" || c.Detached == "" || !errors.As(err, &he) || he.Status != http.StatusConflict {
		t.Fatalf("Commit over a moved head = %v; want a conflict naming data/a.txt, a 409 with its detached revision", err)
	}
	if !strings.Contains(err.Error(), "data/a.txt") {
		t.Errorf("conflict %q does not name the path", err)
	}
	// The same through Edit: a failure the model reads, naming the path.
	stale := &staleWorkspace{Workspace: env.Workspace, head: head}
	got, err := tools.Edit(ctx, tools.Env{Workspace: stale}, api.EditInput{Path: "data/a.txt", OldString: "hello", NewString: "bye"})
	if err != nil || !strings.Contains(got.Error, "data/a.txt changed since") {
		t.Errorf("Edit over a moved head = %+v, %v; want a failure naming data/a.txt", got, err)
	}

	// Several files: one revision.
	head, _ = env.Workspace.Head(ctx)
	many, err := env.Workspace.Commit(ctx, head.Revision(), []tools.Change{
		{Path: "m/1.txt", Content: []byte("1\n")}, {Path: "m/2.txt", Content: []byte("2\n"), Mode: 0o755},
	}, "two files")
	if err != nil || many.Parent != head.Revision() || many.Author != step || len(many.Changes.Added) != 2 {
		t.Fatalf("Commit of two files = %+v, %v; want one revision adding both", many, err)
	}
	mixed, err := env.Workspace.Commit(ctx, many.ID, []tools.Change{{Path: "m/1.txt", Delete: true}, {Path: "m/3.txt", Content: []byte("3\n")}}, "one out, one in")
	if err != nil || mixed.Parent != many.ID || len(mixed.Changes.Added) != 1 || len(mixed.Changes.Removed) != 1 {
		t.Fatalf("Commit of a deletion and a file = %+v, %v; want one revision", mixed, err)
	}
	gone, err := env.Workspace.Commit(ctx, mixed.ID, []tools.Change{{Path: "m/3.txt", Delete: true}}, "one out")
	if err != nil || gone.Parent != mixed.ID || len(gone.Changes.Removed) != 1 || gone.Author != step {
		t.Fatalf("Commit of a deletion = %+v, %v; want one revision removing m/3.txt", gone, err)
	}

	// The library: readable at /library, never written.
	lib, err := f.g.libraryID(f.in(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.sched.PutFile(ctx, lib, "ref.csv", strings.NewReader("a,b\n"), 4, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if r, err := tools.Read(ctx, env, api.ReadInput{Path: "/library/ref.csv"}); err != nil || r.Content != "     1\ta,b\n" {
		t.Errorf("Read(/library/ref.csv) = %+v, %v", r, err)
	}
	if _, err := env.Library.Commit(ctx, "", []tools.Change{{Path: "x", Content: []byte("x")}}, "x"); err == nil {
		t.Errorf("a commit to the library succeeded")
	}
	var ref *tools.Refusal
	if _, err := tools.Write(ctx, env, api.WriteInput{Path: "/library/ref.csv", Content: "x"}); !errors.As(err, &ref) || ref.Reason != api.RefusedReadOnly {
		t.Errorf("Write(/library/ref.csv) = %v, want refused read_only", err)
	}

	// Grep twice over many files: the second reads no file.
	var changes []tools.Change
	for i := range 50 {
		changes = append(changes, tools.Change{Path: fmt.Sprintf("g/%02d.txt", i), Content: []byte(fmt.Sprintf("line %d\nneedle %d\n", i, i))})
	}
	head, _ = env.Workspace.Head(ctx)
	if _, err := env.Workspace.Commit(ctx, head.Revision(), changes, "fifty"); err != nil {
		t.Fatal(err)
	}
	var reads, trees atomic.Int64
	remove := f.sched.c.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/files/"):
				reads.Add(1)
			case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/tree"):
				trees.Add(1)
			}
			next.ServeHTTP(w, r)
		})
	})
	defer remove()
	for i := range 2 {
		g, err := tools.Grep(ctx, env, api.GrepInput{Pattern: "needle", Path: "g"})
		if err != nil || g.Count != 50 || g.Files != 50 {
			t.Fatalf("Grep %d = %d matches in %d files, %v; want 50 in 50", i, g.Count, g.Files, err)
		}
		if n, nt := reads.Swap(0), trees.Swap(0); i == 0 && (n != 50 || nt != 1) || i == 1 && (n != 0 || nt != 0) {
			t.Errorf("Grep %d read %d files and %d trees from the scheduler; want %d and %d", i, n, nt, []int{50, 0}[i], []int{1, 0}[i])
		}
	}
}

// staleWorkspace answers an old head.
type staleWorkspace struct {
	tools.Workspace
	head tools.Tree
}

func (s *staleWorkspace) Head(context.Context) (tools.Tree, error) { return s.head, nil }

// TestContentCacheBound: the cache keeps at most its bound, dropping the
// least recently used first.
func TestContentCacheBound(t *testing.T) {
	var c contentCache
	big := make([]byte, contentCacheBytes/4)
	for i := range 4 {
		c.put(fmt.Sprint(i), big)
	}
	c.get("0") // 1 is now the least recently used
	c.put("4", big)
	for k, want := range map[string]bool{"0": true, "1": false, "2": true, "3": true, "4": true} {
		if _, ok := c.get(k); ok != want {
			t.Errorf("get(%s) = %v, want %v", k, ok, want)
		}
	}
	if c.files.cost > contentCacheBytes {
		t.Errorf("cache holds %d bytes, more than %d", c.files.cost, contentCacheBytes)
	}
	c.put("huge", make([]byte, contentCacheBytes+1))
	if _, ok := c.get("huge"); ok {
		t.Errorf("a content larger than the whole cache was cached")
	}
}
