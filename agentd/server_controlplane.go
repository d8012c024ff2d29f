package agentd

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"time"

	"github.com/rodon-compute/rodon/netpolicy"
)

// newControlPlane builds the node's control-plane denylist from the
// scheduler URLs, the sandbox pools and the platform CIDRs of ecfg, and
// the scheduler's own list, and loads what it knows without the scheduler.
func newControlPlane(ctx context.Context, ecfg netpolicy.EgressConfig, urls []string, sched *schedulerClient, e *netpolicy.Egress, logger *slog.Logger) (*ControlPlane, error) {
	cfg := DefaultControlPlaneConfig()
	cfg.SchedulerHosts = urlHosts(urls)
	cfg.Pools = []netip.Prefix{ecfg.Net.Pool4, ecfg.Net.Pool6}
	cfg.Static = ecfg.Platform
	cfg.NodeAddrs = e.NodeAddrs()
	cp, err := NewControlPlane(cfg, sched, e, logger)
	if err != nil {
		return nil, err
	}
	if err := cp.Load(ctx); err != nil {
		return nil, err
	}
	return cp, nil
}

// readyWait bounds how long one assignments call waits for the
// control-plane list before it fails (and the agent tries again).
const readyWait = 10 * time.Second

// errControlPlaneNotLoaded is returned for assignments while the
// scheduler's control-plane list has not arrived.
var errControlPlaneNotLoaded = errors.New("the scheduler's control-plane addresses (GET /v1/agent/platform) have not loaded yet: no step starts until they do")

// controlPlaneReady returns the gate of the agent's assignments: no step
// is handed to the agent before cp fetched the scheduler's list once.
func controlPlaneReady(cp *ControlPlane) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		wctx, cancel := context.WithTimeout(ctx, readyWait)
		defer cancel()
		if err := cp.WaitFetched(wctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errControlPlaneNotLoaded
		}
		return nil
	}
}
