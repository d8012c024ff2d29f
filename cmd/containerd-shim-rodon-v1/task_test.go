package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	task "github.com/containerd/containerd/api/runtime/task/v2"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/v2/pkg/protobuf/types"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"gvisor.dev/gvisor/pkg/shim/v1/extension"
)

// fakeService serves containers the way gVisor's task service does for
// what taskService uses: Shutdown replies (nil, nil) while it serves a
// container and otherwise "exits".
type fakeService struct {
	extension.TaskServiceExt

	mu         sync.Mutex
	containers map[string]tasktypes.Status
	deleteErr  error
	logTo      string
	calls      []string
	exited     bool
}

func (f *fakeService) record(c string) {
	f.calls = append(f.calls, c)
}

func (f *fakeService) State(_ context.Context, r *task.StateRequest) (*task.StateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.containers[r.ID]
	if !ok {
		return nil, errgrpc.ToGRPCf(errdefs.ErrNotFound, "container not created")
	}
	return &task.StateResponse{ID: r.ID, Status: st}, nil
}

func (f *fakeService) Kill(_ context.Context, r *task.KillRequest) (*types.Empty, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("kill " + r.ID)
	if _, ok := f.containers[r.ID]; ok {
		f.containers[r.ID] = tasktypes.Status_STOPPED
	}
	return &types.Empty{}, nil
}

func (f *fakeService) Delete(_ context.Context, r *task.DeleteRequest) (*task.DeleteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("delete " + r.ID)
	if f.logTo != "" {
		// As runsc, run with --log in the bundle, does.
		os.MkdirAll(f.logTo, 0o755)
		os.WriteFile(filepath.Join(f.logTo, "log.json"), []byte("{}"), 0o644)
	}
	if f.deleteErr != nil {
		return nil, f.deleteErr
	}
	delete(f.containers, r.ID)
	return &task.DeleteResponse{}, nil
}

func (f *fakeService) Shutdown(context.Context, *task.ShutdownRequest) (*types.Empty, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("shutdown")
	if len(f.containers) > 0 {
		return nil, nil
	}
	f.exited = true
	return &types.Empty{}, nil
}

func newFake(t *testing.T, ids ...string) (*fakeService, *taskService, string) {
	f := &fakeService{containers: map[string]tasktypes.Status{}}
	bundles := t.TempDir()
	for _, id := range ids {
		f.containers[id] = tasktypes.Status_RUNNING
		if err := os.Mkdir(filepath.Join(bundles, id), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bundles, id, "config.json"), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := &taskService{TaskServiceExt: f, bundles: bundles, bundleWait: 300 * time.Millisecond,
		exit: func() { f.mu.Lock(); f.record("exit"); f.exited = true; f.mu.Unlock() }}
	return f, s, bundles
}

// TestShutdownReply: a Shutdown the shim declines (it serves a container)
// is answered with a message, not nil.
func TestShutdownReply(t *testing.T) {
	_, s, _ := newFake(t, "c1")
	s.bundles = "" // no reaping here
	resp, err := s.Shutdown(t.Context(), &task.ShutdownRequest{ID: "c1"})
	if err != nil || resp == nil {
		t.Fatalf("Shutdown() = %v, %v; want an empty message", resp, err)
	}
}

// TestReapForgotten: containerd gave the task up (its bundle is gone)
// while the shim serves its container: the shim kills and deletes it and
// shuts down.
func TestReapForgotten(t *testing.T) {
	f, s, bundles := newFake(t, "c1")
	if err := os.RemoveAll(filepath.Join(bundles, "c1")); err != nil {
		t.Fatal(err)
	}
	f.logTo = filepath.Join(bundles, "c1")
	// runsc, run with --log in the bundle, made the directory again.
	if err := os.Mkdir(f.logTo, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(bundles, "kept"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundles, "kept", "log.json"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s.reapForgotten(t.Context(), "c1")
	if _, err := os.Stat(f.logTo); !os.IsNotExist(err) {
		t.Errorf("the bundle directory runsc's log made again is still there (stat: %v)", err)
	}
	if _, err := os.Stat(filepath.Join(bundles, "kept")); err != nil {
		t.Errorf("another task's bundle: %v", err)
	}
	if !f.exited || len(f.containers) != 0 {
		t.Errorf("after the bundle went: exited %v, containers %v, calls %q; want the container deleted and the shim gone", f.exited, f.containers, f.calls)
	}
	if want := []string{"kill c1", "delete c1", "shutdown"}; !slices.Equal(f.calls, want) {
		t.Errorf("calls %q, want %q", f.calls, want)
	}
}

// TestReapKeepsKnownTask: a task whose bundle containerd keeps is left
// alone.
func TestReapKeepsKnownTask(t *testing.T) {
	f, s, _ := newFake(t, "c1")
	start := time.Now()
	s.reapForgotten(t.Context(), "c1")
	if f.exited || len(f.calls) != 0 || len(f.containers) != 1 {
		t.Errorf("bundle kept: exited %v, calls %q; want nothing done", f.exited, f.calls)
	}
	if d := time.Since(start); d < s.bundleWait {
		t.Errorf("gave up watching after %v, before bundleWait %v", d, s.bundleWait)
	}
}

// TestReapOtherContainers: a shim that stays for another container's sake
// keeps serving it when containerd removes a deleted container's bundle.
func TestReapOtherContainers(t *testing.T) {
	f, s, bundles := newFake(t, "other")
	if err := os.Mkdir(filepath.Join(bundles, "gone"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(bundles, "gone")); err != nil {
		t.Fatal(err)
	}
	s.reapForgotten(t.Context(), "gone")
	if f.exited || len(f.calls) != 0 || len(f.containers) != 1 {
		t.Errorf("exited %v, calls %q, containers %v; want the other container served", f.exited, f.calls, f.containers)
	}
}

// TestReapUndeletable: a forgotten container that cannot be deleted does
// not keep the shim running for ever.
func TestReapUndeletable(t *testing.T) {
	f, s, bundles := newFake(t, "c1")
	f.deleteErr = errors.New("runsc delete: boom")
	if err := os.RemoveAll(filepath.Join(bundles, "c1")); err != nil {
		t.Fatal(err)
	}
	s.reapForgotten(t.Context(), "c1")
	if !f.exited {
		t.Errorf("calls %q; want the shim to exit", f.calls)
	}
}
