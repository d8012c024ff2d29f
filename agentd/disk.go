package agentd

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/rodon-compute/rodon/internal/size"
)

// Threshold is a floor of free space or free inodes on a file system:
// either a fixed amount or a percentage of the file system's total.
type Threshold struct {
	// Amount is bytes (or inodes); Percent, if positive, replaces it.
	Amount  uint64
	Percent float64
}

// ParseThreshold reads "10%" or an amount such as "5g" or "100000".
func ParseThreshold(s string) (Threshold, error) {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || !(v >= 0 && v < 100) {
			return Threshold{}, fmt.Errorf("threshold %q: want a percentage from 0 to 99.9", s)
		}
		return Threshold{Percent: v}, nil
	}
	n, err := size.Parse(s)
	if err != nil {
		return Threshold{}, fmt.Errorf("threshold %q: want a percentage such as 10%% or an amount: %w", s, err)
	}
	return Threshold{Amount: uint64(n)}, nil
}

// Of returns the threshold for a file system of total bytes (or inodes).
func (t Threshold) Of(total uint64) uint64 {
	if t.Percent > 0 {
		return uint64(float64(total) * t.Percent / 100)
	}
	return t.Amount
}

func (t Threshold) String() string {
	if t.Percent > 0 {
		return strconv.FormatFloat(t.Percent, 'f', -1, 64) + "%"
	}
	return strconv.FormatUint(t.Amount, 10)
}

// Default floors of free space and inodes on the node's file systems (the
// data directory and the workspace store): below them the node reports
// itself degraded and refuses new workspaces. They follow the kubelet's
// eviction defaults (nodefs.available<10%, nodefs.inodesFree<5%).
var (
	DefaultMinFreeDisk   = Threshold{Percent: 10}
	DefaultMinFreeInodes = Threshold{Percent: 5}
)

// fsSpace is what statfs says of a file system.
type fsSpace struct {
	fsid                  [2]int32
	total, avail          uint64 // bytes
	inodes, inodesFree    uint64
	usedBytes, usedInodes uint64
}

func statSpace(path string) (fsSpace, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return fsSpace{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	bs := uint64(st.Bsize)
	return fsSpace{
		fsid:  st.Fsid.Val,
		total: st.Blocks * bs, avail: st.Bavail * bs,
		inodes: st.Files, inodesFree: st.Ffree,
		usedBytes: (st.Blocks - st.Bfree) * bs, usedInodes: st.Files - st.Ffree,
	}, nil
}

// fmtBytes writes n bytes for people (size.Format).
func fmtBytes(n int64) string { return size.Format(n) }

// ErrLowDisk is wrapped by Create and the read-back when the node's disk
// cannot take a step's workspace without falling below its threshold.
var ErrLowDisk = errors.New("not enough free disk on the node")

// diskReasons checks the file systems holding paths (each counted once)
// against the runtime's thresholds, and returns a reason for each one
// below them, fit for a degraded node's reasons.
func (r *Runtime) diskReasons(paths ...string) []string {
	var reasons []string
	seen := map[[2]int32]bool{}
	for _, p := range paths {
		sp, err := statSpace(p)
		if err != nil {
			reasons = append(reasons, "disk: "+err.Error())
			continue
		}
		if seen[sp.fsid] {
			continue
		}
		seen[sp.fsid] = true
		// The reasons name the threshold, not the free amount, so that
		// they stay the same while the node stays below it.
		if min := r.cfg.MinFreeDisk.Of(sp.total); sp.avail < min {
			reasons = append(reasons, fmt.Sprintf("disk: less than %s free on the file system of %s (--min-free-disk %s)",
				fmtBytes(int64(min)), p, r.cfg.MinFreeDisk))
		}
		if min := r.cfg.MinFreeInodes.Of(sp.inodes); sp.inodes > 0 && sp.inodesFree < min {
			reasons = append(reasons, fmt.Sprintf("disk: less than %d inodes free on the file system of %s (--min-free-inodes %s)",
				min, p, r.cfg.MinFreeInodes))
		}
	}
	return reasons
}

// DiskReasons is diskReasons for the runtime's data directory and paths.
func (r *Runtime) DiskReasons(paths ...string) []string {
	return r.diskReasons(append([]string{r.cfg.DataDir}, paths...)...)
}

// admitLocked checks that the data directory's file system can take a
// workspace filesystem of quota bytes: what every mounted workspace may
// still grow by, and the new one, must leave the threshold free. The
// caller holds r.mu, and records the new image in r.images before it
// releases it.
func (r *Runtime) admitLocked(quota int64) error {
	sp, err := statSpace(workspacesDir(r.cfg))
	if err != nil {
		return err
	}
	var growth uint64
	for img, q := range r.images {
		growth += uint64(max(q-allocatedBytes(img), 0))
	}
	need := growth + uint64(quota) + r.cfg.MinFreeDisk.Of(sp.total)
	if sp.avail < need {
		return fmt.Errorf("%w: %s free for workspaces in %s; this step's workspace limit of %s, the %s the running steps' workspaces may still grow by, and the threshold of %s (--min-free-disk %s) need %s",
			ErrLowDisk, fmtBytes(int64(sp.avail)), r.cfg.DataDir, fmtBytes(quota), fmtBytes(int64(growth)),
			fmtBytes(int64(r.cfg.MinFreeDisk.Of(sp.total))), r.cfg.MinFreeDisk, fmtBytes(int64(need)))
	}
	if min := r.cfg.MinFreeInodes.Of(sp.inodes); sp.inodes > 0 && sp.inodesFree < min {
		return fmt.Errorf("%w: %d inodes free in %s, below the threshold of %d (--min-free-inodes %s)",
			ErrLowDisk, sp.inodesFree, r.cfg.DataDir, min, r.cfg.MinFreeInodes)
	}
	return nil
}

// allocatedBytes returns the bytes a file occupies on disk (0 if it is
// gone).
func allocatedBytes(path string) int64 {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0
	}
	return st.Blocks * 512
}

// checkReadBack refuses to copy the workspace filesystem mounted at from
// into the file system of to when what it holds would leave less than the
// thresholds free there.
func (r *Runtime) checkReadBack(from, to string) error {
	src, err := statSpace(from)
	if err != nil {
		return err
	}
	dst, err := statSpace(to)
	if err != nil {
		return err
	}
	if need := src.usedBytes + r.cfg.MinFreeDisk.Of(dst.total); dst.avail < need {
		return fmt.Errorf("%w: the step's workspace holds %s and %s is free where it is kept (%s), less than that and the threshold of %s (--min-free-disk %s)",
			ErrLowDisk, fmtBytes(int64(src.usedBytes)), fmtBytes(int64(dst.avail)), to, fmtBytes(int64(r.cfg.MinFreeDisk.Of(dst.total))), r.cfg.MinFreeDisk)
	}
	if need := src.usedInodes + r.cfg.MinFreeInodes.Of(dst.inodes); dst.inodes > 0 && dst.inodesFree < need {
		return fmt.Errorf("%w: the step's workspace holds %d files and %d inodes are free where it is kept (%s), less than that and the threshold of %d (--min-free-inodes %s)",
			ErrLowDisk, src.usedInodes, dst.inodesFree, to, r.cfg.MinFreeInodes.Of(dst.inodes), r.cfg.MinFreeInodes)
	}
	return nil
}
