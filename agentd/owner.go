package agentd

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// An owner names a live agent process as "pid:starttime", so that a reused
// pid is not mistaken for the agent that created a sandbox.
func selfOwner() (string, error) {
	return ownerOf(os.Getpid())
}

func ownerOf(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", fmt.Errorf("read process start time: %w", err)
	}
	// Field 22 (starttime) counts from the field after the command, which
	// is in parentheses and may itself contain spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", fmt.Errorf("parse /proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return "", fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	return strconv.Itoa(pid) + ":" + f[19], nil
}

// ownerAlive reports whether the agent named by owner still runs.
func ownerAlive(owner string) bool {
	pidStr, _, ok := strings.Cut(owner, ":")
	if !ok {
		return false
	}
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 {
		return false
	}
	cur, err := ownerOf(pid)
	return err == nil && cur == owner
}
