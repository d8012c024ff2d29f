package schedulertest

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// AgentOptions describe the node an Agent registers. Zero fields take the
// defaults given.
type AgentOptions struct {
	// CPU is the node's cores (64) and MemoryBytes its memory (256 GiB).
	CPU         float64
	MemoryBytes int64
	// Address is the agent's stream address the scheduler hands out
	// (127.0.0.1:7200); nothing dials it unless the test does.
	Address netip.AddrPort
	// MaxStarting caps the steps placed or starting on the node (1000).
	MaxStarting int
	// MaxLimits are the node's largest step limits (the cluster's).
	MaxLimits cluster.Limits
	// Labels are the node's labels.
	Labels map[string]string
	// Health is what it registers and heartbeats with (ready).
	Health cluster.Health
	// As is the agent's identity with TLS (agent/NODE).
	As string
	// Heartbeat is the period of its heartbeats (1s).
	Heartbeat time.Duration
}

// Agent plays a node agent through the real client: it registers, and
// heartbeats until StopHeartbeats or the end of the test; its methods
// report what a node's runtime would (Start, Exit, Fail, Event, ...). They
// fail the test on an error.
type Agent struct {
	// ID is the node's id.
	ID cluster.NodeID
	// Client is the agent's client of the cluster.
	Client *client.Client

	t    testing.TB
	c    *Cluster
	as   string
	stop func()
}

// Agent registers node id and heartbeats for it until the test ends.
func (c *Cluster) Agent(t testing.TB, id cluster.NodeID, opts AgentOptions) *Agent {
	t.Helper()
	if opts.CPU == 0 {
		opts.CPU = 64
	}
	if opts.MemoryBytes == 0 {
		opts.MemoryBytes = 256 << 30
	}
	if !opts.Address.IsValid() {
		opts.Address = netip.MustParseAddrPort("127.0.0.1:7200")
	}
	if opts.MaxStarting == 0 {
		opts.MaxStarting = 1000
	}
	if opts.As == "" {
		opts.As = "agent/" + string(id)
	}
	if opts.Health.State == "" {
		opts.Health.State = cluster.NodeReady
	}
	if opts.Heartbeat == 0 {
		opts.Heartbeat = time.Second
	}
	cl := c.ClientAs(opts.As)
	_, err := cl.Register(t.Context(), cluster.RegisterNode{
		Node: id, Address: opts.Address, Labels: opts.Labels,
		Capacity:    cluster.Resources{CPU: opts.CPU, MemoryBytes: opts.MemoryBytes},
		Health:      opts.Health,
		MaxStarting: opts.MaxStarting, MaxLimits: opts.MaxLimits,
	})
	if err != nil {
		t.Fatalf("schedulertest: register node %s: %v", id, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(opts.Heartbeat)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			_, _ = cl.Heartbeat(ctx, cluster.Heartbeat{Node: id, Health: opts.Health})
		}
	})
	a := &Agent{ID: id, Client: cl, t: t, c: c, as: opts.As, stop: sync.OnceFunc(func() { cancel(); wg.Wait() })}
	t.Cleanup(a.stop)
	return a
}

// StopHeartbeats stops the agent's heartbeats: past the cluster's node TTL
// the leader declares the node down.
func (a *Agent) StopHeartbeats() { a.stop() }

// Assigned waits until step id is assigned to the node (placed, starting
// or running there), and returns it as the node receives it.
func (a *Agent) Assigned(id string) cluster.Step {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var index uint64
	for {
		as, err := a.Client.Assignments(ctx, a.ID, index, 5*time.Second)
		if err != nil {
			a.t.Fatalf("schedulertest: node %s waiting for step %s: %v", a.ID, id, err)
		}
		for _, s := range as.Steps {
			if s.ID == cluster.StepID(id) {
				return s
			}
		}
		index = as.Index
	}
}

// attempt is the current attempt of step id on the node.
func (a *Agent) attempt(id string) int {
	a.t.Helper()
	s, ok := a.c.State().Step(cluster.StepID(id))
	if !ok {
		a.t.Fatalf("schedulertest: step %s: not found", id)
	}
	return s.Attempts
}

// Phase reports phase times (and state, if not empty) of step id's
// current attempt.
func (a *Agent) Phase(id string, state cluster.StepState, p cluster.Phases) {
	a.t.Helper()
	err := a.Client.ReportPhase(context.Background(), cluster.StepPhase{Step: cluster.StepID(id), Node: a.ID, Attempt: a.attempt(id), State: state, Phases: p})
	if err != nil {
		a.t.Fatalf("schedulertest: report step %s %s: %v", id, state, err)
	}
}

// Start waits until step id is placed on the node, and reports it
// starting, then running.
func (a *Agent) Start(id string) {
	a.t.Helper()
	a.Assigned(id)
	now := time.Now().UTC()
	a.Phase(id, cluster.StateStarting, cluster.Phases{Created: now})
	a.Phase(id, cluster.StateRunning, cluster.Phases{Started: now})
}

// Exit reports the end of step id's process with code, cleaned up: a step
// with a cancel request ends cancelled (terminated by the user).
func (a *Agent) Exit(id string, code int) {
	a.t.Helper()
	s, _ := a.c.State().Step(cluster.StepID(id))
	rec := cluster.ExitRecord{State: cluster.StateExited, ExitCode: code, TerminatedBy: cluster.ByExit}
	if s.Cancel != nil {
		rec.State, rec.TerminatedBy = cluster.StateCancelled, cluster.ByUser
	}
	now := time.Now().UTC()
	rec.Phases = cluster.Phases{Exited: now, CleanedUp: now}
	a.ExitWith(id, rec)
}

// ExitWith reports rec as the end of step id's current attempt.
func (a *Agent) ExitWith(id string, rec cluster.ExitRecord) {
	a.t.Helper()
	rec.Step = cluster.StepID(id)
	if err := a.Client.ReportExit(context.Background(), cluster.StepExit{Node: a.ID, Attempt: a.attempt(id), Record: rec}); err != nil {
		a.t.Fatalf("schedulertest: report step %s exit: %v", id, err)
	}
}

// Fail reports that step id could not be started, for reason.
func (a *Agent) Fail(id, reason string) {
	a.t.Helper()
	now := time.Now().UTC()
	a.ExitWith(id, cluster.ExitRecord{State: cluster.StateFailed, TerminatedBy: cluster.ByPlatform, Reason: reason,
		Phases: cluster.Phases{Exited: now, CleanedUp: now}})
}

// ConfirmCancel reports the process of cancelled step id gone.
func (a *Agent) ConfirmCancel(id string) {
	a.t.Helper()
	err := a.Client.ConfirmCancel(context.Background(), cluster.ConfirmCancel{Step: cluster.StepID(id), Node: a.ID, Attempt: a.attempt(id)})
	if err != nil {
		a.t.Fatalf("schedulertest: confirm cancel of step %s: %v", id, err)
	}
}

// Event reports events of step id's current attempt.
func (a *Agent) Event(id string, events ...cluster.Event) {
	a.t.Helper()
	for i := range events {
		if events[i].Time.IsZero() {
			events[i].Time = time.Now().UTC()
		}
	}
	err := a.Client.ReportEvents(context.Background(), cluster.StepEvents{Step: cluster.StepID(id), Node: a.ID, Attempt: a.attempt(id), Events: events})
	if err != nil {
		a.t.Fatalf("schedulertest: report step %s events: %v", id, err)
	}
}

// Lose declares the node down, as the leader does when its heartbeats
// stop: its live steps become lost (idempotent ones are queued again).
// The agent's next heartbeat brings the node back.
func (a *Agent) Lose(reason string) {
	a.t.Helper()
	if _, err := a.c.Apply(context.Background(), cluster.MarkNodeLost{Node: a.ID, Reason: reason, At: a.c.clock()}); err != nil {
		a.t.Fatalf("schedulertest: mark node %s lost: %v", a.ID, err)
	}
}
