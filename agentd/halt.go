package agentd

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// haltWait bounds how long Halt waits for the sandbox's processes to go.
const haltWait = 5 * time.Second

// Halt kills every process of the sandbox on the host with SIGKILL and
// returns once its cgroup holds none: runsc's sandbox (the sentry), its
// gofer and the systrap stubs that run the step's code are all there, so
// from then nothing of the sandbox runs or writes, also not through a
// shared mapping of a workspace file. That is what reading the workspace
// back needs, and it takes milliseconds where stopping the pod and
// deleting its task (Quiesce) take about 230 ms. Destroy still stops and
// deletes the task after it. On an error nothing is promised; call
// Quiesce instead.
func (s *Sandbox) Halt() error {
	if s.quiesced || s.halted {
		return nil
	}
	cg := s.cgroupPath()
	if kill := filepath.Join(cgroupRoot, cg, "cgroup.kill"); fileExists(kill) {
		// cgroup v2: the kernel kills the whole cgroup at once.
		if err := os.WriteFile(kill, []byte("1"), 0o644); err != nil {
			return fmt.Errorf("halt sandbox %s: %w", s.id, err)
		}
		return s.awaitEmpty(filepath.Join(cgroupRoot, cg, "cgroup.procs"), nil)
	}
	procs := filepath.Join(cgroupRoot, "pids", cg, "cgroup.procs")
	return s.awaitEmpty(procs, func(pid int) error { return killInCgroup(pid, "pids", cg) })
}

// awaitEmpty reads procs (a cgroup's process list) until it is empty,
// calling kill (if not nil) for each process it lists, for at most
// haltWait.
func (s *Sandbox) awaitEmpty(procs string, kill func(pid int) error) error {
	deadline := time.Now().Add(haltWait)
	for {
		b, err := os.ReadFile(procs)
		if err != nil {
			return fmt.Errorf("halt sandbox %s: %w", s.id, err)
		}
		pids := strings.Fields(string(b))
		if len(pids) == 0 {
			s.halted = true
			return nil
		}
		if kill != nil {
			for _, p := range pids {
				pid, err := strconv.Atoi(p)
				if err != nil {
					return fmt.Errorf("halt sandbox %s: %s lists %q", s.id, procs, p)
				}
				if err := kill(pid); err != nil {
					return fmt.Errorf("halt sandbox %s: %w", s.id, err)
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("halt sandbox %s: processes %v still in its cgroup after %v", s.id, pids, haltWait)
		}
		time.Sleep(time.Millisecond)
	}
}

// killInCgroup sends SIGKILL to process pid if it is in cgroup cg of
// controller ctrl (cgroup v1). The process is pinned by a pidfd before
// its cgroup is checked, so a pid reused by another process after the
// list was read is never signalled.
func killInCgroup(pid int, ctrl, cg string) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil // gone already
	}
	if err != nil {
		return fmt.Errorf("pidfd of %d: %w", pid, err)
	}
	defer unix.Close(fd)
	in, err := inCgroup(pid, ctrl, cg)
	if err != nil || !in {
		return nil // gone, or another process now
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill %d: %w", pid, err)
	}
	return nil
}

// inCgroup reports whether process pid is in cgroup cg of controller
// ctrl, from /proc/PID/cgroup (v1 lines "N:CTRL[,CTRL]:/PATH").
func inCgroup(pid int, ctrl, cg string) (bool, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false, err
	}
	defer f.Close()
	want := "/" + strings.TrimPrefix(cg, "/")
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == ctrl {
				return parts[2] == want, nil
			}
		}
	}
	return false, sc.Err()
}
