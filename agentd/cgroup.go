package agentd

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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

// removeCgroups removes the sandbox's cgroup directories that the runtime
// left behind (runsc does not remove them when a sandbox fails to start).
// A cgroup that still has processes cannot be removed and is reported.
func (s *Sandbox) removeCgroups() error {
	cg := s.cgroupPath()
	ents, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return nil
	}
	var errs []error
	dirs := []string{filepath.Join(cgroupRoot, cg)}
	for _, e := range ents {
		dirs = append(dirs, filepath.Join(cgroupRoot, e.Name(), cg))
	}
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}
