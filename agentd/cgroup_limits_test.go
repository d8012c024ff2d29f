package agentd

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rodon-compute/rodon/oci"
)

// TestApplyLimits writes limits into a fake cgroup v1 tree and reads them
// back; a file that does not keep its value is an error naming it.
func TestApplyLimits(t *testing.T) {
	root := t.TempDir()
	old := cgroupRoot
	cgroupRoot = root
	t.Cleanup(func() { cgroupRoot = old })
	cg := "/rodon/sb-1"
	for _, d := range []string{"memory", "cpu", "pids"} {
		if err := os.MkdirAll(filepath.Join(root, d, cg), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "memory", cg, "memory.limit_in_bytes"), []byte("9223372036854771712\n"), 0o644)
	l := oci.Limits{CPU: 0.5, MemoryBytes: 96 << 20, Pids: 64}
	if err := applyLimits(cg, l); err != nil {
		t.Fatalf("applyLimits(%+v) = %v", l, err)
	}
	for file, want := range map[string]string{
		"memory/rodon/sb-1/memory.limit_in_bytes": "100663296",
		"cpu/rodon/sb-1/cpu.cfs_quota_us":         "50000",
		"cpu/rodon/sb-1/cpu.cfs_period_us":        "100000",
		"pids/rodon/sb-1/pids.max":                "512",
	} {
		if b, _ := os.ReadFile(filepath.Join(root, file)); string(b) != want {
			t.Errorf("%s = %q, want %q", file, b, want)
		}
	}
	if r := readBackLimits(cg, oci.Limits{CPU: 1, MemoryBytes: 96 << 20, Pids: 64}); len(r) != 1 {
		t.Errorf("readBackLimits(other cpu) = %q, want one reason", r)
	}
	// No memory or CPU limit: -1 on v1.
	if err := applyLimits(cg, oci.Limits{Pids: 64}); err == nil {
		t.Errorf("applyLimits(unlimited) on plain files = nil, want the read-back of -1 as memory to fail (a real cgroup reads a page-rounded LONG_MAX)")
	}
}
