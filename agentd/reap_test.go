package agentd

import (
	"net"
	"os"
	"path/filepath"
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
	bundle := filepath.Join(filepath.Dir(testenv.ContainerdAddress), "io.containerd.runtime.v2.task", rt.cfg.Namespace, sb.id)
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
	if _, err := taskapi.NewTTRPCTaskClient(client).Delete(t.Context(), &taskapi.DeleteRequest{ID: id}); err != nil {
		t.Fatalf("shim Delete(%s) = %v", id, err)
	}
}
