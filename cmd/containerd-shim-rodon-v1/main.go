// Command containerd-shim-rodon-v1 is Rodon's containerd shim for gVisor.
//
// It is gVisor's runsc shim (gvisor.dev/gvisor/pkg/shim/v1) with four
// behaviours changed by wrapping, not patching, the upstream code:
//
//   - Start does not fail when the shim cannot lower its own oom_score_adj
//     (root on Rodon hosts lacks CAP_SYS_RESOURCE; the stock shim dies with
//     EACCES). See manager.go.
//   - Shutdown never replies with a nil message. With several containers in
//     one shim (a pod sandbox plus its sub-containers) the stock shim answered
//     Shutdown with a nil reply, and containerd 2.x failed every task delete
//     with "ttrpc: marshal called with nil". See task.go.
//   - A shim containerd gives up while it serves the container (a create
//     interrupted by its client's death) deletes it and exits instead of
//     running for ever. See taskService.Shutdown.
//   - The wait for each container's init process is done in the shim, not
//     by a `runsc wait` process that lives as long as the container (about
//     21 MB RSS per sandbox). See waitMonitor.
//
// Clients select it with the runtime type "io.containerd.rodon.v1"; containerd
// resolves that to this binary on its PATH, and the shim finds runsc on the
// same PATH, or rodon-runsc (cmd/rodon-runsc) in its stead when that is
// installed at ../libexec/rodon-runsc/runsc from this binary: it starts a
// step's process with one runsc start-up instead of two. See runscPath. Containers that carry the annotation
// io.kubernetes.cri.sandbox-id share the shim of that sandbox, as with
// containerd's runc shim.
//
// This is a separate Go module so that the containerd library versions gVisor
// compiles against (containerd v2.1.x, containerd/api v1.10) do not constrain
// the main module. Build it with CGO_ENABLED=0 (scripts/install-deps does).
package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/containerd/v2/pkg/shim"
)

// runtimeName is the runtime type clients pass to containerd.
const runtimeName = "io.containerd.rodon.v1"

// wrapperDir is where rodon-runsc is installed as "runsc", relative to this
// binary's directory. The directory holds nothing else: it goes first in
// the shim's PATH.
const wrapperDir = "../libexec/rodon-runsc"

func main() {
	if self, err := os.Executable(); err == nil {
		runscPath(self)
	}
	shim.Run(context.Background(), newManager(runtimeName))
}

// runscPath makes gVisor's shim code, which runs "runsc" from PATH, run
// rodon-runsc when it is installed: its directory goes first in PATH, and
// RODON_RUNSC names the runsc found without it. Without rodon-runsc nothing
// changes; without a runsc, only the wrapper's directory leaves PATH (the
// shim then fails to find runsc as it would have). It is idempotent (the
// shim daemon inherits the environment of the shim's start). self is this
// binary.
func runscPath(self string) {
	dir := filepath.Clean(filepath.Join(filepath.Dir(self), wrapperDir))
	if fi, err := os.Stat(filepath.Join(dir, "runsc")); err != nil || fi.Mode()&0o111 == 0 {
		return
	}
	path := slices.DeleteFunc(filepath.SplitList(os.Getenv("PATH")), func(d string) bool { return filepath.Clean(d) == dir })
	os.Setenv("PATH", strings.Join(path, string(filepath.ListSeparator)))
	real, err := exec.LookPath("runsc")
	if err != nil {
		return
	}
	if real, err = filepath.Abs(real); err != nil {
		return
	}
	os.Setenv("RODON_RUNSC", real)
	os.Setenv("PATH", strings.Join(append([]string{dir}, path...), string(filepath.ListSeparator)))
}
