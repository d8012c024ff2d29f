package agentd

import (
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/cluster"
)

// diskRuntime is a Runtime with no containerd behind it, enough for the
// disk checks.
func diskRuntime(t *testing.T, minDisk, minInodes Threshold) *Runtime {
	cfg := DefaultRuntimeConfig()
	cfg.DataDir = t.TempDir()
	cfg.MinFreeDisk, cfg.MinFreeInodes = minDisk, minInodes
	os.MkdirAll(workspacesDir(cfg), 0o700)
	return &Runtime{cfg: cfg, logger: slog.New(slog.NewTextHandler(io.Discard, nil)), images: map[string]int64{}, wsLocks: map[string]*wsLock{}}
}

// TestDiskThresholds: a node whose file systems are below the free space
// or inode threshold says so in its health, names the flag, and refuses a
// new workspace; at the defaults this machine's disk is fine.
func TestDiskThresholds(t *testing.T) {
	sp, err := statSpace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if r := diskRuntime(t, DefaultMinFreeDisk, DefaultMinFreeInodes); float64(sp.avail) > 0.2*float64(sp.total) {
		if got := r.DiskReasons(); len(got) != 0 {
			t.Errorf("DiskReasons() at the defaults = %q, want none (%s of %s free)", got, fmtBytes(int64(sp.avail)), fmtBytes(int64(sp.total)))
		}
		if err := r.admitLocked(cluster.DefaultLimits.WorkspaceBytes); err != nil {
			t.Errorf("admit(the default workspace) = %v, want nil", err)
		}
	}
	full := Threshold{Percent: 99.9}
	r := diskRuntime(t, full, full)
	got := r.DiskReasons(t.TempDir())
	if len(got) != 2 || !strings.Contains(got[0], "--min-free-disk 99.9%") || !strings.Contains(got[1], "--min-free-inodes 99.9%") {
		t.Errorf("DiskReasons() below both thresholds = %q, want one reason each, naming the flag (the same file system counted once)", got)
	}
	if err := r.admitLocked(1 << 20); !errors.Is(err, ErrLowDisk) {
		t.Errorf("admit() below the threshold = %v, want ErrLowDisk", err)
	}

	// A new workspace counts what the mounted ones may still grow by.
	r = diskRuntime(t, Threshold{}, Threshold{})
	r.images["/nonexistent.img"] = int64(sp.avail)
	if err := r.admitLocked(1 << 20); !errors.Is(err, ErrLowDisk) {
		t.Errorf("admit() with the disk promised to a running step = %v, want ErrLowDisk", err)
	}
}

// TestAgentHealthFollowsDisk: the agent's health turns degraded with the
// disk's reason while a file system is below its threshold.
func TestAgentHealthFollowsDisk(t *testing.T) {
	full := Threshold{Percent: 99.9}
	rt := diskRuntime(t, full, Threshold{})
	lcfg := logstore.DefaultConfig()
	lcfg.Dir = t.TempDir()
	logs, err := logstore.New(lcfg, rt.logger)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultAgentConfig()
	cfg.Node, cfg.Address = "n1", netip.MustParseAddrPort("127.0.0.1:1")
	a, err := NewAgent(cfg, rt, nil, logs, rt.logger)
	if err != nil {
		t.Fatal(err)
	}
	a.probed = cluster.Health{State: cluster.NodeReady}
	a.checkHealth()
	if a.health.State != cluster.NodeDegraded || len(a.health.Reasons) == 0 || !strings.Contains(a.health.Reasons[0], "--min-free-disk") {
		t.Errorf("health below the disk threshold = %+v, want degraded naming --min-free-disk", a.health)
	}
	rt.cfg.MinFreeDisk = Threshold{}
	a.checkHealth()
	if a.health.State != cluster.NodeReady {
		t.Errorf("health back above the threshold = %+v, want ready", a.health)
	}
}
