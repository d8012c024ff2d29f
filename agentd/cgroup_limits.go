package agentd

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rodon-compute/rodon/oci"
)

// cpuPeriodUS is the CFS period of every sandbox's CPU limit (as
// oci.WithLimits sets it), in microseconds.
const cpuPeriodUS = 100000

// unlimitedV1 is the smallest value cgroup v1 reads back for a memory
// limit of -1 (no limit; the kernel rounds LONG_MAX down to a page).
const unlimitedV1 = 1 << 62

// A limitFile is one host cgroup file holding part of a sandbox's limits:
// what to write there, and whether what it reads back is that.
type limitFile struct {
	what  string
	file  string // under cgroupRoot
	value string
	ok    func(got string) bool
	// optional files are written and checked only where they exist
	// (memory.memsw.limit_in_bytes needs swap accounting).
	optional bool
}

// limitFiles is the table of the files of limits l on the sandbox cgroup
// cg, shared by applyLimits (the writer) and checkLimits (the reader):
// cgroup v1 (this kernel's v1/v2 hybrid) when the memory controller is
// mounted on its own, else v2. Zero CPU or memory means no limit; the
// pids file holds oci.HostPids of the step's pids.
func limitFiles(cg string, l oci.Limits) []limitFile {
	eq := func(want string) func(string) bool { return func(got string) bool { return got == want } }
	pids := strconv.FormatInt(oci.HostPids(l.Pids), 10)
	quota := int64(math.Round(l.CPU * cpuPeriodUS))
	if dirExists(filepath.Join(cgroupRoot, "memory")) {
		mem, memOK := "-1", func(got string) bool { n, err := strconv.ParseInt(got, 10, 64); return err == nil && n >= unlimitedV1 }
		if l.MemoryBytes > 0 {
			mem = strconv.FormatInt(l.MemoryBytes, 10)
			memOK = eq(mem)
		}
		cpu := "-1"
		if quota > 0 {
			cpu = strconv.FormatInt(quota, 10)
		}
		return []limitFile{
			{what: "memory", file: filepath.Join("memory", cg, "memory.limit_in_bytes"), value: mem, ok: memOK},
			{what: "memory+swap", file: filepath.Join("memory", cg, "memory.memsw.limit_in_bytes"), value: mem, ok: memOK, optional: true},
			{what: "cpu period", file: filepath.Join("cpu", cg, "cpu.cfs_period_us"), value: strconv.Itoa(cpuPeriodUS), ok: eq(strconv.Itoa(cpuPeriodUS))},
			{what: "cpu", file: filepath.Join("cpu", cg, "cpu.cfs_quota_us"), value: cpu, ok: eq(cpu)},
			{what: "pids", file: filepath.Join("pids", cg, "pids.max"), value: pids, ok: eq(pids)},
		}
	}
	mem, swap := "max", "max"
	if l.MemoryBytes > 0 {
		mem, swap = strconv.FormatInt(l.MemoryBytes, 10), "0"
	}
	cpu := "max " + strconv.Itoa(cpuPeriodUS)
	if quota > 0 {
		cpu = strconv.FormatInt(quota, 10) + " " + strconv.Itoa(cpuPeriodUS)
	}
	return []limitFile{
		{what: "memory", file: filepath.Join(cg, "memory.max"), value: mem, ok: eq(mem)},
		{what: "swap", file: filepath.Join(cg, "memory.swap.max"), value: swap, ok: eq(swap), optional: true},
		{what: "cpu", file: filepath.Join(cg, "cpu.max"), value: cpu, ok: eq(cpu)},
		{what: "pids", file: filepath.Join(cg, "pids.max"), value: pids, ok: eq(pids)},
	}
}

// ErrLimitsNotApplied is wrapped by applyLimits when a limit could not be
// written or does not read back as written: a required control is
// missing, and the node is degraded.
var ErrLimitsNotApplied = errors.New("limits not applied")

// applyLimits writes limits l to the host cgroup files of the sandbox
// cgroup cg (a running sandbox's: runsc made them) and reads each back.
// On cgroup v1 a memory limit and its memory+swap limit are written in
// the order the kernel accepts (memsw never below the limit): the limit
// first when lowering, memsw first when raising.
func applyLimits(cg string, l oci.Limits) error {
	files := limitFiles(cg, l)
	if len(files) > 1 && files[1].what == "memory+swap" {
		cur, err := os.ReadFile(filepath.Join(cgroupRoot, files[0].file))
		if err != nil {
			return fmt.Errorf("%w: read memory limit: %w", ErrLimitsNotApplied, err)
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(string(cur)), 10, 64)
		if l.MemoryBytes <= 0 || l.MemoryBytes > n {
			files[0], files[1] = files[1], files[0] // raising
		}
	}
	for _, f := range files {
		p := filepath.Join(cgroupRoot, f.file)
		if f.optional && !fileExists(p) {
			continue
		}
		if err := os.WriteFile(p, []byte(f.value), 0o644); err != nil {
			return fmt.Errorf("%w: %s limit: write %q to %s: %w", ErrLimitsNotApplied, f.what, f.value, p, err)
		}
	}
	if reasons := readBackLimits(cg, l); len(reasons) > 0 {
		return fmt.Errorf("%w: %s", ErrLimitsNotApplied, strings.Join(reasons, "; "))
	}
	return nil
}

// readBackLimits reads the limits of the sandbox cgroup cg from the
// host's cgroup files and says, one reason each, which are not l.
func readBackLimits(cg string, l oci.Limits) []string {
	var reasons []string
	for _, f := range limitFiles(cg, l) {
		p := filepath.Join(cgroupRoot, f.file)
		b, err := os.ReadFile(p)
		if err != nil {
			if f.optional && errors.Is(err, os.ErrNotExist) {
				continue
			}
			reasons = append(reasons, fmt.Sprintf("%s limit not applied: %v", f.what, err))
			continue
		}
		if got := strings.TrimSpace(string(b)); !f.ok(got) {
			reasons = append(reasons, fmt.Sprintf("%s limit not applied: %s reads %q, want %q", f.what, p, got, f.value))
		}
	}
	return reasons
}

// checkLimits reads the sandbox's limits back from the host's cgroups.
func (s *Sandbox) checkLimits(l oci.Limits) []string { return readBackLimits(s.cgroupPath(), l) }
