package gateway

import (
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/api"
)

func TestScrub(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"exit code 1", "exit code 1"},
		{"node worker-3 stopped answering", "node [node] stopped answering"},
		{"dial tcp 10.0.0.7:7200: connection refused", "dial tcp [address]: connection refused"},
		{"egress denied: 169.254.169.254:80, metadata, 3 packets", "egress denied: [address], metadata, 3 packets"},
		{"egress denied: [fd00::1]:443, private, 1 packet", "egress denied: [address], private, 1 packet"},
		{"egress denied: fe80::1, link_local, 2 packets", "egress denied: [address], link_local, 2 packets"},
		{"get http://agent.internal:7200/v1/x: EOF", "get [url]: EOF"},
		{"agent at agent.internal:7200 gone", "agent at [address] gone"},
		{"container 4f1c2d3e4f1c2d3e4f1c2d3e4f1c2d3e4f1c2d3e4f1c2d3e4f1c2d3e4f1c2d3e exited", "container [id] exited"},
		{"runsc create failed: io.containerd.rodon.v1 shim", "[runtime] create failed: [runtime] shim"},
		{"open /var/lib/rodon/steps/x/rootfs: no space", "open [path]: no space"},
		{"started at 12:30:45", "started at 12:30:45"},
		{"python /workspace/a.py exited 2", "python /workspace/a.py exited 2"},
	} {
		if got := Scrub(tc.in, "worker-3"); got != tc.want {
			t.Errorf("Scrub(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestScrubRuntimeError(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"runc exec",
			`OCI runtime exec failed: exec failed: unable to start container process: exec: "nope": executable file not found in $PATH: unknown`,
			`the command could not be started: "nope": executable file not found in $PATH`},
		{"old runc, quoted chain",
			`OCI runtime exec failed: exec failed: container_linux.go:349: starting container process caused "exec: "bash": executable file not found in $PATH": unknown`,
			`the command could not be started: "bash": executable file not found in $PATH`},
		{"shim task create",
			`failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: exec: "/app/run.sh": permission denied: unknown`,
			`the command could not be started: "/app/run.sh": permission denied`},
		{"in sandbox",
			`OCI runtime exec failed: executing processes for container: executing command "&{Filename: Argv:[nope] Envv:[PATH=/usr/bin]}" in sandbox: executable file not found in $PATH in sandbox: unknown`,
			`the command could not be started: executable file not found in $PATH`},
		{"node context kept",
			`step did not start: command not found in the image: OCI runtime exec failed: exec failed: unable to start container process: exec: "pyton": executable file not found in $PATH: unknown`,
			`step did not start: command not found in the image: the command could not be started: "pyton": executable file not found in $PATH`},
		{"sandbox start",
			`create sandbox: failed to create shim task: OCI runtime create failed: creating container: cannot create sandbox: cannot read client sync file: waiting for sandbox to start: EOF: unknown`,
			`create sandbox: the command could not be started: cannot read client sync file: waiting for sandbox to start: EOF`},
		{"no tail", `OCI runtime start failed: unknown`, `the command could not be started`},
		{"lower case", `oci runtime error: exec failed: exec: "sh": stat sh: no such file or directory`,
			`the command could not be started: "sh": stat sh: no such file or directory`},
		// What follows is scrubbed as any message: paths, ids, runtime names.
		{"scrubbed tail",
			`OCI runtime exec failed: exec failed: open /run/containerd/io.containerd.runtime.v2.task/rodon/4f1c2d3e4f1c2d3e4f1c2d3e4f1c2d3e4f1c2d3e4f1c2d3e4f1c2d3e4f1c2d3e/log.json: no such file or directory: unknown`,
			`the command could not be started: open [path]: no such file or directory`},
		{"no runtime error", `exit code 2`, `exit code 2`},
		{"exec in a user message", `exec: "x" is a word`, `exec: "x" is a word`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Scrub(tc.in); got != tc.want {
				t.Errorf("Scrub(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseDenied(t *testing.T) {
	for _, tc := range []struct {
		in     string
		reason string
		n      int64
		ok     bool
	}{
		{"egress denied: 169.254.169.254:80, metadata, 3 packets", "metadata", 3, true},
		{"egress denied: 10.0.0.1, private, 1 packet", "private", 1, true},
		{"egress denied: 10.0.0.1, private", "", 0, false},
		{"egress denied: 10.0.0.1, private, x packets", "", 0, false},
		{"started", "", 0, false},
	} {
		reason, n, ok := parseDenied(tc.in)
		if reason != tc.reason || n != tc.n || ok != tc.ok {
			t.Errorf("parseDenied(%q) = %q, %d, %v; want %q, %d, %v", tc.in, reason, n, ok, tc.reason, tc.n, tc.ok)
		}
	}
}

// TestStepView: the node is never shown, event messages are scrubbed and
// denied counts keep the last count per reason.
func TestStepView(t *testing.T) {
	f := newFixture(t)
	id := stepOf(f)
	f.sched.AddEvent(id, eventEgressDenied, "egress denied: 169.254.169.254:80, metadata, 1 packet")
	f.sched.AddEvent(id, eventEgressDenied, "egress denied: 10.0.0.3:22, private, 2 packets")
	f.sched.AddEvent(id, eventEgressDenied, "egress denied: 169.254.169.254:80, metadata, 5 packets")
	f.sched.AddEvent(id, "warning", "slow disk on node-secret-7")
	var v api.RunStep
	w := f.do("viewer", "GET", "/v1/steps/"+id, "", 200, &v)
	if v.Denied["metadata"] != 5 || v.Denied["private"] != 2 || len(v.Denied) != 2 {
		t.Errorf("denied = %v, want metadata 5, private 2", v.Denied)
	}
	for _, bad := range []string{"node-secret-7", "169.254.169.254", "10.0.0.3", `"node"`} {
		if strings.Contains(w.Body.String(), bad) {
			t.Errorf("step view carries %q: %s", bad, w.Body)
		}
	}
	if v.State != "running" || v.Cleanup != "pending" || v.Retry == "" {
		t.Errorf("step view = %+v, want running, cleanup pending, a retry rule", v)
	}
}
