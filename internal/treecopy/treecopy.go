// Package treecopy copies directory trees between the host and a sandbox's
// workspace without ever following a symbolic link, and without ever
// writing more than a limit: links are copied as links, holes of sparse
// files stay holes (SEEK_DATA/SEEK_HOLE), hard links stay links, and every
// open is relative to a directory the copy opened itself, with O_NOFOLLOW,
// so that a link planted in either tree cannot redirect it outside.
//
// Copy fills an empty directory. Replace is the read-back of a sandbox's
// workspace: it copies the tree into a staging directory beside the
// destination and swaps the two atomically (renameat2 RENAME_EXCHANGE), so
// the destination is either the whole new tree or, on any error, left as it
// was; never half.
package treecopy

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"

	"golang.org/x/sys/unix"
)

// Limits bound what a copy may write.
type Limits struct {
	// MaxBytes caps the data written: the data regions of regular files
	// (holes are not data; a file hard-linked several times counts once)
	// plus the targets of symbolic links. Zero means no cap.
	MaxBytes int64
	// Perm, if set, gives the permission bits of the copy of each
	// regular file (by its slash-separated path in the tree) in place of
	// the source's, and keeps no hard link: each path becomes a file of
	// its own. It is for a source whose files are links into a cache of
	// read-only blobs (a workspace revision materialised by the agent),
	// whose modes and links are the cache's, not the tree's.
	Perm func(rel string) uint32
}

// ErrTooLarge is returned when a tree holds more data than Limits.MaxBytes.
var ErrTooLarge = errors.New("tree exceeds its size limit")

// maxDepth bounds the nesting of directories a copy descends into (each
// level holds one open directory).
const maxDepth = 256

// Copy copies the tree at src into the existing, empty directory dst.
// Regular files, directories and symbolic links are copied with their
// permission bits; other file types (devices, sockets, pipes) are not
// workspace content and are skipped. It returns ErrTooLarge (wrapped) when
// src holds more than lim allows, having written at most the limit.
func Copy(src, dst string, lim Limits) error {
	sd, err := openDir(unix.AT_FDCWD, src)
	if err != nil {
		return fmt.Errorf("open source tree: %w", err)
	}
	defer unix.Close(sd)
	dd, err := openDir(unix.AT_FDCWD, dst)
	if err != nil {
		return fmt.Errorf("open destination tree: %w", err)
	}
	defer unix.Close(dd)
	c := &copier{lim: lim, dstRoot: dd, links: map[fileID]string{}}
	return c.copyDir(sd, dd, "", 0)
}

type fileID struct{ dev, ino uint64 }

type copier struct {
	lim     Limits
	written int64
	dstRoot int
	// links maps a source file with several links to the destination path
	// of its first copy.
	links map[fileID]string
	buf   []byte
}

// charge counts n more bytes of data against the limit.
func (c *copier) charge(n int64) error {
	c.written += n
	if c.lim.MaxBytes > 0 && c.written > c.lim.MaxBytes {
		return fmt.Errorf("%w: more than %d bytes of data", ErrTooLarge, c.lim.MaxBytes)
	}
	return nil
}

// copyDir copies the entries of the open source directory sd into the
// open destination directory dd; rel is their path for errors.
func (c *copier) copyDir(sd, dd int, rel string, depth int) error {
	if depth >= maxDepth {
		return fmt.Errorf("copy %s: directories nested deeper than %d levels", rel, maxDepth)
	}
	names, err := readNames(sd)
	if err != nil {
		return fmt.Errorf("read directory %s: %w", orDot(rel), err)
	}
	for _, name := range names {
		if err := c.copyEntry(sd, dd, name, path.Join(rel, name), depth); err != nil {
			return err
		}
	}
	return nil
}

func (c *copier) copyEntry(sd, dd int, name, rel string, depth int) error {
	var st unix.Stat_t
	if err := unix.Fstatat(sd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // gone since the directory was read
		}
		return fmt.Errorf("copy %s: %w", rel, err)
	}
	perm := st.Mode & 0o777
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		child, err := openDir(sd, name)
		if err != nil {
			return fmt.Errorf("copy %s: %w", rel, err)
		}
		defer unix.Close(child)
		if err := unix.Mkdirat(dd, name, 0o700); err != nil {
			return fmt.Errorf("copy %s: %w", rel, err)
		}
		out, err := openDir(dd, name)
		if err != nil {
			return fmt.Errorf("copy %s: %w", rel, err)
		}
		defer unix.Close(out)
		if err := c.copyDir(child, out, rel, depth+1); err != nil {
			return err
		}
		if err := unix.Fchmod(out, perm); err != nil {
			return fmt.Errorf("copy %s: %w", rel, err)
		}
		return nil
	case unix.S_IFLNK:
		target, err := readlinkat(sd, name)
		if err != nil {
			return fmt.Errorf("copy %s: %w", rel, err)
		}
		if err := c.charge(int64(len(target))); err != nil {
			return err
		}
		if err := unix.Symlinkat(target, dd, name); err != nil {
			return fmt.Errorf("copy %s: %w", rel, err)
		}
		return nil
	case unix.S_IFREG:
		return c.copyFile(sd, dd, name, rel)
	}
	return nil // devices, sockets and pipes are not workspace content
}

// copyFile copies one regular file. It is opened O_NOFOLLOW|O_NONBLOCK
// (a link or a pipe swapped in since the directory was read neither
// redirects nor blocks the copy) and checked to be a regular file after
// opening.
func (c *copier) copyFile(sd, dd int, name, rel string) error {
	fd, err := unix.Openat(sd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENXIO) || errors.Is(err, unix.ENOENT) {
			return nil // no longer a regular file, or gone
		}
		return fmt.Errorf("copy %s: %w", rel, err)
	}
	in := os.NewFile(uintptr(fd), rel)
	defer in.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("copy %s: %w", rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	id := fileID{dev: st.Dev, ino: st.Ino}
	perm := st.Mode & 0o777
	if c.lim.Perm != nil {
		perm, st.Nlink = c.lim.Perm(rel)&0o777, 1
	}
	if st.Nlink > 1 {
		if first, ok := c.links[id]; ok {
			if err := unix.Linkat(c.dstRoot, first, dd, name, 0); err != nil {
				return fmt.Errorf("copy %s (a link of %s): %w", rel, first, err)
			}
			return nil
		}
	}
	ofd, err := unix.Openat(dd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("copy %s: %w", rel, err)
	}
	out := os.NewFile(uintptr(ofd), rel)
	if err := c.copyData(in, out, st.Size); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", rel, err)
	}
	if err := unix.Fchmod(ofd, perm); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", rel, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("copy %s: %w", rel, err)
	}
	if st.Nlink > 1 {
		c.links[id] = rel
	}
	return nil
}

// copyData copies the data regions of in (size bytes long) to the same
// offsets of the empty file out, and gives out the same size: holes stay
// holes, and blocks of zeros inside data regions become holes too. Every
// byte of a data region counts against the limit, before it is written.
func (c *copier) copyData(in, out *os.File, size int64) error {
	if c.buf == nil {
		c.buf = make([]byte, 1<<20)
	}
	for off := int64(0); off < size; {
		start, end, ok, err := nextData(in, off, size)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if err := c.charge(end - start); err != nil {
			return err
		}
		for pos := start; pos < end; {
			n, err := in.ReadAt(c.buf[:min(int64(len(c.buf)), end-pos)], pos)
			if n > 0 {
				if err := writeNonZero(out, c.buf[:n], pos); err != nil {
					return err
				}
				pos += int64(n)
			}
			if err == io.EOF {
				// The file shrank while it was copied: what was read is
				// what there is.
				end = pos
				break
			}
			if err != nil {
				return err
			}
		}
		off = end
	}
	return out.Truncate(size)
}

// zeroBlock is the granularity at which runs of zeros are left as holes.
const zeroBlock = 4096

// writeNonZero writes p at off, skipping the zeroBlock-sized blocks (at
// zeroBlock-aligned offsets) that are all zeros.
func writeNonZero(out *os.File, p []byte, off int64) error {
	for len(p) > 0 {
		n := zeroBlock - int(off%zeroBlock)
		n = min(n, len(p))
		if !allZero(p[:n]) {
			// Extend to the following non-zero blocks in one write.
			m := n
			for m < len(p) {
				k := min(zeroBlock, len(p)-m)
				if allZero(p[m : m+k]) {
					break
				}
				m += k
			}
			n = m
			if _, err := out.WriteAt(p[:n], off); err != nil {
				return err
			}
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

func allZero(p []byte) bool {
	for _, b := range p {
		if b != 0 {
			return false
		}
	}
	return true
}

// nextData returns the first data region of f at or after off: [start,
// end), with ok false when there is none before size. A file system
// without SEEK_DATA is all data.
func nextData(f *os.File, off, size int64) (start, end int64, ok bool, err error) {
	start, err = f.Seek(off, unix.SEEK_DATA)
	switch {
	case errors.Is(err, unix.ENXIO):
		return 0, 0, false, nil
	case errors.Is(err, unix.EINVAL):
		return off, size, true, nil
	case err != nil:
		return 0, 0, false, fmt.Errorf("seek data: %w", err)
	}
	if start >= size {
		return 0, 0, false, nil
	}
	end, err = f.Seek(start, unix.SEEK_HOLE)
	if err != nil {
		return 0, 0, false, fmt.Errorf("seek hole: %w", err)
	}
	return start, min(end, size), true, nil
}

// openDir opens the directory name relative to dirfd without following a
// link.
func openDir(dirfd int, name string) (int, error) {
	return unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// readNames returns the names in the open directory fd, sorted; fd stays
// open.
func readNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

func readlinkat(dirfd int, name string) (string, error) {
	for n := 256; ; n *= 2 {
		b := make([]byte, n)
		k, err := unix.Readlinkat(dirfd, name, b)
		if err != nil {
			return "", err
		}
		if k < n {
			return string(b[:k]), nil
		}
	}
}

func orDot(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}
