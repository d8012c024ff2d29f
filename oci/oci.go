// Package oci builds the OCI runtime specs of a step's sandbox.
//
// A step runs in a pod sandbox created for it alone: the pod's own process is
// a long-lived pause, and the step's command runs inside it as an exec (see
// agentd). Spec builds the pod spec from hardened defaults plus functional
// options in the style of containerd's pkg/oci; Process derives the step's
// process spec from a pod spec so both share user, capabilities and rlimits.
//
// Only this package imports containerd's pkg/oci (as ctroci).
package oci

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	ctroci "github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// SpecOpt changes a spec being built. It is containerd's SpecOpts, so
// containerd's own options compose with ours.
type SpecOpt = ctroci.SpecOpts

// Annotations that make gVisor treat a container as a pod sandbox. Without
// the container-type annotation, a runsc container started without a TTY
// hangs (gvisor#4544).
const (
	AnnotationContainerType = "io.kubernetes.cri.container-type"
	AnnotationSandboxID     = "io.kubernetes.cri.sandbox-id"
	ContainerTypeSandbox    = "sandbox"
)

// WorkspacePath is where a step sees its workspace.
const WorkspacePath = "/workspace"

// LibraryPath is where a step sees its account library, read-only.
const LibraryPath = "/library"

// Spec returns the spec of the pod sandbox with the given id in the
// containerd namespace ns: Hardened defaults, then opts in order.
func Spec(ctx context.Context, ns, id string, opts ...SpecOpt) (*specs.Spec, error) {
	if id == "" {
		return nil, fmt.Errorf("build spec: empty container id")
	}
	ctx = namespaces.WithNamespace(ctx, ns)
	c := &containers.Container{ID: id}
	s, err := ctroci.GenerateSpec(ctx, nil, c, append([]SpecOpt{Hardened()}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("build spec of %s: %w", id, err)
	}
	return s, nil
}

// Compose returns one option applying opts in order.
func Compose(opts ...SpecOpt) SpecOpt {
	return func(ctx context.Context, cl ctroci.Client, c *containers.Container, s *ctroci.Spec) error {
		return ctroci.ApplyOpts(ctx, cl, c, s, opts...)
	}
}
