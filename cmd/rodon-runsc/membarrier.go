package main

import (
	"fmt"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// noSentry are the runsc commands that start no sandbox or gofer process:
// they talk to a running sandbox over its control socket, or remove its
// state. runsc registers for private expedited membarrier(2) in an init
// function (gvisor.dev/gvisor/pkg/sentry/hostmm), for the sentry's sake;
// the registration waits for an RCU grace period, about 10 ms here, on
// every runsc start-up. These commands never use it, so rodon-runsc has
// membarrier(2) fail with ENOSYS for them, and runsc's init returns at
// once (docs/BENCHMARKS.md, issue 14). create, start, run, restore, boot,
// gofer and anything unknown keep membarrier: the sentry and gofer run in
// processes they start, which would inherit the filter.
var noSentry = map[string]bool{
	"exec": true, "state": true, "kill": true, "wait": true,
	"delete": true, "ps": true, "events": true,
}

// subcommand returns runsc's command in args, or "" if args do not say
// for certain: a global flag not in --name=value form might take the next
// argument as its value.
func subcommand(args []string) string {
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			return a
		}
		if !strings.Contains(a, "=") {
			return ""
		}
	}
	return ""
}

// auditArch is seccomp_data.arch of a native system call on this
// architecture (0 where rodon-runsc has no filter).
var auditArch = map[string]uint32{
	"amd64": unix.AUDIT_ARCH_X86_64,
	"arm64": unix.AUDIT_ARCH_AARCH64,
}[runtime.GOARCH]

// membarrierFilter is the seccomp program that fails membarrier(2) with
// ENOSYS, as a kernel without it would, and allows every other call. A
// call of another architecture (i386 on x86-64) is allowed whatever its
// number; x32 calls carry the x86-64 arch value, but their numbers have
// __X32_SYSCALL_BIT set, so they never equal membarrier's.
func membarrierFilter() ([]bpf.RawInstruction, error) {
	if auditArch == 0 {
		return nil, fmt.Errorf("no membarrier filter for %s", runtime.GOARCH)
	}
	return bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: auditArch, SkipTrue: 3},
		bpf.LoadAbsolute{Off: 0, Size: 4}, // seccomp_data.nr
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.SYS_MEMBARRIER, SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW},
	})
}

// withoutMembarrier installs membarrierFilter on every thread of this
// process; the processes it execs or starts inherit it.
func withoutMembarrier() error {
	prog, err := membarrierFilter()
	if err != nil {
		return fmt.Errorf("assemble seccomp filter: %w", err)
	}
	f := make([]unix.SockFilter, len(prog))
	for i, r := range prog {
		f[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fp := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	// As root (CAP_SYS_ADMIN), no_new_privs is not needed, and not set:
	// runsc must keep its capabilities across the exec.
	r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fp)))
	switch {
	case e != 0:
		return fmt.Errorf("install seccomp filter: %w", e)
	case r != 0:
		// With TSYNC, a thread that cannot take the filter fails the
		// call with its id, and no thread has the filter.
		return fmt.Errorf("install seccomp filter: thread %d cannot take it", r)
	}
	return nil
}
