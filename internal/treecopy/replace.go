package treecopy

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// stagingInfix marks the directories Replace stages trees in, beside the
// destination: ".NAME.staging-RANDOM". SweepStaging removes those a crash
// left.
const stagingInfix = ".staging-"

// Replace makes the directory dst the tree at src, atomically: it copies
// src (within lim) into a new staging directory beside dst, reports how it
// differs from dst, and swaps the two in one rename (RENAME_EXCHANGE) before
// it removes the old tree. On any error before the swap dst is untouched
// and the staging directory removed; dst is never half-copied. If dst does
// not exist it is created. src must not change while Replace runs (the
// caller quiesces it); dst's own mode is kept.
func Replace(src, dst string, lim Limits) (Changes, error) {
	parent, base := filepath.Dir(dst), filepath.Base(dst)
	var b [6]byte
	rand.Read(b[:])
	staging := filepath.Join(parent, "."+base+stagingInfix+hex.EncodeToString(b[:]))
	fi, err := os.Lstat(dst)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// An empty tree is what there was.
		if err := os.Mkdir(dst, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return Changes{}, fmt.Errorf("replace %s: %w", dst, err)
		}
		fi, err = os.Lstat(dst)
	}
	switch {
	case err != nil:
		return Changes{}, fmt.Errorf("replace %s: %w", dst, err)
	case !fi.IsDir():
		return Changes{}, fmt.Errorf("replace %s: not a directory", dst)
	}
	if err := os.Mkdir(staging, 0o700); err != nil {
		return Changes{}, fmt.Errorf("create staging directory: %w", err)
	}
	swapped := false
	defer func() {
		if !swapped {
			os.RemoveAll(staging)
		}
	}()
	if err := Copy(src, staging, lim); err != nil {
		return Changes{}, err
	}
	if err := os.Chmod(staging, fi.Mode().Perm()); err != nil {
		return Changes{}, fmt.Errorf("create staging directory: %w", err)
	}
	changes, err := Diff(staging, dst)
	if err != nil {
		return Changes{}, err
	}
	if err := exchange(staging, dst); err != nil {
		return Changes{}, fmt.Errorf("swap in the new tree of %s: %w", dst, err)
	}
	swapped = true
	// staging now holds the old tree (or nothing).
	if err := os.RemoveAll(staging); err != nil {
		return changes, fmt.Errorf("remove the old tree of %s: %w", dst, err)
	}
	return changes, nil
}

// exchange swaps the directories a and b in one rename.
func exchange(a, b string) error {
	return unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
}

// SweepStaging removes the staging directories that a Replace interrupted
// by a crash left in dir, and returns their names.
func SweepStaging(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), ".") || !strings.Contains(e.Name(), stagingInfix) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, errors.Join(errs...)
}
