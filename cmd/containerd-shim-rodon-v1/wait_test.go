package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runc "github.com/containerd/go-runc"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/unet"
	"gvisor.dev/gvisor/pkg/urpc"
)

func TestWaitArgs(t *testing.T) {
	for _, tc := range []struct {
		args     string
		root, id string
	}{
		{"runsc --root=/run/r --log=/b/log.json --log-format=json wait c1", "/run/r", "c1"},
		{"runsc --root=/run/r --platform=systrap wait c-1.x", "/run/r", "c-1.x"},
		{"/opt/rodon/bin/runsc -root=/run/r wait c1", "/run/r", "c1"},
		// Not answered in the shim: no root, other waits, other commands,
		// flags whose value may follow, ids runsc would refuse.
		{"runsc wait c1", "", ""},
		{"runsc --root=/run/r wait --pid=4 c1", "", ""},
		{"runsc --root=/run/r wait --checkpoint c1", "", ""},
		{"runsc --root=/run/r wait c1 c2", "", ""},
		{"runsc --root=/run/r wait", "", ""},
		{"runsc --root=/run/r state c1", "", ""},
		{"runsc --root /run/r wait c1", "", ""},
		{"runsc --debug wait c1", "", ""},
		{"runsc --root=/run/r wait c*", "", ""},
		{"runsc --root=/run/r wait ../c1", "", ""},
	} {
		root, id, ok := waitArgs(strings.Fields(tc.args))
		if ok != (tc.id != "") || root != tc.root || id != tc.id {
			t.Errorf("waitArgs(%q) = %q, %q, %v; want %q, %q", tc.args, root, id, ok, tc.root, tc.id)
		}
	}
}

// containerManager stands in for a sandbox's control server
// (runsc/boot's containerManager): Wait answers when told to.
type containerManager struct {
	waits   chan string
	answers chan unix.WaitStatus
}

func (cm *containerManager) Wait(cid *string, ws *unix.WaitStatus) error {
	cm.waits <- *cid
	s, ok := <-cm.answers
	if !ok {
		return errors.New("control server stopped")
	}
	*ws = s
	return nil
}

// fakeSandbox is a runsc root directory with one container's state, a
// control server and a process standing for the sandbox.
type fakeSandbox struct {
	root    string
	cm      *containerManager
	process *exec.Cmd
}

// newFakeSandbox makes container id of sandbox sandboxID, whose control
// server serves fs.cm.
func newFakeSandbox(t *testing.T, sandboxID, id string) *fakeSandbox {
	cm := &containerManager{waits: make(chan string, 1), answers: make(chan unix.WaitStatus)}
	fs := newFakeSandboxServing(t, sandboxID, id, cm)
	fs.cm = cm
	return fs
}

// otherManager is a control server of another protocol: it has no
// containerManager.Wait.
type otherManager struct{}

func (otherManager) Ping(a *string, b *string) error { return nil }

// newFakeSandboxServing makes container id of sandbox sandboxID, whose
// control server serves recv.
func newFakeSandboxServing(t *testing.T, sandboxID, id string, recv any) *fakeSandbox {
	t.Helper()
	fs := &fakeSandbox{root: t.TempDir()}
	fs.process = exec.Command("sleep", "60")
	if err := fs.process.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.process.Process.Kill(); fs.process.Wait() })

	sock := filepath.Join(fs.root, "runsc-"+sandboxID+".sock")
	ss, err := unet.BindAndListen(sock, false)
	if err != nil {
		t.Fatal(err)
	}
	srv := urpc.NewServer()
	srv.Register(recv)
	go func() {
		for {
			s, err := ss.Accept()
			if err != nil {
				return
			}
			srv.StartHandling(s)
		}
	}()
	t.Cleanup(func() { ss.Close() })

	state := map[string]any{
		"id":     id,
		"status": "running",
		"sandbox": map[string]any{
			"id":                sandboxID,
			"pid":               fs.process.Process.Pid,
			"controlSocketPath": sock,
		},
	}
	data, err := json.Marshal(state)
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(fs.root, id+"_sandbox:"+sandboxID)
	if err := os.WriteFile(base+".state", data, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(base+".lock", nil, 0o640); err != nil {
		t.Fatal(err)
	}
	return fs
}

// stop ends the process standing for the sandbox.
func (fs *fakeSandbox) stop() {
	fs.process.Process.Kill()
	fs.process.Wait()
}

// processMonitor records what reaches the monitor behind waitMonitor.
type processMonitor struct {
	started []*exec.Cmd
}

func (p *processMonitor) Start(cmd *exec.Cmd) (chan runc.Exit, error) {
	p.started = append(p.started, cmd)
	ch := make(chan runc.Exit, 1)
	ch <- runc.Exit{Status: 7}
	return ch, nil
}

func (p *processMonitor) Wait(cmd *exec.Cmd, ch chan runc.Exit) (int, error) {
	return (<-ch).Status, nil
}

// startWait starts `runsc wait id` through m and returns its exit status
// when it ends.
func startWait(t *testing.T, m *waitMonitor, root, id string) (*exec.Cmd, *bytes.Buffer, <-chan int) {
	t.Helper()
	cmd := exec.Command("runsc", "--root="+root, "--log=/nonexistent/log.json", "--log-format=json", "wait", id)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	ec, err := m.Start(cmd)
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	done := make(chan int, 1)
	go func() {
		status, err := m.Wait(cmd, ec)
		if err != nil {
			t.Errorf("Wait() = %v", err)
		}
		done <- status
	}()
	return cmd, &out, done
}

func expectNot(t *testing.T, done <-chan int, d time.Duration, why string) {
	t.Helper()
	select {
	case s := <-done:
		t.Fatalf("the wait ended (status %d) %s", s, why)
	case <-time.After(d):
	}
}

func expect(t *testing.T, done <-chan int) int {
	t.Helper()
	select {
	case s := <-done:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end within 10s")
		return 0
	}
}

// TestWaitInShim: `runsc wait` of a root container is answered in the
// shim, with no process: after the control server's answer and after the
// sandbox process has stopped, with runsc's output.
func TestWaitInShim(t *testing.T) {
	for _, tc := range []struct {
		name string
		ws   unix.WaitStatus
		want int
	}{
		{"exit 3", unix.WaitStatus(3 << 8), 3},
		{"killed", unix.WaitStatus(unix.SIGKILL), 128 + 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakeSandbox(t, "sb1", "sb1")
			next := &processMonitor{}
			m := newWaitMonitor(next)
			cmd, out, done := startWait(t, m, fs.root, "sb1")
			if len(next.started) != 0 || cmd.Process != nil {
				t.Fatalf("the wait ran as a process (%v)", next.started)
			}
			if got := <-fs.cm.waits; got != "sb1" {
				t.Fatalf("control server asked to wait for %q, want sb1", got)
			}
			expectNot(t, done, 100*time.Millisecond, "before the control server answered")
			fs.cm.answers <- tc.ws
			expectNot(t, done, 200*time.Millisecond, "while the sandbox process runs")
			fs.stop()
			if s := expect(t, done); s != 0 {
				t.Fatalf("status %d (output %q), want 0", s, out)
			}
			var res struct {
				ID         string `json:"id"`
				ExitStatus *int   `json:"exitStatus"`
			}
			if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.ID != "sb1" || res.ExitStatus == nil || *res.ExitStatus != tc.want {
				t.Fatalf("output %q (%v); want runsc wait's {\"id\":\"sb1\",\"exitStatus\":%d}", out, err, tc.want)
			}
			if len(m.inShim) != 0 {
				t.Fatalf("%d waits still recorded", len(m.inShim))
			}
		})
	}
}

// TestWaitSubcontainer: a container that is not its sandbox's root ends
// with the control server's answer; the sandbox goes on.
func TestWaitSubcontainer(t *testing.T) {
	fs := newFakeSandbox(t, "sb1", "c2")
	m := newWaitMonitor(&processMonitor{})
	_, out, done := startWait(t, m, fs.root, "c2")
	<-fs.cm.waits
	fs.cm.answers <- unix.WaitStatus(0)
	if s := expect(t, done); s != 0 || strings.TrimSpace(out.String()) != `{"id":"c2","exitStatus":0}` {
		t.Fatalf("status %d, output %q", s, out)
	}
}

// TestWaitControlServerGone: a sandbox whose control server goes away
// without answering has no exit status to give (only the sandbox
// process's parent learns it): the wait fails, as runsc's does, once the
// sandbox process has stopped.
func TestWaitControlServerGone(t *testing.T) {
	fs := newFakeSandbox(t, "sb1", "sb1")
	m := newWaitMonitor(&processMonitor{})
	_, out, done := startWait(t, m, fs.root, "sb1")
	<-fs.cm.waits
	close(fs.cm.answers)
	expectNot(t, done, 200*time.Millisecond, "while the sandbox process runs")
	fs.stop()
	if s := expect(t, done); s != waitFailed || !strings.Contains(out.String(), "exit status is unavailable") {
		t.Fatalf("status %d, output %q; want %d and the reason", s, out, waitFailed)
	}
}

// TestWaitHandedOver: a control server that fails the wait while the
// sandbox process runs on (a runsc whose protocol the shim does not
// speak) leaves the wait to runsc wait, which then answers alone.
func TestWaitHandedOver(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T) *fakeSandbox
		id   string
	}{
		{"no such method", func(t *testing.T) *fakeSandbox { return newFakeSandboxServing(t, "sb1", "sb1", otherManager{}) }, "sb1"},
		{"root container, server failed", func(t *testing.T) *fakeSandbox {
			fs := newFakeSandbox(t, "sb1", "sb1")
			close(fs.cm.answers)
			return fs
		}, "sb1"},
		{"sub-container, server failed", func(t *testing.T) *fakeSandbox {
			fs := newFakeSandbox(t, "sb1", "c2")
			close(fs.cm.answers)
			return fs
		}, "c2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := tc.make(t)
			next := &processMonitor{}
			m := newWaitMonitor(next)
			cmd, out, done := startWait(t, m, fs.root, tc.id)
			if s := expect(t, done); s != 7 || len(next.started) != 1 || next.started[0] != cmd {
				t.Fatalf("status %d after %d starts; want runsc wait run by the next monitor (7)", s, len(next.started))
			}
			if out.Len() != 0 {
				t.Fatalf("the shim wrote %q before handing the wait over", out)
			}
		})
	}
}

// TestWaitStopBound: the wait for the sandbox process to stop is bounded.
func TestWaitStopBound(t *testing.T) {
	fs := newFakeSandbox(t, "sb1", "sb1")
	m := newWaitMonitor(&processMonitor{})
	m.stopWait = 300 * time.Millisecond
	_, out, done := startWait(t, m, fs.root, "sb1")
	<-fs.cm.waits
	fs.cm.answers <- 0
	if s := expect(t, done); s != waitFailed || !strings.Contains(out.String(), "did not stop within") {
		t.Fatalf("status %d, output %q", s, out)
	}
}

// TestWaitLeftToRunsc: a wait the shim cannot begin, and every other
// command, runs as before.
func TestWaitLeftToRunsc(t *testing.T) {
	fs := newFakeSandbox(t, "sb1", "sb1")
	gone := newFakeSandbox(t, "sb2", "sb2")
	gone.stop()
	noSocket := newFakeSandbox(t, "sb3", "sb3")
	os.Remove(filepath.Join(noSocket.root, "runsc-sb3.sock"))
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"other command", []string{"runsc", "--root=" + fs.root, "state", "sb1"}},
		{"wait for a pid", []string{"runsc", "--root=" + fs.root, "wait", "--pid=3", "sb1"}},
		{"no state file", []string{"runsc", "--root=" + fs.root, "wait", "sb9"}},
		{"sandbox process gone", []string{"runsc", "--root=" + gone.root, "wait", "sb2"}},
		{"no control socket", []string{"runsc", "--root=" + noSocket.root, "wait", "sb3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := &processMonitor{}
			m := newWaitMonitor(next)
			cmd := exec.Command(tc.args[0], tc.args[1:]...)
			ec, err := m.Start(cmd)
			if err != nil {
				t.Fatal(err)
			}
			if s, err := m.Wait(cmd, ec); s != 7 || err != nil || len(next.started) != 1 || next.started[0] != cmd {
				t.Fatalf("Wait() = %d, %v after %d starts; want the command run by the next monitor (7)", s, err, len(next.started))
			}
		})
	}
	select {
	case id := <-fs.cm.waits:
		t.Fatalf("the control server was asked to wait for %q", id)
	default:
	}
}

// TestControlSocketLongPath: a control socket whose path is too long for a
// socket address is still reached.
func TestControlSocketLongPath(t *testing.T) {
	dir := t.TempDir()
	for len(dir) < 120 {
		dir = filepath.Join(dir, strings.Repeat("d", 30))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Bind through a short name, as runsc's does, then find it by the long one.
	short := filepath.Join(t.TempDir(), "s.sock")
	ss, err := unet.BindAndListen(short, false)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	long := filepath.Join(dir, "runsc-sb1.sock")
	if err := os.Rename(short, long); err != nil {
		t.Fatal(err)
	}
	go func() {
		if s, err := ss.Accept(); err == nil {
			s.Close()
		}
	}()
	c, err := connect(long)
	if err != nil {
		t.Fatalf("connect(%d-byte path) = %v", len(long), err)
	}
	c.Close()
	if _, err := connect(filepath.Join(dir, "missing.sock")); err == nil {
		t.Fatal("connect to a missing socket succeeded")
	}
}
