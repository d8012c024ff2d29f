package testenv

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Leftovers lists what Rodon's sandboxes can leave behind on the host:
// containerd containers, tasks and snapshots in namespace ns, shim and runsc
// processes, mounts under containerd's state and root directories,
// workspace filesystems (their mounts and loop devices), sandbox network
// namespaces and veths, pinned BPF objects, task bundles in containerd's
// state directory, and cgroups under cgroupParent in every hierarchy. An
// empty list means a clean host.
func Leftovers(ctx context.Context, ns, cgroupParent string) []string {
	var out []string
	for _, what := range []string{"containers", "tasks", "snapshots"} {
		args := []string{"--address", ContainerdAddress, "-n", ns, what, "ls", "-q"}
		if what == "snapshots" {
			args = []string{"--address", ContainerdAddress, "-n", ns, "snapshots", "ls"}
		}
		cmd := exec.CommandContext(ctx, "/opt/rodon/bin/ctr", args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			out = append(out, fmt.Sprintf("ctr %s: %v: %s", what, err, stderr.Bytes()))
			continue
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			l = strings.TrimSpace(l)
			if l == "" || strings.HasPrefix(l, "KEY") {
				continue
			}
			// Image layers are committed snapshots; only active views
			// belong to sandboxes.
			if what == "snapshots" && !strings.Contains(l, "Active") && !strings.Contains(l, "View") {
				continue
			}
			out = append(out, what+": "+l)
		}
	}
	out = append(out, Processes("containerd-shim-rodon", "runsc-sandbox", "runsc-gofer", "runsc wait")...)
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) > 4 && (strings.Contains(f[4], "/run/rodon/containerd/io.containerd.runtime") ||
				strings.Contains(f[4], "/var/lib/rodon/containerd/io.containerd.snapshotter") && strings.Contains(f[4], "/mnt")) {
				out = append(out, "mount: "+f[4])
			}
		}
	}
	// Workspace filesystems (agentd's quota): mounts of *.img images and
	// the loop devices behind them.
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) > 4 && strings.Contains(f[4], "/workspaces/") && strings.Contains(sc.Text(), " - ext4 /dev/loop") {
				out = append(out, "workspace mount: "+f[4])
			}
		}
	}
	if files, err := filepath.Glob("/sys/block/loop*/loop/backing_file"); err == nil {
		for _, file := range files {
			b, err := os.ReadFile(file)
			if back := strings.TrimSpace(string(b)); err == nil && strings.Contains(back, "/workspaces/") && strings.Contains(back, ".img") {
				out = append(out, fmt.Sprintf("loop device %s: %s", strings.Split(file, "/")[3], back))
			}
		}
	}
	// Sandbox networks (netpolicy): named namespaces and host-side veths.
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "rodon-") {
				out = append(out, "netns: "+e.Name())
			}
		}
	}
	if ents, err := os.ReadDir("/sys/class/net"); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "rv") {
				out = append(out, "veth: "+e.Name())
			}
		}
	}
	// Pinned BPF objects: nothing of Rodon's is pinned, so any rodon entry
	// in bpffs is a leak.
	if ents, err := os.ReadDir("/sys/fs/bpf"); err == nil {
		for _, e := range ents {
			if strings.Contains(e.Name(), "rodon") {
				out = append(out, "bpffs: "+e.Name())
			}
		}
	}
	// Task bundles: containerd removes a task's bundle with the task. One
	// left behind (or made again by a runsc logging into it) is taken for
	// a task at containerd's next start.
	bundles := TaskBundle(ns, "")
	if ents, err := os.ReadDir(bundles); err == nil {
		for _, e := range ents {
			out = append(out, "task bundle: "+filepath.Join(bundles, e.Name()))
		}
	}
	// Every controller's hierarchy (cgroup v1 mounts each one apart; runsc
	// makes the sandbox's cgroup in all of them), and the root's.
	ctls := []string{""}
	if ents, err := os.ReadDir("/sys/fs/cgroup"); err == nil {
		for _, e := range ents {
			if e.IsDir() {
				ctls = append(ctls, e.Name())
			}
		}
	}
	for _, ctl := range ctls {
		dir := filepath.Join("/sys/fs/cgroup", ctl, cgroupParent)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.IsDir() {
				out = append(out, "cgroup: "+filepath.Join(dir, e.Name()))
			}
		}
	}
	return out
}

// Processes lists the running processes whose command line contains any
// of pats, as "process PID: COMMAND LINE".
func Processes(pats ...string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		cmd := strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")
		for _, p := range pats {
			if strings.Contains(cmd, p) {
				out = append(out, fmt.Sprintf("process %s: %s", e.Name(), cmd))
				break
			}
		}
	}
	return out
}

// CheckNoLeaks fails t if anything is left over, waiting up to 10 seconds
// for asynchronous teardown (shims exit shortly after their last task).
func CheckNoLeaks(t testing.TB, ns, cgroupParent string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := Leftovers(context.Background(), ns, cgroupParent)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("left behind after the test:\n  %s", strings.Join(left, "\n  "))
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}
