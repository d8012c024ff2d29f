package main

import (
	"context"
	"time"

	task "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/v2/pkg/protobuf/types"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/containerd/v2/plugins"
	"github.com/containerd/plugin"
	"github.com/containerd/plugin/registry"
	"github.com/containerd/ttrpc"
	gvshim "gvisor.dev/gvisor/pkg/shim/v1"
	"gvisor.dev/gvisor/pkg/shim/v1/extension"
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
			return taskService{svc}, nil
		},
	})
}

// taskService is gVisor's task service with a Shutdown that never replies
// with a nil message.
type taskService struct {
	extension.TaskServiceExt
}

// Shutdown asks the shim to exit. gVisor's service exits when it serves no
// container, and otherwise stays up and returns (nil, nil), which ttrpc
// cannot marshal: the client's task delete then fails with "ttrpc: marshal
// called with nil". Reply with an empty message instead.
func (s taskService) Shutdown(ctx context.Context, r *task.ShutdownRequest) (*types.Empty, error) {
	resp, err := s.TaskServiceExt.Shutdown(ctx, r)
	if err == nil && resp == nil {
		resp = &types.Empty{}
	}
	return resp, err
}

// RegisterTTRPC serves s, not the embedded service, as the task service.
func (s taskService) RegisterTTRPC(server *ttrpc.Server) error {
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
