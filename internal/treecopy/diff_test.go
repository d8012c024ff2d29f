package treecopy

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestDiff(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	write := func(root, name, data string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
	}
	// The same in both.
	write(src, "same.txt", "x", 0o644)
	write(dst, "same.txt", "x", 0o644)
	write(src, "d/same", "y", 0o644)
	write(dst, "d/same", "y", 0o644)
	// Changed: content of equal size, size, mode, link target.
	write(src, "content.txt", "abc", 0o644)
	write(dst, "content.txt", "abd", 0o644)
	write(src, "size.txt", "abcd", 0o644)
	write(dst, "size.txt", "abc", 0o644)
	write(src, "mode.sh", "#!", 0o755)
	write(dst, "mode.sh", "#!", 0o644)
	os.Symlink("same.txt", filepath.Join(src, "link"))
	os.Symlink("content.txt", filepath.Join(dst, "link"))
	// Added and removed.
	write(src, "new.png", "png", 0o644)
	write(src, "newdir/a", "a", 0o644)
	write(dst, "old.txt", "old", 0o644)
	write(dst, "olddir/b", "b", 0o644)

	c, err := Diff(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"new.png", "newdir/", "newdir/a"}; !slices.Equal(c.Added, want) {
		t.Errorf("Added = %v, want %v", c.Added, want)
	}
	if want := []string{"content.txt", "link", "mode.sh", "size.txt"}; !slices.Equal(c.Modified, want) {
		t.Errorf("Modified = %v, want %v", c.Modified, want)
	}
	if want := []string{"old.txt", "olddir/"}; !slices.Equal(c.Removed, want) {
		t.Errorf("Removed = %v, want %v", c.Removed, want)
	}
	if got, want := c.String(), "9 files changed: +new.png, +newdir/, +newdir/a, ~content.txt, ~link, ~mode.sh, ~size.txt, -old.txt, -olddir/"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if _, err := Replace(src, dst, Limits{}); err != nil {
		t.Fatal(err)
	}
	if c, err := Diff(src, dst); err != nil || c.Len() != 0 {
		t.Errorf("Diff after Replace = %+v, %v; want no changes", c, err)
	}
}
