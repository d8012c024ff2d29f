package agentd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// The workspace quota. Every sandbox's /workspace is its own ext4
// filesystem: a sparse image file of exactly the step's workspace size in
// the agent's data directory, attached to a loop device and mounted on the
// host at the sandbox's workspace directory, which runsc's gofer
// bind-mounts into the sandbox. A write past the size fails inside the
// sandbox with ENOSPC, as on any full disk; the host's disk grows by what
// the image holds, at most the size; a file the step makes sparse stays
// sparse. The image is a scratch disk: no journal, no reserved blocks, and
// it is deleted with the sandbox.
//
// Why this and not another mechanism (measured on these machines, see
// docs/BENCHMARKS.md, "Workspace quota"): the kernel has no ext4 quota
// (CONFIG_QFMT_V2 is off) and no XFS quota, so project quotas are out, and
// they would fail writes with EDQUOT, not ENOSPC; a tmpfs per sandbox
// would hold the workspace in the node's memory; gVisor's overlay size
// (--overlay2 ...,size=) keeps the writes in gVisor's own filestore, where
// the host cannot read them back. RLIMIT_FSIZE bounds one file, not a tree.

// mkfsExt4 is the formatter of workspace images (e2fsprogs).
var mkfsExt4 = "mkfs.ext4"

// imagePath is where the image of the workspace mounted at dir lives.
func imagePath(dir string) string { return dir + ".img" }

// mountWorkspace makes an ext4 image of size bytes for the workspace
// directory dir (which must exist and be empty) and mounts it there. On
// error nothing is left but dir itself.
func mountWorkspace(ctx context.Context, dir string, size int64) (retErr error) {
	img := imagePath(dir)
	f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create workspace image: %w", err)
	}
	defer func() {
		f.Close()
		if retErr != nil {
			os.Remove(img)
		}
	}()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("size workspace image: %w", err)
	}
	// 4 KiB blocks, the loop device's sector size (direct I/O on the
	// host's file system); -m 0: no blocks reserved for root (the step is
	// root); no journal
	// (a scratch disk deleted with the sandbox); nodiscard: the file is
	// sparse already. lazy_itable_init with noinit_itable at mount leaves
	// the inode tables unwritten: they read as zeros from the sparse file.
	cmd := exec.CommandContext(ctx, mkfsExt4, "-q", "-F", "-b", "4096", "-m", "0", "-O", "^has_journal",
		"-E", "nodiscard,lazy_itable_init=1", "-L", "rodon-ws", img)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("format workspace image with %s: %w: %s", mkfsExt4, err, strings.TrimSpace(out.String()))
	}
	dev, loop, err := attachLoop(f)
	if err != nil {
		return err
	}
	// The mount holds the loop device from here; autoclear detaches it
	// when the mount goes.
	defer loop.Close()
	if err := unix.Mount(dev, dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, "noinit_itable,errors=remount-ro"); err != nil {
		return fmt.Errorf("mount workspace image on %s: %w", dev, err)
	}
	if err := os.Remove(filepath.Join(dir, "lost+found")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		unmountWorkspace(dir)
		return fmt.Errorf("prepare workspace filesystem: %w", err)
	}
	return nil
}

// remountReadOnly makes the workspace filesystem mounted at dir
// read-only on the host: nothing, the gofer included, writes to it any
// more (EROFS).
func remountReadOnly(dir string) error {
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, ""); err != nil {
		return fmt.Errorf("remount workspace filesystem read-only: %w", err)
	}
	return nil
}

// attachLoop attaches a free loop device to f, with autoclear (the device
// detaches itself when its last user, the mount, goes) and direct I/O
// where the kernel allows it (no second copy of the data in the page
// cache). It returns the device's path and an open file of it, which keeps
// the device attached until the caller has mounted it.
func attachLoop(f *os.File) (string, *os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return "", nil, fmt.Errorf("workspace quota needs loop devices: %w", err)
	}
	defer ctl.Close()
	for range 16 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", nil, fmt.Errorf("find a free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		lf, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return "", nil, fmt.Errorf("open %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(f.Fd()), Size: 4096}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO
		err = unix.IoctlLoopConfigure(int(lf.Fd()), &cfg)
		if errors.Is(err, unix.EINVAL) {
			// No direct I/O on this file system: buffered then.
			cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
			err = unix.IoctlLoopConfigure(int(lf.Fd()), &cfg)
		}
		if err == nil {
			return dev, lf, nil
		}
		lf.Close()
		if !errors.Is(err, unix.EBUSY) {
			return "", nil, fmt.Errorf("attach workspace image to %s: %w", dev, err)
		}
		// Another process took the device between GET_FREE and here.
	}
	return "", nil, errors.New("attach workspace image: every free loop device was taken first")
}

// unmountWorkspace unmounts the workspace filesystem at dir, if one is
// mounted there, and removes its image. A mount still busy after a few
// tries is detached lazily: the kernel frees it once its last user goes.
func unmountWorkspace(dir string) error {
	var err error
	for i := 0; i < 20; i++ {
		err = unix.Unmount(dir, 0)
		if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			// EINVAL: not a mount point (never mounted, or unmounted
			// already).
			err = nil
			break
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(dir, unix.MNT_DETACH)
	}
	if err != nil {
		return fmt.Errorf("unmount workspace filesystem %s: %w", dir, err)
	}
	if err := os.Remove(imagePath(dir)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove workspace image: %w", err)
	}
	return nil
}

// SweepWorkspaces unmounts and removes the workspace filesystems in the
// data directory whose sandbox containerd no longer has (an agent killed
// while it destroyed the sandbox), and returns their ids. A sandbox being
// created has its container before its filesystem, so none of its is
// taken.
func (r *Runtime) SweepWorkspaces(ctx context.Context) ([]string, error) {
	imgs, err := filepath.Glob(filepath.Join(workspacesDir(r.cfg), "*.img"))
	if err != nil {
		return nil, err
	}
	mounted, err := mountedUnder(workspacesDir(r.cfg))
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for _, img := range imgs {
		ids[strings.TrimSuffix(filepath.Base(img), ".img")] = true
	}
	for _, m := range mounted {
		ids[filepath.Base(m)] = true
	}
	ctx = r.nsCtx(ctx)
	var removed []string
	var errs []error
	for id := range ids {
		if _, err := r.client.LoadContainer(ctx, id); err == nil || !errdefs.IsNotFound(err) {
			continue // its sandbox exists (or containerd did not say)
		}
		dir := filepath.Join(workspacesDir(r.cfg), id)
		if err := unmountWorkspace(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("remove workspace copy: %w", err))
			continue
		}
		removed = append(removed, id)
	}
	return removed, errors.Join(errs...)
}

// mountedUnder lists the mount points directly in dir.
func mountedUnder(dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		// Mount points with spaces are escaped (\040); ours have none.
		if len(f) > 4 && filepath.Dir(f[4]) == dir {
			out = append(out, f[4])
		}
	}
	return out, nil
}
