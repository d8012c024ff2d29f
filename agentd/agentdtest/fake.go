// Package agentdtest provides a test double of agentd: a node agent that
// registers and accepts assignments like the real one but runs no
// container, reporting each step as started and exited at once. It is for
// benchmarks and tests of the scheduler, never for production.
package agentdtest

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/ticker"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// FakeAgent is a node that "runs" every step it is assigned in no time.
type FakeAgent struct {
	Node     cluster.NodeID
	Capacity cluster.Resources
	// MaxStarting is the node's start-concurrency limit.
	MaxStarting int
	Client      *client.Client

	mu   sync.Mutex
	done map[cluster.StepID]bool
	// Ran counts the steps the agent reported exited.
	Ran int
}

// Run registers the node and serves its assignments until ctx ends.
func (a *FakeAgent) Run(ctx context.Context) error {
	a.done = map[cluster.StepID]bool{}
	_, err := a.Client.Register(ctx, cluster.RegisterNode{
		Node: a.Node, Address: netip.MustParseAddrPort("127.0.0.1:1"), Capacity: a.Capacity,
		Health: cluster.Health{State: cluster.NodeReady}, MaxStarting: a.MaxStarting,
	})
	if err != nil {
		return fmt.Errorf("register %s: %w", a.Node, err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		ticker.Every(ctx, time.Second, func() bool {
			a.Client.Heartbeat(ctx, cluster.Heartbeat{Node: a.Node, Health: cluster.Health{State: cluster.NodeReady}})
			return true
		})
	}()
	var index uint64
	for ctx.Err() == nil {
		as, err := a.Client.Assignments(ctx, a.Node, index, 10*time.Second)
		if err != nil {
			continue
		}
		index = as.Index
		for _, st := range as.Steps {
			if st.State != cluster.StatePlaced || a.seen(st.ID) {
				continue
			}
			wg.Add(1)
			go func(st cluster.Step) {
				defer wg.Done()
				a.finish(ctx, st)
			}(st)
		}
	}
	return nil
}

func (a *FakeAgent) seen(id cluster.StepID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done[id] {
		return true
	}
	a.done[id] = true
	return false
}

func (a *FakeAgent) finish(ctx context.Context, st cluster.Step) {
	now := time.Now().UTC()
	a.Client.ReportPhase(ctx, cluster.StepPhase{Step: st.ID, Node: a.Node, Attempt: st.Attempts, State: cluster.StateRunning,
		Phases: cluster.Phases{Created: now, Started: now}})
	rec := cluster.ExitRecord{Step: st.ID, State: cluster.StateExited, TerminatedBy: cluster.ByExit,
		Phases: cluster.Phases{Created: now, Started: now, Exited: time.Now().UTC()}}
	if err := a.Client.ReportExit(ctx, cluster.StepExit{Node: a.Node, Attempt: st.Attempts, Record: rec}); err == nil {
		a.mu.Lock()
		a.Ran++
		a.mu.Unlock()
	}
}
