// Package treecopy copies directory trees between the host and a sandbox's
// workspace without ever following a symbolic link: links are copied as
// links, and every write goes through an os.Root so that a link planted in
// the destination cannot redirect it outside.
package treecopy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Copy copies the tree at src into the existing directory dst, replacing
// files of the same name. Regular files, directories and symbolic links are
// copied with their permission bits; other file types are skipped.
func Copy(src, dst string) error {
	sr, dr, err := openRoots(src, dst)
	if err != nil {
		return err
	}
	defer sr.Close()
	defer dr.Close()
	return fs.WalkDir(sr.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if name == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return copyOne(sr, dr, name, info)
	})
}

func copyOne(sr, dr *os.Root, name string, info fs.FileInfo) error {
	mode := info.Mode()
	if cur, err := dr.Lstat(name); err == nil && (cur.Mode().Type() != mode.Type() || mode.Type() == fs.ModeSymlink) {
		if err := dr.RemoveAll(name); err != nil {
			return fmt.Errorf("replace %s: %w", name, err)
		}
	}
	switch mode.Type() {
	case fs.ModeDir:
		if err := dr.Mkdir(name, mode.Perm()); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("copy %s: %w", name, err)
		}
		return dr.Chmod(name, mode.Perm())
	case fs.ModeSymlink:
		target, err := sr.Readlink(name)
		if err != nil {
			return fmt.Errorf("copy %s: %w", name, err)
		}
		return dr.Symlink(target, name)
	case 0:
		in, err := sr.Open(name)
		if err != nil {
			return fmt.Errorf("copy %s: %w", name, err)
		}
		defer in.Close()
		out, err := dr.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode.Perm())
		if err != nil {
			return fmt.Errorf("copy %s: %w", name, err)
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return fmt.Errorf("copy %s: %w", name, err)
		}
		if err := out.Close(); err != nil {
			return fmt.Errorf("copy %s: %w", name, err)
		}
		return dr.Chmod(name, mode.Perm())
	}
	return nil // devices, sockets and pipes are not workspace content
}

// Mirror makes dst equal to src: Copy, then remove what dst has and src
// does not.
func Mirror(src, dst string) error {
	if err := Copy(src, dst); err != nil {
		return err
	}
	sr, dr, err := openRoots(src, dst)
	if err != nil {
		return err
	}
	defer sr.Close()
	defer dr.Close()
	var extra []string
	err = fs.WalkDir(dr.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || name == "." {
			return err
		}
		if _, err := sr.Lstat(name); errors.Is(err, fs.ErrNotExist) {
			extra = append(extra, name)
			if d.IsDir() {
				return fs.SkipDir
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("compare trees: %w", err)
	}
	for _, name := range extra {
		if err := dr.RemoveAll(filepath.FromSlash(name)); err != nil {
			return fmt.Errorf("remove %s: %w", name, err)
		}
	}
	return nil
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
