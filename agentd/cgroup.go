package agentd

import (
	"bufio"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// cgroupRoot is where cgroup hierarchies are mounted.
var cgroupRoot = "/sys/fs/cgroup"

// cgroupPath returns the sandbox's cgroup path (the same on every controller).
func (s *Sandbox) cgroupPath() string {
	return path.Join(s.rt.cfg.CgroupParent, s.ID())
}

// oomKilled reports whether the kernel's OOM killer acted in the sandbox's
// memory cgroup (cgroup v1 memory.oom_control, or v2 memory.events).
func (s *Sandbox) oomKilled() bool {
	cg := s.cgroupPath()
	for _, f := range []struct{ file, key string }{
		{filepath.Join(cgroupRoot, "memory", cg, "memory.oom_control"), "oom_kill"},
		{filepath.Join(cgroupRoot, cg, "memory.events"), "oom_kill"},
		{filepath.Join(cgroupRoot, "unified", cg, "memory.events"), "oom_kill"},
	} {
		if n, ok := readKeyed(f.file, f.key); ok && n > 0 {
			return true
		}
	}
	return false
}

// readKeyed reads "key value" lines and returns the value of key.
func readKeyed(file, key string) (int64, bool) {
	f, err := os.Open(file)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
