// Command rodon-runsc stands in for runsc in the PATH of Rodon's shim
// (containerd-shim-rodon-v1), which finds it as "runsc" and names the real
// runsc in RODON_RUNSC.
//
// Every runsc command but one is the real runsc's: rodon-runsc replaces
// itself with it (execve), arguments unchanged. The one is how gVisor's
// shim starts a process in a running sandbox, `runsc exec --detach
// --pid-file FILE ...`. runsc's --detach starts a second runsc, which
// execs the process, writes its own pid to FILE and waits for the process;
// the first runsc waits for FILE and exits, and the shim then watches the
// second. Each runsc start-up costs 15-20 ms on these hosts, on every step
// (docs/BENCHMARKS.md, issue 14). rodon-runsc does what the first runsc
// does, without loading the container first: it starts the real runsc with
// the same arguments minus --detach (argv[0] "runsc-exec", as runsc names
// it), waits until FILE holds that process's pid, and exits 0, leaving it
// to the shim (the subreaper). It never reaps that process, not even one
// that has already exited, so that its exit status, the step's, reaches
// the shim. A process that exits before writing FILE failed to exec: its
// status is rodon-runsc's, and runsc has logged why where the shim reads it.
//
// With a console socket (a terminal) the exec is runsc's own: runsc's
// first process makes the terminal.
//
// For the commands that start no sentry (exec, state, kill, wait, delete,
// ps, events) rodon-runsc also has membarrier(2) fail with ENOSYS
// (membarrier.go): runsc's start-up otherwise waits about 10 ms in a
// membarrier registration only the sentry needs.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// realEnv names the environment variable that holds the real runsc's path.
const realEnv = "RODON_RUNSC"

// readyTimeout bounds the wait for the pid file, as runsc's own does.
const readyTimeout = 10 * time.Second

func main() {
	real := os.Getenv(realEnv)
	if real == "" || !strings.HasPrefix(real, "/") {
		fmt.Fprintf(os.Stderr, "rodon-runsc: %s must name the real runsc by its absolute path (got %q)\n", realEnv, real)
		os.Exit(127)
	}
	args := os.Args[1:]
	if noSentry[subcommand(args)] {
		if err := withoutMembarrier(); err != nil {
			// Only slower: runsc registers for membarrier as it would.
			logAt(args, "warning")("rodon-runsc: %v", err)
		}
	}
	if child, pidFile, ok := detachedExec(args); ok {
		os.Exit(execDetached(real, child, pidFile, logTo(args)))
	}
	err := unix.Exec(real, append([]string{"runsc"}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "rodon-runsc: exec %s: %v\n", real, err)
	os.Exit(127)
}

// detachedExec reports whether args are an `exec --detach` that rodon-runsc
// runs itself, and if so returns the arguments of the process that execs
// (args without --detach) and the pid file. Anything it does not recognise
// for certain is runsc's: global flags not in --name=value form (a value
// might follow), exec flags other than those gVisor's shim passes
// (--process, --detach, --pid-file, --internal-pid-file), no --pid-file, no
// container. As with runsc's flag parsing, the flags end at the container:
// what follows it is the command to exec, copied as it is.
func detachedExec(args []string) (child []string, pidFile string, ok bool) {
	cmd := -1
	for i, a := range args {
		if !strings.HasPrefix(a, "-") {
			cmd = i
			break
		}
		if !strings.Contains(a, "=") {
			return nil, "", false
		}
	}
	if cmd < 0 || args[cmd] != "exec" {
		return nil, "", false
	}
	detach, container := false, false
	child = append(child, args[:cmd+1]...)
	rest := args[cmd+1:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if !strings.HasPrefix(a, "-") {
			child = append(child, rest[i:]...)
			container = true
			break
		}
		switch name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "="); name {
		case "detach":
			if hasValue && value != "true" {
				return nil, "", false
			}
			detach = true
		case "process", "pid-file", "internal-pid-file":
			child = append(child, a)
			if !hasValue {
				if i+1 == len(rest) {
					return nil, "", false
				}
				i++
				value = rest[i]
				child = append(child, value)
			}
			if name == "pid-file" {
				pidFile = value
			}
		default:
			return nil, "", false
		}
	}
	if !detach || pidFile == "" || !container {
		return nil, "", false
	}
	return child, pidFile, true
}

// execDetached starts the real runsc with args and returns rodon-runsc's
// exit status: 0 once pidFile holds its pid; otherwise the status of the
// process that exited without writing it, or 1. Its own errors go to
// logf: its standard streams are the process's.
func execDetached(real string, args []string, pidFile string, logf func(string, ...any)) int {
	cmd := exec.Command(real, args...)
	cmd.Args[0] = "runsc-exec"
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		logf("rodon-runsc: start %s: %v", real, err)
		return 1
	}
	pid := cmd.Process.Pid
	deadline := time.Now().Add(readyTimeout)
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, 5*time.Millisecond) {
		if holdsPid(pidFile, pid) {
			return 0
		}
		exited, err := hasExited(pid)
		if err != nil {
			logf("rodon-runsc: wait for runsc exec (pid %d): %v", pid, err)
			return 1
		}
		if exited {
			// It may have written the pid file and exited since the
			// look above (a process that ends at once): then it is the
			// shim's to reap.
			if holdsPid(pidFile, pid) {
				return 0
			}
			var ws unix.WaitStatus
			_, err := unix.Wait4(pid, &ws, 0, nil)
			switch {
			case err != nil:
				logf("rodon-runsc: runsc exec (pid %d) ended without a pid file, and waiting for it failed: %v", pid, err)
			case ws.Signaled():
				logf("rodon-runsc: runsc exec (pid %d) killed by %v before it wrote the pid file", pid, ws.Signal())
			case ws.ExitStatus() != 0:
				return ws.ExitStatus() // runsc logged why
			default:
				logf("rodon-runsc: runsc exec (pid %d) exited 0 without writing the pid file %s", pid, pidFile)
			}
			return 1
		}
		if time.Now().After(deadline) {
			logf("rodon-runsc: runsc exec (pid %d) wrote no pid file to %s in %s", pid, pidFile, readyTimeout)
			_ = cmd.Process.Kill()
			return 1
		}
		time.Sleep(wait)
	}
}

// logTo returns how rodon-runsc reports an error for runsc's global flags
// in args: a line in runsc's --log file, in its --log-format (the shim
// reads the last "error" of a JSON log as the reason an exec failed), or
// standard error without a log file.
func logTo(args []string) func(string, ...any) { return logAt(args, "error") }

// logAt is logTo at level (JSON logs only); a log line of a level other
// than "error" goes nowhere without a log file, as standard error may be
// the step's.
func logAt(args []string, level string) func(string, ...any) {
	var file, format string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			break
		}
		name, value, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch name {
		case "log":
			file = value
		case "log-format":
			format = value
		}
	}
	return func(f string, v ...any) {
		msg := fmt.Sprintf(f, v...)
		line := msg + "\n"
		if format == "json" {
			b, _ := json.Marshal(struct {
				Level string    `json:"level"`
				Msg   string    `json:"msg"`
				Time  time.Time `json:"time"`
			}{level, msg, time.Now()})
			line = string(b) + "\n"
		}
		if file != "" {
			if lf, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
				_, err = lf.WriteString(line)
				if cerr := lf.Close(); err == nil && cerr == nil {
					return
				}
			}
		}
		if level == "error" {
			fmt.Fprint(os.Stderr, line)
		}
	}
}

// holdsPid reports whether file holds pid, whole.
func holdsPid(file string, pid int) bool {
	b, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	got, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return err == nil && got == pid
}

// hasExited reports whether the child pid has exited, without reaping it:
// an unreaped child that exited is a zombie.
func hasExited(pid int) (bool, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false, err
	}
	// pid (comm) state ...: comm may hold anything but ends at the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return false, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, b)
	}
	return b[i+2] == 'Z' || b[i+2] == 'X', nil
}
