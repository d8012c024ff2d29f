// Package testenv lets tests that need root, containerd, runsc or kernel
// features say so. Where a requirement is missing such a test skips with
// the reason, except under CI=true, where a missing component fails the
// test: a green CI run means the real thing ran.
package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// ContainerdAddress is the socket of Rodon's containerd (scripts/install-deps).
const ContainerdAddress = "/run/rodon/containerd/containerd.sock"

// TaskBundle is the bundle directory containerd (scripts/containerd-start's
// state directory, beside the socket) keeps for task id in namespace ns;
// with id "" the directory of all of ns's bundles.
func TaskBundle(ns, id string) string {
	return filepath.Join(filepath.Dir(ContainerdAddress), "io.containerd.runtime.v2.task", ns, id)
}

// InCI reports whether the tests run under CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// Missing skips the test with reason, or fails it under CI.
func Missing(t testing.TB, reason string) {
	t.Helper()
	if InCI() {
		t.Fatalf("required component missing under CI=true: %s", reason)
	}
	t.Skipf("skipping: %s (set up with scripts/install-deps)", reason)
}

// RequireRoot needs the test to run as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "test needs root")
	}
}

// RequireContainerd needs root and Rodon's containerd socket.
func RequireContainerd(t testing.TB) {
	t.Helper()
	RequireRoot(t)
	if _, err := os.Stat(ContainerdAddress); err != nil {
		Missing(t, "Rodon's containerd is not running at "+ContainerdAddress)
	}
}

// RequireNetAdmin needs root with CAP_NET_ADMIN and CAP_SYS_ADMIN, enough
// to make network namespaces, veths and bind mounts.
func RequireNetAdmin(t testing.TB) {
	t.Helper()
	RequireRoot(t)
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		Missing(t, "cannot read capabilities: "+err.Error())
	}
	const netAdmin, sysAdmin = 12, 21
	for _, line := range strings.Split(string(b), "\n") {
		hex, ok := strings.CutPrefix(line, "CapEff:")
		if !ok {
			continue
		}
		caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil || caps&(1<<netAdmin) == 0 || caps&(1<<sysAdmin) == 0 {
			Missing(t, "test needs CAP_NET_ADMIN and CAP_SYS_ADMIN")
		}
		return
	}
	Missing(t, "cannot read capabilities: no CapEff in /proc/self/status")
}
