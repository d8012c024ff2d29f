// Command containerd-shim-rodon-v1 is Rodon's containerd shim for gVisor.
//
// It is gVisor's runsc shim (gvisor.dev/gvisor/pkg/shim/v1) with two
// behaviours changed by wrapping, not patching, the upstream code:
//
//   - Start does not fail when the shim cannot lower its own oom_score_adj
//     (root on Rodon hosts lacks CAP_SYS_RESOURCE; the stock shim dies with
//     EACCES). See manager.go.
//   - Shutdown never replies with a nil message. With several containers in
//     one shim (a pod sandbox plus its sub-containers) the stock shim answered
//     Shutdown with a nil reply, and containerd 2.x failed every task delete
//     with "ttrpc: marshal called with nil". See task.go.
//
// Clients select it with the runtime type "io.containerd.rodon.v1"; containerd
// resolves that to this binary on its PATH, and the shim finds runsc on the
// same PATH. Containers that carry the annotation
// io.kubernetes.cri.sandbox-id share the shim of that sandbox, as with
// containerd's runc shim.
//
// This is a separate Go module so that the containerd library versions gVisor
// compiles against (containerd v2.1.x, containerd/api v1.10) do not constrain
// the main module. Build it with CGO_ENABLED=0 (scripts/install-deps does).
package main

import (
	"context"

	"github.com/containerd/containerd/v2/pkg/shim"
)

// runtimeName is the runtime type clients pass to containerd.
const runtimeName = "io.containerd.rodon.v1"

func main() {
	shim.Run(context.Background(), newManager(runtimeName))
}
