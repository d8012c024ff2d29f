package oci

import (
	"context"
	"fmt"
	"math"
	"path/filepath"

	"github.com/containerd/containerd/v2/core/containers"
	ctroci "github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/rodon-compute/rodon/cluster"
)

// Limits are the resource limits of one step. Zero means unlimited, except
// where a field says otherwise.
type Limits struct {
	// CPU is the number of cores the step may use, such as 0.5 or 2.
	CPU float64
	// MemoryBytes caps the sandbox's memory; swap is not allowed on top.
	MemoryBytes int64
	// Pids caps the number of processes the step may run at once.
	Pids int64
}

// HostPids is the host pids cgroup limit of a sandbox whose step may run
// pids processes. gVisor's sentry needs host threads of its own and, under
// systrap, a stub per guest address space and thread, and it crashes
// instead of failing a fork when the host limit is hit (gvisor#2490). So
// the step's own limit is enforced inside the sandbox, where fork fails
// with EAGAIN (RLIMIT_NPROC, honoured by the sentry for tasks without
// CAP_SYS_ADMIN and CAP_SYS_RESOURCE, which steps never have), and the host
// limit, with room for the sentry, is a backstop that contains the whole
// sandbox. The room was measured with a fork bomb at RLIMIT_NPROC 1024 (the
// default): the sandbox's host tasks peaked at 1371 to 2435 over seven
// runs (stubs of exited guest processes linger), so 2N+256 (2304) was hit
// and crashed the sandbox; 4N+256 (4352) never was.
func HostPids(pids int64) int64 { return 4*pids + 256 }

// cpuPeriod is the CFS period used for CPU limits, in microseconds.
const cpuPeriod = 100000

// Validate reports a limit that cannot be applied.
func (l Limits) Validate() error {
	switch {
	case l.CPU < 0 || math.IsNaN(l.CPU) || math.IsInf(l.CPU, 0):
		return fmt.Errorf("cpu limit %v: must be a positive number of cores", l.CPU)
	case l.CPU > 0 && cluster.CheckCPU(l.CPU, 0) != nil:
		return fmt.Errorf("cpu limit: %w", cluster.CheckCPU(l.CPU, 0))
	case l.MemoryBytes < 0:
		return fmt.Errorf("memory limit %d: must not be negative", l.MemoryBytes)
	case l.MemoryBytes > 0 && cluster.CheckMemory(l.MemoryBytes, 0) != nil:
		return fmt.Errorf("memory limit: %w", cluster.CheckMemory(l.MemoryBytes, 0))
	case l.Pids < 0:
		return fmt.Errorf("pids limit %d: must not be negative", l.Pids)
	case l.Pids > 0 && l.Pids < cluster.MinLimits.Pids:
		return fmt.Errorf("pids limit %d: below the minimum of %d", l.Pids, cluster.MinLimits.Pids)
	}
	return nil
}

// WithLimits applies the step's limits to the sandbox's cgroups and, for
// pids, to RLIMIT_NPROC inside the sandbox (see HostPids).
func WithLimits(l Limits) SpecOpt {
	return func(ctx context.Context, cl ctroci.Client, c *containers.Container, s *ctroci.Spec) error {
		if err := l.Validate(); err != nil {
			return err
		}
		var opts []SpecOpt
		if l.CPU > 0 {
			opts = append(opts, ctroci.WithCPUCFS(int64(math.Round(l.CPU*cpuPeriod)), cpuPeriod))
		}
		if l.MemoryBytes > 0 {
			opts = append(opts, ctroci.WithMemoryLimit(uint64(l.MemoryBytes)), ctroci.WithMemorySwap(l.MemoryBytes))
		}
		if l.Pids > 0 {
			opts = append(opts, ctroci.WithPidsLimit(HostPids(l.Pids)), WithRlimit("RLIMIT_NPROC", uint64(l.Pids), uint64(l.Pids)))
		}
		return ctroci.ApplyOpts(ctx, cl, c, s, opts...)
	}
}

// WithWorkspace bind-mounts the host directory dir read-write at /workspace
// and makes it the working directory.
func WithWorkspace(dir string) SpecOpt { return withWorkspace(dir, "rw") }

// WithReadOnlyWorkspace is WithWorkspace with the mount read-only: gVisor's
// gofer refuses every write to it (EROFS), as for the library. A Bash step
// of an agent without a writing tool gets its workspace so.
func WithReadOnlyWorkspace(dir string) SpecOpt { return withWorkspace(dir, "ro") }

func withWorkspace(dir, access string) SpecOpt {
	return func(ctx context.Context, cl ctroci.Client, c *containers.Container, s *ctroci.Spec) error {
		if !filepath.IsAbs(dir) {
			return fmt.Errorf("workspace %q: not an absolute path", dir)
		}
		return ctroci.ApplyOpts(ctx, cl, c, s,
			ctroci.WithMounts([]specs.Mount{{
				Destination: WorkspacePath,
				Type:        "bind",
				Source:      dir,
				Options:     []string{"rbind", access, "nosuid", "nodev"},
			}}),
			ctroci.WithProcessCwd(WorkspacePath),
		)
	}
}

// WithLibrary bind-mounts the host directory dir read-only at /library
// (nothing if dir is empty): gVisor's gofer refuses every write to it.
func WithLibrary(dir string) SpecOpt {
	return func(ctx context.Context, cl ctroci.Client, c *containers.Container, s *ctroci.Spec) error {
		if dir == "" {
			return nil
		}
		if !filepath.IsAbs(dir) {
			return fmt.Errorf("library %q: not an absolute path", dir)
		}
		return ctroci.ApplyOpts(ctx, cl, c, s, ctroci.WithMounts([]specs.Mount{{
			Destination: LibraryPath,
			Type:        "bind",
			Source:      dir,
			Options:     []string{"rbind", "ro", "nosuid", "nodev"},
		}}))
	}
}

// WithNetNS runs the sandbox in the network namespace at path (made by
// netpolicy). Without it the sandbox gets a new, empty namespace.
func WithNetNS(path string) SpecOpt {
	return ctroci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: path})
}

// WithResolvConf bind-mounts the host file path read-only at
// /etc/resolv.conf: the DNS resolvers the sandbox's network allows.
func WithResolvConf(path string) SpecOpt {
	return func(ctx context.Context, cl ctroci.Client, c *containers.Container, s *ctroci.Spec) error {
		if !filepath.IsAbs(path) {
			return fmt.Errorf("resolv.conf %q: not an absolute path", path)
		}
		return ctroci.ApplyOpts(ctx, cl, c, s, ctroci.WithMounts([]specs.Mount{{
			Destination: "/etc/resolv.conf",
			Type:        "bind",
			Source:      path,
			Options:     []string{"rbind", "ro", "nosuid", "nodev", "noexec"},
		}}))
	}
}

// WithCgroupsPath places the sandbox's cgroups at path on every controller.
func WithCgroupsPath(path string) SpecOpt {
	return ctroci.WithCgroup(path)
}

// Where a pod sandbox sees its pause binary and agentd's control directory.
const (
	PausePath   = "/run/rodon/pause"
	ControlPath = "/run/rodon/ctl"
)

// WithPause makes the host's static pause binary the sandbox's own process,
// with agentd's control directory ctlDir read-only beside it (see
// cmd/rodon-pause).
func WithPause(binary, ctlDir string) SpecOpt {
	return func(ctx context.Context, cl ctroci.Client, c *containers.Container, s *ctroci.Spec) error {
		if !filepath.IsAbs(binary) || !filepath.IsAbs(ctlDir) {
			return fmt.Errorf("pause %q and control dir %q: want absolute paths", binary, ctlDir)
		}
		return ctroci.ApplyOpts(ctx, cl, c, s,
			ctroci.WithMounts([]specs.Mount{
				{Destination: PausePath, Type: "bind", Source: binary, Options: []string{"rbind", "ro", "nosuid", "nodev"}},
				{Destination: ControlPath, Type: "bind", Source: ctlDir, Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}},
			}),
			ctroci.WithProcessArgs(PausePath),
		)
	}
}

// WithPodSandbox marks the spec as a pod sandbox for gVisor.
func WithPodSandbox() SpecOpt {
	return ctroci.WithAnnotations(map[string]string{AnnotationContainerType: ContainerTypeSandbox})
}

// WithArgs sets the command of the sandbox's own process.
func WithArgs(args ...string) SpecOpt { return ctroci.WithProcessArgs(args...) }

// WithEnv sets environment variables, later values replacing earlier ones
// with the same name.
func WithEnv(env []string) SpecOpt { return ctroci.WithEnv(env) }

// Process returns the process spec of a command run inside the sandbox
// described by pod: the pod's user, capabilities, rlimits, environment and
// working directory, with args, and env appended (replacing same names).
func Process(pod *specs.Spec, args, env []string) (*specs.Process, error) {
	if pod == nil || pod.Process == nil {
		return nil, fmt.Errorf("build process: pod spec has no process")
	}
	if len(args) == 0 {
		return nil, fmt.Errorf("build process: empty command")
	}
	tmp := *pod
	p := *pod.Process
	p.Args = append([]string(nil), args...)
	p.Env = append([]string(nil), pod.Process.Env...)
	p.Rlimits = append([]specs.POSIXRlimit(nil), pod.Process.Rlimits...)
	tmp.Process = &p
	if err := ctroci.WithEnv(env)(context.Background(), nil, nil, &tmp); err != nil {
		return nil, fmt.Errorf("build process: %w", err)
	}
	return tmp.Process, nil
}
