package agentd

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/errdefs"
	"github.com/containerd/ttrpc"

	"github.com/rodon-compute/rodon/internal/testenv"
)

// TestDestroyAfterInterruptedDelete: an agent killed inside containerd's
// task delete (CI, TestWorkspaceRun) leaves a shim that has dropped its
// container while containerd still keeps its record of the task; the
// client no longer finds the task. Destroy must still end that shim and
// its bundle (newTestRuntime checks no shim is left).
func TestDestroyAfterInterruptedDelete(t *testing.T) {
	rt := newTestRuntime(t)
	ctx := rt.nsCtx(t.Context())
	sb, err := rt.Create(ctx, newStep(t, "true"))
	if err != nil {
		t.Fatalf("Create() = %v", err)
	}
	// What the interrupted delete did: the pod was killed, and the shim
	// was asked to delete its container; containerd heard no answer.
	exit, err := sb.task.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.task.Kill(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exit:
	case <-time.After(30 * time.Second):
		t.Fatal("pod did not exit within 30s of SIGKILL")
	}
	bundle := testenv.TaskBundle(rt.cfg.Namespace, sb.id)
	deleteInShim(t, bundle, sb.id)
	if _, err := sb.container.Task(ctx, nil); !errdefs.IsNotFound(err) {
		t.Fatalf("after the shim's delete, the client's task lookup = %v; want not found (the state under test)", err)
	}
	if left := testenv.Processes("containerd-shim-rodon"); !strings.Contains(strings.Join(left, "\n"), sb.id) {
		t.Fatalf("the sandbox's shim is already gone (%q); the test shows nothing", left)
	}

	if err := sb.Destroy(ctx); err != nil {
		t.Errorf("Destroy() = %v", err)
	}
	if _, err := os.Stat(bundle); !os.IsNotExist(err) {
		t.Errorf("containerd's bundle of the task is still there (stat: %v)", err)
	}
}

// deleteInShim asks the shim of the task whose bundle is dir to delete
// container id, the way containerd does, without containerd knowing.
func deleteInShim(t *testing.T, dir, id string) {
	t.Helper()
	withShim(t, dir, func(c taskapi.TTRPCTaskService) {
		if _, err := c.Delete(t.Context(), &taskapi.DeleteRequest{ID: id}); err != nil {
			t.Fatalf("shim Delete(%s) = %v", id, err)
		}
	})
}

// TestShimExitsWhenForgotten: a shim that declined containerd's Shutdown
// (it still serves the container) and whose task bundle containerd then
// removed (containerd gave the task up: a create cut short by its
// client's death) deletes the container and exits instead of running for
// ever (cmd/containerd-shim-rodon-v1, taskService.Shutdown). The bundle is
// moved aside here, as containerd's removal starts with a rename.
func TestShimExitsWhenForgotten(t *testing.T) {
	rt := newTestRuntime(t)
	ctx := rt.nsCtx(t.Context())
	sb, err := rt.Create(ctx, newStep(t, "true"))
	if err != nil {
		t.Fatalf("Create() = %v", err)
	}
	bundle := testenv.TaskBundle(rt.cfg.Namespace, sb.id)
	pidText, err := os.ReadFile(filepath.Join(bundle, "shim.pid"))
	if err != nil {
		t.Fatal(err)
	}
	shimPid, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err != nil {
		t.Fatal(err)
	}
	withShim(t, bundle, func(c taskapi.TTRPCTaskService) {
		if _, err := c.Shutdown(t.Context(), &taskapi.ShutdownRequest{ID: sb.id}); err != nil {
			t.Fatalf("Shutdown() of a shim serving a container = %v; want it declined without an error", err)
		}
	})
	if err := syscall.Kill(shimPid, 0); err != nil {
		t.Fatalf("the shim exited at Shutdown while it served a container (%v); the test shows nothing", err)
	}
	moved := filepath.Join(filepath.Dir(bundle), "."+sb.id+".test-moved")
	if err := os.Rename(bundle, moved); err != nil {
		t.Fatal(err)
	}
	defer func() {
		syscall.Unmount(filepath.Join(moved, "rootfs"), syscall.MNT_DETACH)
		os.RemoveAll(moved)
	}()
	deadline := time.Now().Add(15 * time.Second)
	for syscall.Kill(shimPid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the shim (pid %d) still runs 15s after its bundle went", shimPid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(bundle); !os.IsNotExist(err) {
		t.Errorf("a bundle directory is back after the shim exited (stat: %v); containerd would take it for a task at its next start", err)
	}
	if left := testenv.Processes("runsc-sandbox", "runsc-gofer"); strings.Contains(strings.Join(left, "\n"), sb.id) {
		t.Errorf("the forgotten container's sandbox still runs after its shim exited: %q", left)
	}
	// containerd notices the shim gone and drops the task.
	for {
		if _, err := sb.container.Task(ctx, nil); errdefs.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd still has the task of the exited shim")
		}
		time.Sleep(50 * time.Millisecond)
	}
	syscall.Unmount(filepath.Join(moved, "rootfs"), syscall.MNT_DETACH)
	if err := sb.Destroy(ctx); err != nil {
		t.Errorf("Destroy() = %v", err)
	}
}

// withShim calls f with a task client of the shim whose task bundle is
// dir, talking to it as containerd does, without containerd.
func withShim(t *testing.T, dir string, f func(taskapi.TTRPCTaskService)) {
	t.Helper()
	addr, err := os.ReadFile(filepath.Join(dir, "address"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("unix", strings.TrimPrefix(strings.TrimSpace(string(addr)), "unix://"))
	if err != nil {
		t.Fatal(err)
	}
	client := ttrpc.NewClient(conn)
	defer client.Close()
	f(taskapi.NewTTRPCTaskClient(client))
}

// TestSandboxWaitInShim: the shim waits for a sandbox's pause itself
// (cmd/containerd-shim-rodon-v1, waitMonitor): no `runsc wait` process
// lives beside a sandbox, and the pause's exit still reaches containerd
// with its true status, when it exits as asked and when it is killed.
func TestSandboxWaitInShim(t *testing.T) {
	rt := newTestRuntime(t)
	ctx := rt.nsCtx(t.Context())
	for _, tc := range []struct {
		name   string
		killed bool
		want   uint32
	}{
		{"asked to exit", false, 0},
		{"killed", true, 128 + uint32(syscall.SIGKILL)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb, err := rt.Create(ctx, newStep(t, "true"))
			if err != nil {
				t.Fatalf("Create() = %v", err)
			}
			defer sb.Destroy(ctx)
			if left := testenv.Processes("runsc-sandbox"); !strings.Contains(strings.Join(left, "\n"), sb.id) {
				t.Fatalf("no sandbox process of %s (%q); the test shows nothing", sb.id, left)
			}
			if waits := testenv.Processes(" wait " + sb.id); len(waits) > 0 {
				t.Errorf("a process waits for the sandbox: %q", waits)
			}
			exit, err := sb.task.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if tc.killed {
				err = sb.task.Kill(ctx, syscall.SIGKILL)
			} else {
				err = os.WriteFile(filepath.Join(sb.ctlDir, "exit"), nil, 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
			select {
			case st := <-exit:
				if st.Error() != nil || st.ExitCode() != tc.want {
					t.Errorf("the pause exited with %d (%v); want %d", st.ExitCode(), st.Error(), tc.want)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("no exit of the pause within 30s")
			}
		})
	}
}
