package oci

import (
	"context"
	"slices"

	"github.com/containerd/containerd/v2/core/containers"
	ctroci "github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// maskedPaths hide host information under /proc and /sys. The list is fixed
// (containerd's default adds per-CPU paths of the host, which would make
// specs differ between machines).
var maskedPaths = []string{
	"/proc/acpi",
	"/proc/asound",
	"/proc/interrupts",
	"/proc/kcore",
	"/proc/keys",
	"/proc/latency_stats",
	"/proc/sched_debug",
	"/proc/scsi",
	"/proc/timer_list",
	"/proc/timer_stats",
	"/sys/devices/virtual/powercap",
	"/sys/firmware",
}

var readonlyPaths = []string{
	"/proc/bus",
	"/proc/fs",
	"/proc/irq",
	"/proc/sys",
	"/proc/sysrq-trigger",
}

// Hardened is the base every step's sandbox starts from: a read-only root
// filesystem, a private tmpfs at /tmp, no capabilities, no new privileges,
// masked and read-only proc paths, a fixed hostname and a bounded number of
// open files. Spec applies it before any other option.
func Hardened() SpecOpt {
	return Compose(
		ctroci.WithRootFSReadonly(),
		ctroci.WithNoNewPrivileges,
		ctroci.WithCapabilities(nil),
		ctroci.WithMaskedPaths(slices.Clone(maskedPaths)),
		ctroci.WithReadonlyPaths(slices.Clone(readonlyPaths)),
		ctroci.WithHostname("sandbox"),
		ctroci.WithProcessCwd("/"),
		withTmp,
		WithRlimit("RLIMIT_NOFILE", 1024, 1024),
		WithRlimit("RLIMIT_CORE", 0, 0),
	)
}

func withTmp(_ context.Context, _ ctroci.Client, _ *containers.Container, s *ctroci.Spec) error {
	s.Mounts = append(s.Mounts, specs.Mount{
		Destination: "/tmp",
		Type:        "tmpfs",
		Source:      "tmpfs",
		Options:     []string{"nosuid", "nodev", "mode=1777", "size=256m"},
	})
	return nil
}

// WithRlimit sets (or replaces) one POSIX rlimit of the process.
func WithRlimit(typ string, hard, soft uint64) SpecOpt {
	return func(_ context.Context, _ ctroci.Client, _ *containers.Container, s *ctroci.Spec) error {
		if s.Process == nil {
			s.Process = &specs.Process{}
		}
		s.Process.Rlimits = slices.DeleteFunc(s.Process.Rlimits, func(r specs.POSIXRlimit) bool { return r.Type == typ })
		s.Process.Rlimits = append(s.Process.Rlimits, specs.POSIXRlimit{Type: typ, Hard: hard, Soft: soft})
		return nil
	}
}
