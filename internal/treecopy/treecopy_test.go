package treecopy

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o640); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCopy(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	write(t, filepath.Join(src, "a.txt"), "a")
	write(t, filepath.Join(src, "d/e/f.txt"), "f")
	if err := os.Symlink("a.txt", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(src, "a.txt"), 0o751); err != nil {
		t.Fatal(err)
	}
	if err := Copy(src, dst, Limits{}); err != nil {
		t.Fatalf("Copy() = %v", err)
	}
	if got := read(t, filepath.Join(dst, "d/e/f.txt")); got != "f" {
		t.Errorf("d/e/f.txt = %q, want %q", got, "f")
	}
	if fi, err := os.Stat(filepath.Join(dst, "a.txt")); err != nil || fi.Mode().Perm() != 0o751 {
		t.Errorf("a.txt mode = %v, %v; want 0751", fi.Mode(), err)
	}
	if target, err := os.Readlink(filepath.Join(dst, "link")); err != nil || target != "a.txt" {
		t.Errorf("link = %q, %v; want a symlink to a.txt", target, err)
	}
}

// TestNoSymlinkEscape plants links in the destination and the source that
// point outside, the way a step could, and checks that nothing outside is
// written or read.
func TestNoSymlinkEscape(t *testing.T) {
	outside := t.TempDir()
	write(t, filepath.Join(outside, "secret"), "host secret")
	src, dst := t.TempDir(), t.TempDir()
	// The step replaced a directory of the workspace with a link outside,
	// then the read-back writes a file "through" it.
	if err := os.Symlink(outside, filepath.Join(dst, "d")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(src, "d/secret"), "overwritten")
	// A link in the source to a host file must be copied as a link, not
	// followed and its content read.
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(src, "steal")); err != nil {
		t.Fatal(err)
	}
	// A link to a directory outside is not descended into.
	if err := os.Symlink(outside, filepath.Join(src, "out")); err != nil {
		t.Fatal(err)
	}
	if _, err := Replace(src, dst, Limits{}); err != nil {
		t.Fatalf("Replace() = %v", err)
	}
	if got := read(t, filepath.Join(outside, "secret")); got != "host secret" {
		t.Errorf("file outside the destination = %q: written through a link", got)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "d")); err != nil || !fi.IsDir() {
		t.Errorf("dst/d = %v, %v; want a real directory replacing the link", fi, err)
	}
	for _, name := range []string{"steal", "out"} {
		if fi, err := os.Lstat(filepath.Join(dst, name)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("dst/%s = %v, %v; want a symlink, not what it points at", name, fi, err)
		}
	}
}

func TestReplace(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	write(t, filepath.Join(src, "keep"), "new")
	write(t, filepath.Join(dst, "keep"), "old")
	write(t, filepath.Join(dst, "gone/deep"), "x")
	write(t, filepath.Join(dst, "gone.txt"), "x")
	if err := os.Chmod(dst, 0o750); err != nil {
		t.Fatal(err)
	}
	c, err := Replace(src, dst, Limits{})
	if err != nil {
		t.Fatalf("Replace() = %v", err)
	}
	if got, want := c.String(), "3 files changed: ~keep, -gone/, -gone.txt"; got != want {
		t.Errorf("Replace() changes = %q, want %q", got, want)
	}
	if got := read(t, filepath.Join(dst, "keep")); got != "new" {
		t.Errorf("keep = %q, want new", got)
	}
	for _, name := range []string{"gone", "gone.txt"} {
		if _, err := os.Lstat(filepath.Join(dst, name)); !os.IsNotExist(err) {
			t.Errorf("%s still there (%v)", name, err)
		}
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("dst mode = %v, %v; want 0750 kept", fi.Mode(), err)
	}
	assertNoStaging(t, dst)

	// Into a destination that does not exist yet.
	fresh := filepath.Join(t.TempDir(), "ws")
	if c, err := Replace(src, fresh, Limits{}); err != nil || c.String() != "1 file changed: +keep" {
		t.Errorf("Replace(into a missing dir) = %q, %v; want +keep", c.String(), err)
	}
}

// assertNoStaging fails if a staging directory is left beside dst.
func assertNoStaging(t *testing.T, dst string) {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Dir(dst))
	for _, e := range ents {
		if strings.Contains(e.Name(), stagingInfix) {
			t.Errorf("staging directory left: %s", e.Name())
		}
	}
}

// TestCopyPerm: with Limits.Perm the copy's files get the modes it gives,
// and files linked together in the source (links into a blob cache) are
// separate files in the copy.
func TestCopyPerm(t *testing.T) {
	cache, src, dst := t.TempDir(), t.TempDir(), t.TempDir()
	write(t, filepath.Join(cache, "blob"), "same")
	if err := os.Chmod(filepath.Join(cache, "blob"), 0o444); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"run.sh", "d/data.txt"} {
		os.MkdirAll(filepath.Dir(filepath.Join(src, p)), 0o755)
		if err := os.Link(filepath.Join(cache, "blob"), filepath.Join(src, p)); err != nil {
			t.Fatal(err)
		}
	}
	modes := map[string]uint32{"run.sh": 0o755, "d/data.txt": 0o644}
	if err := Copy(src, dst, Limits{Perm: func(rel string) uint32 { return modes[rel] }}); err != nil {
		t.Fatalf("Copy() = %v", err)
	}
	var inos []uint64
	for p, want := range modes {
		fi, err := os.Stat(filepath.Join(dst, p))
		if err != nil || uint32(fi.Mode().Perm()) != want {
			t.Errorf("%s: %v, %v; want mode %o", p, fi, err, want)
			continue
		}
		inos = append(inos, fi.Sys().(*syscall.Stat_t).Ino)
	}
	if len(inos) == 2 && inos[0] == inos[1] {
		t.Error("the copy keeps the cache's link between two paths")
	}
}
