package main

import (
	"cmp"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	task "github.com/containerd/containerd/api/runtime/task/v2"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/v2/pkg/protobuf/types"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/containerd/v2/plugins"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"
	"github.com/containerd/plugin"
	"github.com/containerd/plugin/registry"
	"github.com/containerd/ttrpc"
	"golang.org/x/sys/unix"
	gvshim "gvisor.dev/gvisor/pkg/shim/v1"
	"gvisor.dev/gvisor/pkg/shim/v1/extension"
	"gvisor.dev/gvisor/pkg/shim/v1/runsccmd"
)

// shutdownWait bounds how long Shutdown waits for the shutdown callbacks.
const shutdownWait = 5 * time.Second

// init registers the shim's task service: gVisor's, wrapped by taskService,
// with a synchronous shutdown service.
// It replaces gVisor's own registration (gvisor.dev/gvisor/pkg/shim/v1/plugin),
// which must not be imported as well: both use the plugin ID "task".
func init() {
	registry.Register(&plugin.Registration{
		Type:     plugins.TTRPCPlugin,
		ID:       "task",
		Requires: []plugin.Type{plugins.EventPlugin, plugins.InternalPlugin},
		InitFn: func(ic *plugin.InitContext) (interface{}, error) {
			pp, err := ic.GetByID(plugins.EventPlugin, "publisher")
			if err != nil {
				return nil, err
			}
			ss, err := ic.GetByID(plugins.InternalPlugin, "shutdown")
			if err != nil {
				return nil, err
			}
			sd := syncShutdown{ss.(shutdown.Service)}
			svc, err := gvshim.NewShimRedirector(ic.Context, pp.(shim.Publisher), sd)
			if err != nil {
				return nil, err
			}
			// gVisor's task service set the monitor just now; it runs
			// every runsc command through it.
			runsccmd.Monitor = newWaitMonitor(runsccmd.Monitor)
			ts := &taskService{TaskServiceExt: svc, exit: func() { sd.Shutdown(); os.Exit(0) }}
			// The daemon runs in its bundle directory, beside the bundles
			// of every task of its namespace.
			if wd, err := os.Getwd(); err == nil {
				ts.bundles = filepath.Dir(wd)
			}
			return ts, nil
		},
	})
}

// taskService is gVisor's task service with a Shutdown that never replies
// with a nil message and that does not leave a shim containerd has
// forgotten running.
type taskService struct {
	extension.TaskServiceExt
	// bundles is the directory of the bundles of the namespace's tasks
	// ("" when unknown: a forgotten container is then not reaped).
	bundles string
	// exit ends the shim daemon.
	exit func()
	// bundleWait bounds how long a Shutdown that did not end the shim
	// watches for containerd to remove the task's bundle (forgetWait
	// when zero).
	bundleWait time.Duration
}

// forgetWait is how long after a Shutdown that did not end the shim it
// watches whether containerd removes the task's bundle: containerd does so
// right after the Shutdown when it gives the task up.
const forgetWait = 30 * time.Second

// Shutdown asks the shim to exit. gVisor's service exits when it serves no
// container, and otherwise stays up and returns (nil, nil), which ttrpc
// cannot marshal: the client's task delete then fails with "ttrpc: marshal
// called with nil". Reply with an empty message instead.
//
// A shim that serves the container when containerd gives the task up stays
// for ever: containerd, its create interrupted (the client went away while
// runsc created the sandbox), deletes the task before the shim has it,
// which the shim answers with "not found", then shuts the shim down, which
// the shim declines as it now serves the container, and removes the
// bundle. So a Shutdown that does not end the shim watches for the task's
// bundle to go and then deletes the container and shuts down again.
func (s *taskService) Shutdown(ctx context.Context, r *task.ShutdownRequest) (*types.Empty, error) {
	resp, err := s.TaskServiceExt.Shutdown(ctx, r)
	if err == nil && resp == nil {
		resp = &types.Empty{}
		if s.bundles != "" && r.ID != "" {
			go s.reapForgotten(context.WithoutCancel(ctx), r.ID)
		}
	}
	return resp, err
}

// reapForgotten ends container id if containerd removes its bundle (its
// config.json) within bundleWait while the shim still serves it: it kills
// the container's processes, deletes it and shuts the shim down, which then
// exits unless it serves other containers. If the container cannot be
// deleted the shim exits all the same: nothing will ever ask it again.
func (s *taskService) reapForgotten(ctx context.Context, id string) {
	wait := cmp.Or(s.bundleWait, forgetWait)
	bundle := filepath.Join(s.bundles, id)
	for deadline := time.Now().Add(wait); ; time.Sleep(wait / 300) {
		// The spec, not the directory: runsc, run with --log in the
		// bundle after containerd removed it, makes the directory again.
		if _, err := os.Stat(filepath.Join(bundle, "config.json")); errors.Is(err, fs.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			return
		}
	}
	ctx, cancel := context.WithTimeout(ctx, forgetWait)
	defer cancel()
	if _, err := s.State(ctx, &task.StateRequest{ID: id}); errdefs.IsNotFound(errgrpc.ToNative(err)) {
		return // not served here: the shim stayed for other containers
	}
	log.G(ctx).WithField("id", id).Warn("containerd removed the bundle of a container this shim still serves; deleting it")
	if _, err := s.Kill(ctx, &task.KillRequest{ID: id, Signal: uint32(unix.SIGKILL), All: true}); err != nil {
		log.G(ctx).WithError(err).WithField("id", id).Debug("kill forgotten container")
	}
	for ctx.Err() == nil {
		st, err := s.State(ctx, &task.StateRequest{ID: id})
		if err != nil || st.Status != tasktypes.Status_RUNNING {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := s.Delete(ctx, &task.DeleteRequest{ID: id}); err != nil {
		log.G(ctx).WithError(err).WithField("id", id).Warn("delete forgotten container")
	}
	removeLogOnly(bundle)
	if resp, err := s.TaskServiceExt.Shutdown(ctx, &task.ShutdownRequest{ID: id}); err != nil || resp != nil {
		return // it serves no container now (and the redirector exits)
	}
	if _, err := s.State(ctx, &task.StateRequest{ID: id}); !errdefs.IsNotFound(errgrpc.ToNative(err)) {
		log.G(ctx).WithField("id", id).Error("exiting with a forgotten container that could not be deleted")
		s.exit()
	}
}

// RegisterTTRPC serves s, not the embedded service, as the task service.
func (s *taskService) RegisterTTRPC(server *ttrpc.Server) error {
	task.RegisterTaskService(server, s)
	return nil
}

// syncShutdown is a shutdown.Service whose Shutdown returns only once the
// shutdown callbacks have run (or after shutdownWait). gVisor's task service
// calls os.Exit right after Shutdown, and the stock Shutdown runs callbacks
// in a goroutine, so the callback removing the shim's socket under
// /run/containerd/s/ did not get to run and every shim left its socket behind.
type syncShutdown struct {
	shutdown.Service
}

// Shutdown starts the shutdown and waits for its callbacks.
func (s syncShutdown) Shutdown() {
	s.Service.Shutdown()
	t := time.NewTimer(shutdownWait)
	defer t.Stop()
	select {
	case <-s.Done():
	case <-t.C:
	}
}

// removeLogOnly removes dir if it holds only runsc's log.json: runsc, told
// to log in the task's bundle, makes the directory again after containerd
// removed it, and containerd would take it for a bundle at its next start.
func removeLogOnly(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.Name() != "log.json" || !e.Type().IsRegular() {
			return
		}
	}
	os.RemoveAll(dir)
}
