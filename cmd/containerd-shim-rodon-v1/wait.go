package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	runc "github.com/containerd/go-runc"
	"github.com/containerd/log"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/shim/v1/runsccmd"
	"gvisor.dev/gvisor/pkg/unet"
	"gvisor.dev/gvisor/pkg/urpc"
)

// contMgrWait is the sandbox control server's method that waits for a
// container's init process (runsc/boot.ContMgrWait).
const contMgrWait = "containerManager.Wait"

// stopWait bounds the wait for a sandbox process to stop after its root
// container exited, as runsc's own (runsc/sandbox, waitForStopped).
const stopWait = 2 * time.Minute

// waitFailed is the status runsc exits with when it cannot wait (its
// util.Fatalf); gVisor's shim then reports the container's exit as an
// internal error.
const waitFailed = 128

// handOverWait is how long a sandbox process may take to stop after its
// control server failed a wait before the wait is handed over to runsc:
// the server's socket closes as the process exits, a little before the
// exit is seen.
const handOverWait = time.Second

// errHandOver marks a wait the shim leaves to runsc wait after it began.
var errHandOver = errors.New("the sandbox's control server failed the wait")

// containerID is what runsc accepts as a container id (runsc/specutils,
// ValidateID); anything else is left to runsc.
var containerID = regexp.MustCompile(`^[\w+\.-]+$`)

// waitMonitor is the process monitor gVisor's shim runs runsc through
// (runsccmd.Monitor), with one command answered in the shim instead of
// by a process of its own: `runsc wait ID`, which the shim runs for the
// init process of every container and which then sits idle for as long
// as the container lives, about 21 MB RSS per sandbox (docs/BENCHMARKS.md,
// idle memory per pooled sandbox). The shim does what runsc wait does:
// it reads the container's state file under runsc's root, asks the
// sandbox's control server to wait for the container, and for a sandbox's
// root container then waits for the sandbox process to stop; it writes
// runsc wait's answer where the command's output would have gone. A wait
// it cannot begin (not exactly one state file, no control socket, no
// connection, the sandbox process already gone) is runsc's, as before, and
// so is one whose control server fails it while the sandbox lives on (a
// runsc of another version); every other command is passed on unchanged.
type waitMonitor struct {
	next runsccmd.ProcessMonitor
	// stopWait bounds the wait for a sandbox process to stop (the
	// package's stopWait when zero).
	stopWait time.Duration

	mu sync.Mutex
	// inShim holds the exit channel of each command answered in the
	// shim, from Start until Wait.
	inShim map[*exec.Cmd]chan runc.Exit
}

func newWaitMonitor(next runsccmd.ProcessMonitor) *waitMonitor {
	return &waitMonitor{next: next, inShim: make(map[*exec.Cmd]chan runc.Exit)}
}

// Start answers cmd in the shim if it is a wait the shim can begin, and
// otherwise starts it.
func (m *waitMonitor) Start(cmd *exec.Cmd) (chan runc.Exit, error) {
	root, id, ok := waitArgs(cmd.Args)
	if !ok {
		return m.next.Start(cmd)
	}
	w, err := beginWait(root, id)
	if err != nil {
		log.L.WithError(err).WithField("id", id).Warn("waiting for the container with runsc wait")
		return m.next.Start(cmd)
	}
	w.stopWait = cmp.Or(m.stopWait, stopWait)
	ch := make(chan runc.Exit, 1)
	m.mu.Lock()
	m.inShim[cmd] = ch
	m.mu.Unlock()
	go func() {
		status, handOver := w.answer(cmd.Stdout, cmd.Stderr)
		if handOver {
			status = m.runsc(cmd)
		}
		ch <- runc.Exit{Timestamp: time.Now(), Status: status}
	}()
	return ch, nil
}

// runsc runs cmd, a wait the shim handed over, as a process and returns
// its exit status.
func (m *waitMonitor) runsc(cmd *exec.Cmd) int {
	ec, err := m.next.Start(cmd)
	if err != nil {
		fmt.Fprintf(cmp.Or[io.Writer](cmd.Stderr, io.Discard), "starting runsc wait: %v\n", err)
		return waitFailed
	}
	status, err := m.next.Wait(cmd, ec)
	if err != nil {
		return waitFailed
	}
	return status
}

// Wait returns the exit status of cmd, started by Start.
func (m *waitMonitor) Wait(cmd *exec.Cmd, ch chan runc.Exit) (int, error) {
	m.mu.Lock()
	own, ok := m.inShim[cmd]
	delete(m.inShim, cmd)
	m.mu.Unlock()
	if !ok {
		return m.next.Wait(cmd, ch)
	}
	return (<-own).Status, nil
}

// waitArgs reports whether args (a command line, runsc first) are a
// `runsc wait ID` the shim answers itself, and returns runsc's root
// directory and the container id. Global flags must be in the
// --name=value form gVisor's shim uses, one of them --root; the
// subcommand takes no flags (they select other waits: for a pid, for a
// checkpoint).
func waitArgs(args []string) (root, id string, ok bool) {
	if len(args) < 3 {
		return "", "", false
	}
	args = args[1:]
	for i, a := range args {
		if !strings.HasPrefix(a, "-") {
			if a != "wait" || len(args) != i+2 || !containerID.MatchString(args[i+1]) || root == "" {
				return "", "", false
			}
			return root, args[i+1], true
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !hasValue {
			return "", "", false
		}
		if name == "root" {
			root = value
		}
	}
	return "", "", false
}

// sandboxState is what the shim reads of runsc's state file of a
// container (runsc/container.Container, saved as JSON).
type sandboxState struct {
	ID      string `json:"id"`
	Sandbox *struct {
		ID                string `json:"id"`
		Pid               int    `json:"pid"`
		ControlSocketPath string `json:"controlSocketPath"`
	} `json:"sandbox"`
}

// waiter is a wait for one container, begun: connected to its sandbox's
// control server.
type waiter struct {
	id     string
	client *urpc.Client
	// sandbox is a pidfd of the sandbox process when id is the sandbox's
	// root container, and -1 otherwise.
	sandbox  int
	stopWait time.Duration
}

// beginWait reads the state of container id under runsc's root directory
// and connects to its sandbox's control server. The sandbox process is
// held by a pidfd from here, so that its pid cannot be taken by another
// process before the wait ends.
func beginWait(root, id string) (*waiter, error) {
	st, err := readState(root, id)
	if err != nil {
		return nil, err
	}
	sb := st.Sandbox
	if sb == nil || sb.ID == "" || sb.Pid <= 0 || st.ID != id {
		return nil, fmt.Errorf("state of container %q names no sandbox process", id)
	}
	w := &waiter{id: id, sandbox: -1}
	if sb.ID == id {
		fd, err := unix.PidfdOpen(sb.Pid, 0)
		if err != nil {
			return nil, fmt.Errorf("sandbox process %d: %w", sb.Pid, err)
		}
		w.sandbox = fd
	}
	w.client, err = connect(controlSocket(root, sb.ID, sb.ControlSocketPath))
	if err != nil {
		w.close()
		return nil, fmt.Errorf("connecting to the control server of sandbox %q: %w", sb.ID, err)
	}
	return w, nil
}

// readState reads the state file of container id, holding runsc's lock of
// that file as runsc does while it reads (runsc writes it in place).
func readState(root, id string) (*sandboxState, error) {
	states, err := filepath.Glob(filepath.Join(root, id+"_sandbox:*.state"))
	if err != nil {
		return nil, err
	}
	if len(states) != 1 {
		return nil, fmt.Errorf("%d state files of container %q in %s", len(states), id, root)
	}
	path := states[0]
	lock, err := os.Open(strings.TrimSuffix(path, ".state") + ".lock")
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_SH); err != nil {
		return nil, fmt.Errorf("locking %s: %w", lock.Name(), err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var st sandboxState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return &st, nil
}

// controlSocket returns the path of sandbox id's control socket: the one
// its state names, or where runsc makes it in its root directory when the
// state's path is gone (runsc/sandbox, getControlSocketPath).
func controlSocket(root, id, path string) string {
	if path != "" && unix.Access(path, unix.F_OK) == nil {
		return path
	}
	return filepath.Join(root, "runsc-"+id+".sock")
}

// connect connects to the control socket at path. A path too long for a
// socket address is reached through an O_PATH descriptor, as runsc does.
func connect(path string) (*urpc.Client, error) {
	if len(path) >= len(unix.RawSockaddrUnix{}.Path) {
		fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		defer unix.Close(fd)
		path = fmt.Sprintf("/proc/self/fd/%d", fd)
	}
	s, err := unet.Connect(path, false)
	if err != nil {
		return nil, err
	}
	return urpc.NewClient(s), nil
}

// answer waits and writes what runsc wait would: its JSON result to
// stdout, or an error to stderr. It returns runsc's exit status, or
// handOver when the control server failed while the sandbox lives (a
// runsc whose control protocol the shim does not speak): runsc wait is
// then to run instead, and nothing was written.
func (w *waiter) answer(stdout, stderr io.Writer) (status int, handOver bool) {
	status, err := w.wait()
	if errors.Is(err, errHandOver) {
		log.L.WithError(err).WithField("id", w.id).Warn("waiting for the container with runsc wait")
		return 0, true
	}
	if err != nil {
		fmt.Fprintf(cmp.Or[io.Writer](stderr, io.Discard), "waiting on container %q: %v\n", w.id, err)
		return waitFailed, false
	}
	res := struct {
		ID         string `json:"id"`
		ExitStatus int    `json:"exitStatus"`
	}{w.id, status}
	if err := json.NewEncoder(cmp.Or[io.Writer](stdout, io.Discard)).Encode(res); err != nil {
		return waitFailed, false
	}
	return 0, false
}

// wait waits for the container's init process and, for a root container,
// for its sandbox process to stop, and returns the init's exit status as
// runsc wait reports it. When the control server cannot answer because the
// sandbox stopped, the exit status of a root container is the sandbox
// process's, which only its parent learns, so it is an error, as in runsc
// (runsc/sandbox, Wait). When it fails while the sandbox lives on (within
// handOverWait), and for a sub-container whatever the failure, the error
// wraps errHandOver: runsc knows better.
func (w *waiter) wait() (int, error) {
	defer w.close()
	var ws unix.WaitStatus
	err := w.client.Call(contMgrWait, &w.id, &ws)
	w.client.Close()
	w.client = nil
	if err != nil && w.sandbox < 0 {
		return 0, fmt.Errorf("%w: %v", errHandOver, err)
	}
	if err != nil {
		if w.stoppedWithin(handOverWait) != nil {
			return 0, fmt.Errorf("%w: %v, and the sandbox process runs on", errHandOver, err)
		}
		return 0, fmt.Errorf("%w; the sandbox is no longer running and its exit status is unavailable", err)
	}
	if w.sandbox >= 0 {
		if err := w.stoppedWithin(w.stopWait); err != nil {
			return 0, err
		}
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ws.ExitStatus(), nil
}

// stoppedWithin waits for the sandbox process to end, for at most d.
func (w *waiter) stoppedWithin(d time.Duration) error {
	fds := []unix.PollFd{{Fd: int32(w.sandbox), Events: unix.POLLIN}}
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("the sandbox process did not stop within %v", d)
		}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("waiting for the sandbox process: %w", err)
		}
		if n > 0 {
			return nil
		}
	}
}

func (w *waiter) close() {
	if w.client != nil {
		w.client.Close()
		w.client = nil
	}
	if w.sandbox >= 0 {
		unix.Close(w.sandbox)
		w.sandbox = -1
	}
}
