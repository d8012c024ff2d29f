package treecopy

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// allocated returns the bytes a file occupies on disk.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// TestSparseFiles: a 10 TiB sparse file with a little data in the middle
// comes through as the same sparse file, at once and without writing its
// holes, and written zeros become holes too.
func TestSparseFiles(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	f, err := os.Create(filepath.Join(src, "huge"))
	if err != nil {
		t.Fatal(err)
	}
	const size = 10 << 40
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("middle"), 5<<40); err != nil {
		t.Fatal(err)
	}
	f.Close()
	write(t, filepath.Join(src, "zeros"), string(make([]byte, 1<<20)))

	start := time.Now()
	if err := Copy(src, dst, Limits{MaxBytes: 2 << 20}); err != nil {
		t.Fatalf("Copy() = %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("copying a 10 TiB sparse file took %v", d)
	}
	huge := filepath.Join(dst, "huge")
	if fi, err := os.Stat(huge); err != nil || fi.Size() != size {
		t.Fatalf("copy of huge: %v, %v; want %d bytes", fi, err, int64(size))
	}
	if n := allocated(t, huge); n > 1<<20 {
		t.Errorf("copy of a sparse file occupies %d bytes, want its data only", n)
	}
	g, _ := os.Open(huge)
	b := make([]byte, 6)
	g.ReadAt(b, 5<<40)
	g.Close()
	if string(b) != "middle" {
		t.Errorf("data in the middle of the sparse file = %q, want %q", b, "middle")
	}
	if n := allocated(t, filepath.Join(dst, "zeros")); n != 0 {
		t.Errorf("1 MiB of written zeros occupies %d bytes after the copy, want a hole", n)
	}
	if c, err := Diff(src, dst); err != nil || c.Len() != 0 {
		t.Errorf("Diff(sparse tree, its copy) = %v, %v; want no changes", c, err)
	}
	// The same size and holes, one byte different: Diff finds it without
	// reading 10 TiB.
	h, _ := os.OpenFile(huge, os.O_WRONLY, 0)
	h.WriteAt([]byte("M"), 5<<40)
	h.Close()
	start = time.Now()
	if c, err := Diff(src, dst); err != nil || c.String() != "1 file changed: ~huge" {
		t.Errorf("Diff after changing one byte = %q, %v; want ~huge", c.String(), err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("comparing 10 TiB sparse files took %v", d)
	}
}

// TestLimit: a tree with more data than the limit is refused having
// written at most the limit, and Replace then leaves the destination as it
// was, without a staging directory.
func TestLimit(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	payload := bytes.Repeat([]byte("x"), 600<<10)
	write(t, filepath.Join(src, "a"), string(payload))
	write(t, filepath.Join(src, "b"), string(payload))
	write(t, filepath.Join(dst, "old"), "previous tree")

	out := t.TempDir()
	err := Copy(src, out, Limits{MaxBytes: 1 << 20})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Copy(1.2 MiB, limit 1 MiB) = %v, want ErrTooLarge", err)
	}
	var total int64
	filepath.Walk(out, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			total += allocated(t, p)
		}
		return nil
	})
	if total > 1<<20 {
		t.Errorf("refused copy wrote %d bytes, want at most the limit", total)
	}

	if _, err := Replace(src, dst, Limits{MaxBytes: 1 << 20}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Replace() = %v, want ErrTooLarge", err)
	}
	if got := read(t, filepath.Join(dst, "old")); got != "previous tree" {
		t.Errorf("destination after a refused Replace: old = %q", got)
	}
	if _, err := os.Stat(filepath.Join(dst, "a")); !os.IsNotExist(err) {
		t.Errorf("destination after a refused Replace has a (stat: %v), want it untouched", err)
	}
	assertNoStaging(t, dst)
}

// TestHardLinks: a file linked many times is copied once and linked, so
// its data counts once against the limit.
func TestHardLinks(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	write(t, filepath.Join(src, "data"), string(bytes.Repeat([]byte("y"), 512<<10)))
	os.Mkdir(filepath.Join(src, "d"), 0o755)
	for _, name := range []string{"l1", "l2", "d/l3"} {
		if err := os.Link(filepath.Join(src, "data"), filepath.Join(src, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := Copy(src, dst, Limits{MaxBytes: 1 << 20}); err != nil {
		t.Fatalf("Copy(4 links of 512 KiB, limit 1 MiB) = %v", err)
	}
	var first syscall.Stat_t
	syscall.Stat(filepath.Join(dst, "data"), &first)
	for _, name := range []string{"l1", "l2", "d/l3"} {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dst, name), &st); err != nil || st.Ino != first.Ino {
			t.Errorf("%s: inode %d, %v; want a link of data (inode %d)", name, st.Ino, err, first.Ino)
		}
	}
}

// TestSpecialFiles: a named pipe, a socket and a device node are skipped,
// and a pipe with no writer does not block the copy.
func TestSpecialFiles(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := syscall.Mknod(filepath.Join(src, "null"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(src, "plain"), "ok")
	done := make(chan error, 1)
	go func() { done <- Copy(src, dst, Limits{}) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Copy() = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Copy() blocked on a named pipe")
	}
	ents, _ := os.ReadDir(dst)
	if len(ents) != 1 || ents[0].Name() != "plain" {
		t.Errorf("destination holds %v, want only plain", ents)
	}
}

// TestDeepTree: nesting past maxDepth is refused, not followed until the
// agent runs out of open files.
func TestDeepTree(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	p := src
	for range maxDepth + 1 {
		p = filepath.Join(p, "d")
	}
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Copy(src, dst, Limits{}); err == nil {
		t.Errorf("Copy(%d levels) = nil, want an error", maxDepth+1)
	}
}
