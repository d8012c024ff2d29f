package main

import (
	"fmt"
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

// auditArchX86_64 is AUDIT_ARCH_X86_64, seccomp_data.arch of a native
// x86-64 system call.
const auditArchX86_64 = 0xc000003e

// membarrierFilter is the seccomp program that fails membarrier(2) with
// ENOSYS, as a kernel without it would, and allows every other call. A
// call of another architecture (i386, x32 numbering) is allowed whatever
// its number.
func membarrierFilter() ([]bpf.RawInstruction, error) {
	return bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: auditArchX86_64, SkipTrue: 3},
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
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fp))); e != 0 {
		return fmt.Errorf("install seccomp filter: %w", e)
	}
	return nil
}
