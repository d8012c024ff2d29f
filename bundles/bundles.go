// Package bundles names the root filesystem images that Rodon runs steps in.
//
// The images are built from Debian bookworm packages by bundles/build, packed
// as OCI images with umoci and imported into Rodon's containerd in namespace
// [Namespace], unpacked for the overlayfs snapshotter:
//
//   - [Base] ("base"): debootstrap --variant=minbase plus procps: a POSIX
//     shell, coreutils, util-linux (dmesg) and ps.
//   - [Python] ("python"): base plus Debian's python3, python3-numpy,
//     python3-pandas and python3-matplotlib, with MPLBACKEND=Agg.
//
// Both run /bin/sh in /workspace with PATH set and LANG=C.UTF-8. Build and
// import them, as root, with:
//
//	bundles/build [--force] [--no-import] [base|python|all]
//
// Finished images are cached under /var/cache/rodon/bundles, so a second run
// only checks that containerd has them.
package bundles

import "strings"

// Image references in containerd, and the namespace that holds them.
const (
	Base      = "rodon.local/base:latest"
	Python    = "rodon.local/python:latest"
	Namespace = "rodon"
)

// Ref returns the image reference for a short bundle name ("base",
// "python"). A name containing ':' or '/' is taken to be a reference already
// and returned unchanged; any other name maps to rodon.local/<name>:latest.
func Ref(name string) string {
	if strings.ContainsAny(name, ":/") {
		return name
	}
	return "rodon.local/" + name + ":latest"
}
