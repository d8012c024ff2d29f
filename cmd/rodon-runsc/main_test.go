package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rodon-compute/rodon/internal/testenv"
)

// TestMain runs main when the test binary is started as rodon-runsc.
func TestMain(m *testing.M) {
	if out := os.Getenv("RODON_RUNSC_TEST_PROBE"); out != "" && (filepath.Base(os.Args[0]) == "runsc" || os.Args[0] == "runsc-exec") {
		probeMembarrier(out)
		return
	}
	if os.Getenv("RODON_RUNSC_TEST_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// shimExec is how gVisor's shim (runsccmd.Runsc.Exec) calls runsc for a
// process without a terminal.
var shimExec = []string{
	"--root=/run/containerd/runsc/rodon", "--log=/b/log.json", "--log-format=json", "--debug=true",
	"exec", "--process", "/tmp/runsc-process1", "--detach", "--pid-file", "/b/e.pid",
	"--internal-pid-file", "/b/e-internal.pid", "cid",
}

func TestDetachedExecArgs(t *testing.T) {
	child, pidFile, ok := detachedExec(shimExec)
	if !ok || pidFile != "/b/e.pid" {
		t.Fatalf("shim's exec: ok %v, pid file %q", ok, pidFile)
	}
	want := slices.DeleteFunc(slices.Clone(shimExec), func(a string) bool { return a == "--detach" })
	if !slices.Equal(child, want) {
		t.Fatalf("child args %q, want %q", child, want)
	}
	if _, f, ok := detachedExec([]string{"exec", "-detach", "--pid-file=/p", "cid"}); !ok || f != "/p" {
		t.Errorf("-detach and --pid-file=: ok %v, pid file %q", ok, f)
	}
	// The flags end at the container: what follows is the command's.
	cmdArgs := []string{"exec", "--detach", "--pid-file", "/p", "cid", "date", "-d", "@0", "--detach", "--pid-file", "/other"}
	child, f, ok := detachedExec(cmdArgs)
	if want := slices.Delete(slices.Clone(cmdArgs), 1, 2); !ok || f != "/p" || !slices.Equal(child, want) {
		t.Errorf("%q: ok %v, pid file %q, child %q; want pid file /p, child %q", cmdArgs, ok, f, child, want)
	}
	for name, args := range map[string][]string{
		"not exec":             {"--root=/r", "state", "cid"},
		"no subcommand":        {"--root=/r"},
		"global flag, value":   {"--root", "/r", "exec", "--detach", "--pid-file", "/p", "cid"},
		"not detached":         {"exec", "--process", "/p.json", "--pid-file", "/p", "cid"},
		"detach=false":         {"exec", "--detach=false", "--pid-file", "/p", "cid"},
		"no pid file":          {"exec", "--detach", "cid"},
		"console socket":       {"exec", "--console-socket", "/s", "--detach", "--pid-file", "/p", "cid"},
		"console socket, =":    {"exec", "--console-socket=/s", "--detach", "--pid-file", "/p", "cid"},
		"subcommand is a path": {"--root=/r", "/exec", "--detach", "--pid-file", "/p"},
		"detach after cid":     {"exec", "--pid-file", "/p", "cid", "sh", "-c", "x", "--detach"},
		"-d is not runsc's":    {"exec", "-d", "--pid-file", "/p", "cid"},
		"unknown exec flag":    {"exec", "--cwd", "/w", "--detach", "--pid-file", "/p", "cid"},
		"no container":         {"exec", "--detach", "--pid-file", "/p"},
		"pid file, no value":   {"exec", "--detach", "--pid-file"},
	} {
		if _, _, ok := detachedExec(args); ok {
			t.Errorf("%s: %q taken as a detached exec; it is runsc's", name, args)
		}
	}
}

// fakeRunsc writes a shell script standing in for the real runsc: it
// records its arguments in dir/args, and for an exec writes its pid to the
// pid file unless told not to, sleeps, and exits with status code.
func fakeRunsc(t *testing.T, dir string, writePid bool, sleep string, code int) string {
	t.Helper()
	write := ":"
	if writePid {
		write = `echo $$ > "$pidfile.tmp" && mv "$pidfile.tmp" "$pidfile"`
	}
	script := `#!/bin/sh
echo "$*" > "` + dir + `/args"
pidfile=
prev=
for a in "$@"; do
	[ "$prev" = --pid-file ] && pidfile=$a
	prev=$a
done
[ -n "$pidfile" ] && { ` + write + `; :; }
sleep ` + sleep + `
exit ` + strconv.Itoa(code) + "\n"
	p := filepath.Join(dir, "runsc")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// runWrapper runs rodon-runsc (this test binary) with args against real.
func runWrapper(t *testing.T, real string, args ...string) (code int, took time.Duration) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "RODON_RUNSC_TEST_MAIN=1", realEnv+"="+real)
	start := time.Now()
	err := cmd.Run()
	took = time.Since(start)
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), took
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, took
}

func TestPassThrough(t *testing.T) {
	dir := t.TempDir()
	real := fakeRunsc(t, dir, false, "0", 3)
	code, _ := runWrapper(t, real, "--root=/r", "state", "cid")
	if code != 3 {
		t.Errorf("exit status %d, want the real runsc's 3", code)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "args")); strings.TrimSpace(string(b)) != "--root=/r state cid" {
		t.Errorf("real runsc got %q", b)
	}
	// An exec with a terminal is runsc's own, --detach included.
	runWrapper(t, real, "exec", "--console-socket", "/s", "--detach", "--pid-file", filepath.Join(dir, "pid"), "cid")
	if b, _ := os.ReadFile(filepath.Join(dir, "args")); !strings.Contains(string(b), "--detach") {
		t.Errorf("exec with a console: real runsc got %q, want --detach kept", b)
	}
}

// TestDetachedExitReachesShim checks the one thing the shim relies on: the
// process that execs is left to the shim, the subreaper, and its exit
// status (the step's) reaches it, also when it ends before rodon-runsc
// has seen the pid file.
func TestDetachedExitReachesShim(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("become a subreaper, as the shim is: %v", err)
	}
	for name, sleep := range map[string]string{"ends later": "0.3", "ends at once": "0"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			real := fakeRunsc(t, dir, true, sleep, 7)
			pidFile := filepath.Join(dir, "e.pid")
			code, took := runWrapper(t, real, "--root=/r", "exec", "--process", "/p.json", "--detach", "--pid-file", pidFile, "cid")
			if code != 0 {
				t.Fatalf("rodon-runsc exited %d, want 0", code)
			}
			if sleep != "0" && took >= 300*time.Millisecond {
				t.Errorf("rodon-runsc took %s: it waited for the process, not for its pid file", took)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "args")); strings.Contains(string(b), "detach") {
				t.Errorf("the process that execs got %q, with --detach", b)
			}
			b, err := os.ReadFile(pidFile)
			if err != nil {
				t.Fatal(err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			var ws unix.WaitStatus
			if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil {
				t.Fatalf("reap pid %d as the shim would: %v (rodon-runsc reaped it, or it is not ours)", pid, err)
			}
			if !ws.Exited() || ws.ExitStatus() != 7 {
				t.Fatalf("the shim saw status %v, want exit 7", ws)
			}
		})
	}
}

func TestDetachedExecFails(t *testing.T) {
	dir := t.TempDir()
	real := fakeRunsc(t, dir, false, "0", 5)
	code, _ := runWrapper(t, real, "exec", "--detach", "--pid-file", filepath.Join(dir, "e.pid"), "cid")
	if code != 5 {
		t.Fatalf("rodon-runsc exited %d, want the failed exec's 5", code)
	}
}

func TestNoRealRunsc(t *testing.T) {
	code, _ := runWrapper(t, "runsc", "state", "cid")
	if code != 127 {
		t.Fatalf("a relative %s: exit %d, want 127", realEnv, code)
	}
}

// TestErrorsGoToRunscLog: rodon-runsc's own errors go where the shim looks
// for why an exec failed (the last "error" of runsc's JSON log), not to
// the process's standard streams.
func TestErrorsGoToRunscLog(t *testing.T) {
	dir := t.TempDir()
	logFile := filepath.Join(dir, "log.json")
	code, _ := runWrapper(t, filepath.Join(dir, "missing", "runsc"), "--log="+logFile, "--log-format=json",
		"exec", "--detach", "--pid-file", filepath.Join(dir, "e.pid"), "cid")
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	var entry struct{ Level, Msg string }
	if err := json.Unmarshal(b, &entry); err != nil {
		t.Fatalf("log %q: %v", b, err)
	}
	if entry.Level != "error" || !strings.Contains(entry.Msg, "missing/runsc") {
		t.Fatalf("log entry %+v, want an error naming the runsc it could not start", entry)
	}
}

// probeMembarrier stands in for the real runsc in TestMembarrier: it
// writes to dir/<command> whether membarrier(2) answers MEMBARRIER_CMD_QUERY
// ("ok") or fails (the errno), and writes its pid to a --pid-file.
func probeMembarrier(dir string) {
	args := os.Args[1:]
	res := "ok"
	if _, _, e := unix.Syscall(unix.SYS_MEMBARRIER, 0 /* MEMBARRIER_CMD_QUERY */, 0, 0); e != 0 {
		res = e.Error()
	}
	for i, a := range args {
		if a == "--pid-file" && i+1 < len(args) {
			os.WriteFile(args[i+1], []byte(strconv.Itoa(os.Getpid())), 0o644)
		}
	}
	os.WriteFile(filepath.Join(dir, probeName(args)), []byte(res), 0o644)
}

// probeName is the command in args, also after a global flag and its value.
func probeName(args []string) string {
	if name := subcommand(args); name != "" || len(args) < 2 {
		return name
	}
	return subcommand(args[2:])
}

func TestSubcommand(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--root=/r", "--log=/l", "state", "cid"}, "state"},
		{shimExec, "exec"},
		{[]string{"create", "--bundle", "/b", "cid"}, "create"},
		{[]string{"--root", "/r", "state", "cid"}, ""}, // "/r" might be the command
		{[]string{"--root=/r"}, ""},
		{nil, ""},
	} {
		if got := subcommand(c.args); got != c.want {
			t.Errorf("subcommand(%q) = %q, want %q", c.args, got, c.want)
		}
	}
}

// TestMembarrier runs rodon-runsc against a stand-in runsc that calls
// membarrier(2): the commands that start no sentry see it fail with
// ENOSYS (runsc's init then skips its 10 ms registration), also through
// the detached exec; those that start a sandbox or gofer, and a command
// line rodon-runsc cannot read for certain, see the kernel's.
func TestMembarrier(t *testing.T) {
	// The filter goes on without no_new_privs, which needs CAP_SYS_ADMIN.
	testenv.RequireRoot(t)
	if _, _, e := unix.Syscall(unix.SYS_MEMBARRIER, 0, 0, 0); e != 0 {
		t.Skipf("this kernel has no membarrier(2): %v", e)
	}
	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "RODON_RUNSC_TEST_MAIN=1", realEnv+"="+os.Args[0], "RODON_RUNSC_TEST_PROBE="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("rodon-runsc %q: %v\n%s", args, err, out)
		}
		name := probeName(args)
		deadline := time.Now().Add(10 * time.Second)
		for {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err == nil && len(b) > 0 {
				os.Remove(filepath.Join(dir, name))
				return string(b)
			}
			if time.Now().After(deadline) {
				t.Fatalf("rodon-runsc %q: the stand-in runsc reported nothing", args)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	enosys := unix.ENOSYS.Error()
	for _, name := range []string{"state", "kill", "delete", "wait", "ps", "events"} {
		if got := run("--root=/r", "--log-format=json", name, "cid"); got != enosys {
			t.Errorf("runsc %s sees membarrier %q, want %q", name, got, enosys)
		}
	}
	if got := run("--root=/r", "exec", "--detach", "--pid-file", filepath.Join(dir, "e.pid"), "cid"); got != enosys {
		t.Errorf("detached exec sees membarrier %q, want %q", got, enosys)
	}
	for _, name := range []string{"create", "start", "run", "restore", "boot", "gofer", "checkpoint"} {
		if got := run("--root=/r", name, "cid"); got != "ok" {
			t.Errorf("runsc %s sees membarrier %q, want the kernel's", name, got)
		}
	}
	if got := run("--root", "/r", "state", "cid"); got != "ok" {
		t.Errorf("a command line read not for certain: membarrier %q, want the kernel's", got)
	}
}
