package treecopy

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Changes lists what differs between two trees, by slash-separated path;
// directories end in "/". Each list is in walk (lexical) order.
type Changes struct {
	Added, Modified, Removed []string
}

// Len returns the number of changed paths.
func (c Changes) Len() int { return len(c.Added) + len(c.Modified) + len(c.Removed) }

// maxListed is how many paths String names before summarizing.
const maxListed = 20

// String is a one-line summary for people: "3 files changed: +chart.png,
// ~summary.csv, -old.txt", naming at most 20 paths.
func (c Changes) String() string {
	n := c.Len()
	if n == 0 {
		return "no files changed"
	}
	var b strings.Builder
	unit := "files"
	if n == 1 {
		unit = "file"
	}
	fmt.Fprintf(&b, "%d %s changed: ", n, unit)
	listed := 0
	for _, l := range []struct {
		sign  string
		paths []string
	}{{"+", c.Added}, {"~", c.Modified}, {"-", c.Removed}} {
		for _, p := range l.paths {
			if listed == maxListed {
				fmt.Fprintf(&b, ", and %d more", n-listed)
				return b.String()
			}
			if listed > 0 {
				b.WriteString(", ")
			}
			b.WriteString(l.sign + p)
			listed++
		}
	}
	return b.String()
}

// Diff reports how the tree at src differs from the tree at dst: what
// Replace(src, dst) adds, changes and removes. Regular files are compared
// by permission bits and content, symbolic links by target; other file
// types are ignored, as Copy ignores them. Links are never followed.
func Diff(src, dst string) (Changes, error) {
	var c Changes
	sr, dr, err := openRoots(src, dst)
	if err != nil {
		return c, err
	}
	defer sr.Close()
	defer dr.Close()
	err = fs.WalkDir(sr.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || name == "." {
			return err
		}
		si, err := d.Info()
		if err != nil {
			return err
		}
		di, err := dr.Lstat(name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if d.IsDir() {
				c.Added = append(c.Added, name+"/")
				return addAll(sr, name, &c.Added)
			}
			if si.Mode().IsRegular() || si.Mode().Type() == fs.ModeSymlink {
				c.Added = append(c.Added, name)
			}
			return nil
		case err != nil:
			return err
		case d.IsDir() && !di.IsDir():
			// A file or link became a directory: nothing under it in dst
			// is looked at (a link there may point anywhere).
			c.Modified = append(c.Modified, name)
			return addAll(sr, name, &c.Added)
		}
		changed, err := differs(sr, dr, name, si, di)
		if err != nil {
			return err
		}
		if changed {
			c.Modified = append(c.Modified, name)
		}
		return nil
	})
	if err != nil {
		return c, fmt.Errorf("compare trees: %w", err)
	}
	err = fs.WalkDir(dr.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || name == "." {
			return err
		}
		si, err := sr.Lstat(name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if d.IsDir() {
				c.Removed = append(c.Removed, name+"/")
				return fs.SkipDir
			}
			c.Removed = append(c.Removed, name)
		case err != nil:
			return err
		case d.IsDir() && !si.IsDir():
			// Reported as modified above; src has nothing under it.
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return c, fmt.Errorf("compare trees: %w", err)
	}
	return c, nil
}

// addAll appends the files under the new directory dir of sr.
func addAll(sr *os.Root, dir string, out *[]string) error {
	err := fs.WalkDir(sr.FS(), dir, func(name string, d fs.DirEntry, err error) error {
		if err != nil || name == dir {
			return err
		}
		switch {
		case d.IsDir():
			*out = append(*out, name+"/")
		case d.Type().IsRegular() || d.Type() == fs.ModeSymlink:
			*out = append(*out, name)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return fs.SkipDir
}

func differs(sr, dr *os.Root, name string, si, di fs.FileInfo) (bool, error) {
	st, dt := si.Mode().Type(), di.Mode().Type()
	if st != dt {
		return st == 0 || st == fs.ModeSymlink || st == fs.ModeDir, nil
	}
	switch st {
	case fs.ModeDir:
		return false, nil
	case fs.ModeSymlink:
		a, err := sr.Readlink(name)
		if err != nil {
			return false, err
		}
		b, err := dr.Readlink(name)
		return a != b, err
	case 0:
		if si.Size() != di.Size() || si.Mode().Perm() != di.Mode().Perm() {
			return true, nil
		}
		return contentDiffers(sr, dr, name, si.Size())
	}
	return false, nil
}

// contentDiffers compares the contents of two regular files of the same
// size, reading only where either has data: holes read as zeros, and two
// sparse files of 10 TiB with nothing in them compare at once.
func contentDiffers(sr, dr *os.Root, name string, size int64) (bool, error) {
	a, err := sr.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false, err
	}
	defer a.Close()
	b, err := dr.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false, err
	}
	defer b.Close()
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for pos := int64(0); pos < size; {
		da, err := dataAt(a, pos, size)
		if err != nil {
			return false, err
		}
		db, err := dataAt(b, pos, size)
		if err != nil {
			return false, err
		}
		end := min(da.end, db.end)
		if !da.data && !db.data {
			pos = end
			continue
		}
		for pos < end {
			n := int(min(int64(len(ba)), end-pos))
			na, ea := a.ReadAt(ba[:n], pos)
			nb, eb := b.ReadAt(bb[:n], pos)
			if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
				return true, nil
			}
			if na < n {
				// A file shorter than its size: it changed under us.
				return true, errors.Join(ea, eb)
			}
			pos += int64(n)
		}
	}
	return false, nil
}

// span says whether the bytes of a file from some offset up to end are
// data or a hole.
type span struct {
	data bool
	end  int64
}

// dataAt returns the span of f (size bytes long) that starts at pos.
func dataAt(f *os.File, pos, size int64) (span, error) {
	d, err := f.Seek(pos, unix.SEEK_DATA)
	switch {
	case errors.Is(err, unix.ENXIO):
		return span{end: size}, nil
	case errors.Is(err, unix.EINVAL):
		return span{data: true, end: size}, nil
	case err != nil:
		return span{}, err
	case d > pos:
		return span{end: min(d, size)}, nil
	}
	h, err := f.Seek(pos, unix.SEEK_HOLE)
	if err != nil {
		return span{}, err
	}
	return span{data: true, end: min(max(h, pos+1), size)}, nil
}

func openRoots(src, dst string) (sr, dr *os.Root, err error) {
	sr, err = os.OpenRoot(src)
	if err != nil {
		return nil, nil, fmt.Errorf("open source tree: %w", err)
	}
	dr, err = os.OpenRoot(dst)
	if err != nil {
		sr.Close()
		return nil, nil, fmt.Errorf("open destination tree: %w", err)
	}
	return sr, dr, nil
}
