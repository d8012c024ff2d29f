package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the unit of the CPU times in /proc/PID/stat (USER_HZ,
// 100 on Linux).
const clockTick = 10 * time.Millisecond

// cpuTimes are CPU times (user and system) used so far by the scheduler
// members of one cluster and by this process (its clients and fake
// agents, those of both clusters).
type cpuTimes struct{ members, bench time.Duration }

// cpu reads the CPU times of the cluster's members and of this process.
// Unlike a rate, CPU time per lifecycle hardly depends on what else the
// machine runs.
func (sc *schedCluster) cpu() (cpuTimes, error) {
	var c cpuTimes
	for _, d := range sc.ds {
		t, err := procCPU(d.cmd.Process.Pid)
		if err != nil {
			return c, err
		}
		c.members += t
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return c, err
	}
	c.bench = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return c, nil
}

// procCPU returns the user and system CPU time of process pid.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// utime and stime are fields 14 and 15, the 12th and 13th after it.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name, want at least 13", pid, len(f))
	}
	var total time.Duration
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		total += time.Duration(n) * clockTick
	}
	return total, nil
}
