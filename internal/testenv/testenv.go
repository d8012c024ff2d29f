// Package testenv lets tests that need root, containerd, runsc or kernel
// features say so. Where a requirement is missing such a test skips with
// the reason, except under CI=true, where a missing component fails the
// test: a green CI run means the real thing ran.
package testenv

import (
	"os"
	"testing"
)

// ContainerdAddress is the socket of Rodon's containerd (scripts/install-deps).
const ContainerdAddress = "/run/rodon/containerd/containerd.sock"

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
