package agentd

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/internal/testenv"
)

// requireLoop skips (fails under CI) where loop devices cannot be used.
func requireLoop(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		testenv.Missing(t, "loop devices (/dev/loop-control): "+err.Error())
	}
}

// loopsOf lists the loop devices whose backing file is under dir.
func loopsOf(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	ents, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, e := range ents {
		b, err := os.ReadFile(e)
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), dir) {
			out = append(out, e)
		}
	}
	return out
}

// TestWorkspaceQuota mounts a 4 MiB workspace filesystem on the host and
// checks what a step would see: writes past the size fail with ENOSPC, a
// 10 TiB sparse file costs nothing, and unmounting leaves no image, mount
// or loop device behind.
func TestWorkspaceQuota(t *testing.T) {
	requireLoop(t)
	root := t.TempDir()
	dir := filepath.Join(root, "ws")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const size = 4 << 20
	start := time.Now()
	if err := mountWorkspace(t.Context(), dir, size); err != nil {
		t.Fatalf("mountWorkspace() = %v", err)
	}
	t.Logf("set-up of a %d-byte workspace filesystem: %v", size, time.Since(start))
	unmounted := false
	t.Cleanup(func() {
		if !unmounted {
			unmountWorkspace(dir)
		}
	})
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("fresh workspace filesystem holds %d entries, want none (lost+found removed)", len(ents))
	}

	f, err := os.Create(filepath.Join(dir, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	var written int64
	for written < 2*size {
		n, err := f.Write(buf)
		written += int64(n)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("write past the quota = %v, want ENOSPC", err)
			}
			break
		}
	}
	f.Close()
	if written >= size {
		t.Errorf("wrote %d bytes into a %d-byte workspace", written, size)
	}
	if err := os.WriteFile(filepath.Join(dir, "sparse"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, "sparse"), 10<<40); err != nil {
		t.Errorf("truncate -s 10T = %v, want a sparse file", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(imagePath(dir), &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 > size {
		t.Errorf("image uses %d bytes of the host's disk, want at most %d", st.Blocks*512, size)
	}

	if err := unmountWorkspace(dir); err != nil {
		t.Fatalf("unmountWorkspace() = %v", err)
	}
	unmounted = true
	if _, err := os.Stat(imagePath(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("image left after unmount (stat: %v)", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("workspace dir still shows the filesystem's files after unmount")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(loopsOf(t, root)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if l := loopsOf(t, root); len(l) > 0 {
		t.Errorf("loop devices left attached: %v", l)
	}
	if err := unmountWorkspace(dir); err != nil {
		t.Errorf("second unmountWorkspace() = %v, want nil", err)
	}
}

// BenchmarkWorkspaceFS measures making and removing a workspace
// filesystem (image, mkfs, loop device, mount; unmount, remove) at the
// smallest, the default and the largest workspace size.
func BenchmarkWorkspaceFS(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root and loop devices")
	}
	for _, size := range []int64{1 << 20, 1 << 30, 64 << 30} {
		b.Run(fmtBytes(size), func(b *testing.B) {
			root := b.TempDir()
			var usable int64
			for i := range b.N {
				dir := filepath.Join(root, strconv.Itoa(i))
				if err := os.Mkdir(dir, 0o755); err != nil {
					b.Fatal(err)
				}
				if err := mountWorkspace(b.Context(), dir, size); err != nil {
					b.Fatal(err)
				}
				sp, _ := statSpace(dir)
				usable = int64(sp.avail)
				meta := allocatedBytes(imagePath(dir))
				if err := unmountWorkspace(dir); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(meta), "image-bytes")
			}
			b.ReportMetric(100*float64(usable)/float64(size), "usable-%")
		})
	}
}

// TestSweepWorkspaces: a workspace filesystem whose sandbox containerd no
// longer has (its agent was killed while destroying it) is unmounted and
// removed by the sweep; that of a sandbox that exists is left alone.
func TestSweepWorkspaces(t *testing.T) {
	rt := newTestRuntime(t)
	leak := filepath.Join(workspacesDir(rt.cfg), "leak-1")
	if err := os.Mkdir(leak, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := mountWorkspace(t.Context(), leak, 1<<20); err != nil {
		t.Fatal(err)
	}
	sb, err := rt.Create(t.Context(), newStep(t, "true"))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	removed, err := rt.SweepWorkspaces(t.Context())
	if err != nil || len(removed) != 1 || removed[0] != "leak-1" {
		t.Errorf("SweepWorkspaces() = %v, %v; want [leak-1]", removed, err)
	}
	if _, err := os.Stat(leak); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leaked workspace still there (stat: %v)", err)
	}
	if m, _ := mountedUnder(workspacesDir(rt.cfg)); len(m) != 1 || filepath.Base(m[0]) != sb.ID() {
		t.Errorf("mounted after the sweep: %v, want only the live sandbox %s", m, sb.ID())
	}
}
