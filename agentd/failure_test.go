package agentd

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/api"
)

// TestStartFailure: a runtime's error of starting the command (the forms
// the gateway's rewriter used to read) is classified once, into a cause
// and a sentence naming the command, and nothing of the runtime's text is
// in the sentence; the error still wraps ErrStartFailed and the runtime's
// text for the node's log.
func TestStartFailure(t *testing.T) {
	for _, tc := range []struct {
		name, cmd, raw, cause string
	}{
		{"runc exec", "nope",
			`OCI runtime exec failed: exec failed: unable to start container process: exec: "nope": executable file not found in $PATH: unknown`,
			api.CauseCommandNotFound},
		{"old runc, quoted chain", "bash",
			`OCI runtime exec failed: exec failed: container_linux.go:349: starting container process caused "exec: "bash": executable file not found in $PATH": unknown`,
			api.CauseCommandNotFound},
		{"shim task create", "/app/run.sh",
			`failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: exec: "/app/run.sh": permission denied: unknown`,
			api.CauseCommandNotExecutable},
		{"in sandbox", "nope",
			`OCI runtime exec failed: executing processes for container: executing command "&{Filename: Argv:[nope] Envv:[PATH=/usr/bin]}" in sandbox: executable file not found in $PATH in sandbox: unknown`,
			api.CauseCommandNotFound},
		{"lower case", "sh", `oci runtime error: exec failed: exec: "sh": stat sh: no such file or directory`, api.CauseCommandNotFound},
		{"no tail", "true", `OCI runtime start failed: unknown`, api.CauseStartFailed},
		{"scrubbed tail", "true",
			`OCI runtime exec failed: exec failed: cannot start: /run/containerd/io.containerd.runtime.v2.task/rodon/4f1c2d3e4f1c2d3e4f1c2d3e4f1c2d3e/log.json: unknown`,
			api.CauseStartFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := errors.New(tc.raw)
			err := startFailure(tc.cmd, raw)
			cause, reason := classify(err)
			if cause != tc.cause {
				t.Errorf("cause = %q, want %q", cause, tc.cause)
			}
			if !strings.Contains(reason, fmt.Sprintf("%q", tc.cmd)) {
				t.Errorf("reason = %q, want it to name the command %q", reason, tc.cmd)
			}
			for _, leak := range []string{"OCI", "oci runtime", "runc", "runsc", "/run/", "container", "unknown", "$PATH"} {
				if strings.Contains(reason, leak) {
					t.Errorf("reason = %q holds the runtime's %q", reason, leak)
				}
			}
			if !errors.Is(err, ErrStartFailed) || !errors.Is(err, raw) {
				t.Errorf("startFailure() = %v, want it to wrap ErrStartFailed and the runtime's error", err)
			}
		})
	}
}

// TestClassify: errors classified where they happened keep their cause and
// sentence; the node's own errors say so without their text.
func TestClassify(t *testing.T) {
	raw := errors.New("dial unix /run/containerd/containerd.sock: connection refused")
	for _, tc := range []struct {
		name  string
		err   error
		cause string
		want  string // in the reason
	}{
		{"image", failure(api.CauseImageNotFound, `image "rodon.local/nope:latest" is not on the node`, ErrNoImage), api.CauseImageNotFound, "nope"},
		{"invalid", fmt.Errorf("%w: pids 201 exceeds this node's maximum", errInvalid), api.CauseInvalidStep, "pids 201"},
		{"low disk", fmt.Errorf("%w: 1MiB free in /var/lib/rodon", ErrLowDisk), api.CauseLowDisk, "disk"},
		{"sandbox", sandboxFailure(fmt.Errorf("create sandbox: %w", raw)), api.CauseSandboxFailed, "sandbox"},
		{"sandbox keeps a cause", sandboxFailure(fmt.Errorf("%w: x", ErrWorkspaceTooLarge)), api.CauseWorkspaceTooLarge, "workspace"},
		{"node", fmt.Errorf("create output log: %w", raw), api.CauseNodeError, "node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cause, reason := classify(tc.err)
			if cause != tc.cause || !strings.Contains(reason, tc.want) || strings.Contains(reason, "/var/lib") || strings.Contains(reason, "containerd") {
				t.Errorf("classify(%v) = %q, %q; want %q and a sentence with %q and no host detail", tc.err, cause, reason, tc.cause, tc.want)
			}
		})
	}
}
