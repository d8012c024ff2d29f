package treecopy

import (
	"os"
	"path/filepath"
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
	if err := Copy(src, dst); err != nil {
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
	// then the copy back writes a file "through" it.
	if err := os.Symlink(outside, filepath.Join(dst, "d")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(src, "d/secret"), "overwritten")
	// A link in the source to a host file must be copied as a link, not
	// followed and its content read.
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(src, "steal")); err != nil {
		t.Fatal(err)
	}
	if err := Copy(src, dst); err != nil {
		t.Fatalf("Copy() = %v", err)
	}
	if got := read(t, filepath.Join(outside, "secret")); got != "host secret" {
		t.Errorf("file outside the destination = %q: written through a link", got)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "d")); err != nil || !fi.IsDir() {
		t.Errorf("dst/d = %v, %v; want a real directory replacing the link", fi, err)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "steal")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("dst/steal = %v, %v; want a symlink, not the host file's content", fi, err)
	}
}

func TestMirror(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	write(t, filepath.Join(src, "keep"), "new")
	write(t, filepath.Join(dst, "keep"), "old")
	write(t, filepath.Join(dst, "gone/deep"), "x")
	write(t, filepath.Join(dst, "gone.txt"), "x")
	if err := Mirror(src, dst); err != nil {
		t.Fatalf("Mirror() = %v", err)
	}
	if got := read(t, filepath.Join(dst, "keep")); got != "new" {
		t.Errorf("keep = %q, want new", got)
	}
	for _, name := range []string{"gone", "gone.txt"} {
		if _, err := os.Lstat(filepath.Join(dst, name)); !os.IsNotExist(err) {
			t.Errorf("%s still there (%v)", name, err)
		}
	}
}
