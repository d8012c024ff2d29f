package gateway

import (
	"regexp"
	"strings"
)

// startFailed leads what scrubRuntimeError makes of an OCI runtime error.
const startFailed = "the command could not be started"

var (
	// ociRE finds an OCI runtime error: "OCI runtime exec failed: ...",
	// "OCI runtime create failed: ...", "oci runtime error: ...".
	ociRE = regexp.MustCompile(`(?i)\boci runtime\b`)
	// runtimeLeadRE is containerd's wording in front of a runtime error,
	// one ": "-separated segment.
	runtimeLeadRE = regexp.MustCompile(`(?i)^(failed to (create shim task|start shim|create task|start task|exec in container|start exec\b.*)|error executing command in container|error response from daemon)$`)
	// runtimeStepRE matches the runtime's own steps in its error chain,
	// each up to its ": ". What follows the last is the useful tail.
	runtimeStepRE = regexp.MustCompile(`(?i)(\boci runtime\b[^:]*` +
		`|\bexec failed` +
		`|\bcontainer_linux\.go:\d+` +
		`|\bnsexec[^:]*` +
		`|\bunable to start container process` +
		`|\berror during container init` +
		`|\b(runc|runsc|crun)( \w+)? failed` +
		`|\bexecuting (command|processes)\b.*? in sandbox` +
		`|\bexecuting processes for container` +
		`|\bstarting (root )?container` +
		`|\bstarting sandbox` +
		`|\bcreating container` +
		`|\bcannot create sandbox` +
		`|\bexec):\s*` +
		`|\bstarting container process caused:?\s*"?`)
)

// scrubRuntimeError rewrites an OCI runtime error in s into words for
// users: "OCI runtime exec failed: exec failed: unable to start container
// process: exec: \"nope\": executable file not found in $PATH: unknown"
// becomes "the command could not be started: \"nope\": executable file not
// found in $PATH". What comes before the runtime's part of the message
// (the node's own context, such as "step did not start: ") is kept, minus
// containerd's wording ("failed to create shim task: "); the tail is what
// follows the runtime's last step of its chain, without containerd's
// trailing ": unknown". s without "OCI runtime" is returned as it is.
func scrubRuntimeError(s string) string {
	loc := ociRE.FindStringIndex(s)
	if loc == nil {
		return s
	}
	// The runtime's part starts with the ": "-separated segment holding
	// "OCI runtime", and with containerd's segments just before it.
	start := strings.LastIndex(s[:loc[0]], ": ") + 1
	if start > 0 {
		start++ // past the space
	}
	prefix := s[:start]
	for {
		p := strings.TrimSuffix(prefix, ": ")
		i := strings.LastIndex(p, ": ") + 1
		if i > 0 {
			i++
		}
		if p == prefix || !runtimeLeadRE.MatchString(p[i:]) {
			break
		}
		prefix = p[:i]
	}
	chain := strings.ReplaceAll(s[start:], `\"`, `"`)
	tail := ""
	if m := runtimeStepRE.FindAllStringIndex(chain, -1); m != nil {
		tail = chain[m[len(m)-1][1]:]
	}
	for {
		t := strings.TrimSpace(tail)
		t = strings.TrimSuffix(t, ": unknown")
		t = strings.TrimSuffix(t, " in sandbox")
		t = strings.TrimRight(t, ": ")
		if t == tail {
			break
		}
		tail = t
	}
	if strings.Count(tail, `"`)%2 == 1 {
		// A quote opened before the tail ("caused \"exec: ...\"") or
		// closed after it.
		if t, ok := strings.CutSuffix(tail, `"`); ok {
			tail = t
		} else {
			tail = strings.TrimPrefix(tail, `"`)
		}
	}
	if tail == "" || strings.EqualFold(tail, "unknown") {
		return prefix + startFailed
	}
	return prefix + startFailed + ": " + tail
}
