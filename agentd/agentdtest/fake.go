// Package agentdtest provides a test double of agentd: a node agent that
// registers and accepts assignments like the real one but runs no
// container, reporting each step as started and exited at once. It is for
// benchmarks and tests of the scheduler, never for production.
package agentdtest

import (
	"context"
	"fmt"
	"maps"
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
	// SingleReports sends each report to its own route; by default the
	// agent sends them together (POST /v1/agent/reports): while one
	// request is in flight, the next reports gather for the next.
	SingleReports bool

	// reports queues the reports for the batch sender (reportLoop).
	reports chan queuedReport

	mu sync.Mutex
	// starts counts the attempts the agent started, by step and attempt.
	starts map[cluster.StepAttempt]int
	// Ran counts the steps the agent reported exited, and exited holds
	// them.
	Ran    int
	exited map[cluster.StepID]bool
}

// Starts returns how many times the agent started each attempt it was
// assigned: a scheduler that assigns an attempt once shows 1 for each.
func (a *FakeAgent) Starts() map[cluster.StepAttempt]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.starts)
}

// Exited returns how many steps the agent reported exited (Ran).
func (a *FakeAgent) Exited() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.Ran
}

// HasExited reports whether the agent reported step id exited (and the
// report was acknowledged).
func (a *FakeAgent) HasExited(id cluster.StepID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.exited[id]
}

// Run registers the node and serves its assignments until ctx ends.
func (a *FakeAgent) Run(ctx context.Context) error {
	a.mu.Lock()
	a.starts = map[cluster.StepAttempt]int{}
	a.exited = map[cluster.StepID]bool{}
	a.mu.Unlock()
	_, err := a.Client.Register(ctx, cluster.RegisterNode{
		Node: a.Node, Address: netip.MustParseAddrPort("127.0.0.1:1"), Capacity: a.Capacity,
		Health: cluster.Health{State: cluster.NodeReady}, MaxStarting: a.MaxStarting,
	})
	if err != nil {
		return fmt.Errorf("register %s: %w", a.Node, err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	if !a.SingleReports {
		a.reports = make(chan queuedReport, 1024)
		wg.Go(func() { a.reportLoop(ctx) })
	}
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
		// Only the changed steps: the agent needs no list of the live
		// ones, as it keeps every attempt it started (starts).
		as, err := a.Client.AssignmentChanges(ctx, a.Node, index, 10*time.Second)
		if err != nil {
			continue
		}
		index = as.Index
		for _, st := range as.Steps {
			if st.State != cluster.StatePlaced || a.seen(cluster.StepAttempt{Step: st.ID, Attempt: st.Attempts}) {
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

// seen reports whether the agent already started attempt k, and counts
// a start of it if not. An assignment lists a placed attempt until the
// agent reports it, so only the first sighting starts it.
func (a *FakeAgent) seen(k cluster.StepAttempt) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.starts[k] > 0 {
		return true
	}
	a.starts[k]++
	return false
}

func (a *FakeAgent) finish(ctx context.Context, st cluster.Step) {
	now := time.Now().UTC()
	phase := cluster.StepPhase{Step: st.ID, Node: a.Node, Attempt: st.Attempts, State: cluster.StateRunning,
		Phases: cluster.Phases{Created: now, Started: now}}
	rec := cluster.ExitRecord{Step: st.ID, State: cluster.StateExited, TerminatedBy: cluster.ByExit,
		Phases: cluster.Phases{Created: now, Started: now, Exited: time.Now().UTC()}}
	exit := cluster.StepExit{Node: a.Node, Attempt: st.Attempts, Record: rec}
	var err error
	if a.SingleReports {
		a.Client.ReportPhase(ctx, phase)
		err = a.Client.ReportExit(ctx, exit)
	} else {
		a.report(ctx, cluster.Report{Kind: cluster.ReportPhase, Phase: &phase})
		err = a.report(ctx, cluster.Report{Kind: cluster.ReportExit, Exit: &exit})
	}
	if err == nil {
		a.mu.Lock()
		a.Ran++
		a.exited[st.ID] = true
		a.mu.Unlock()
	}
}

// queuedReport is a report waiting for the batch sender, and where its
// result goes.
type queuedReport struct {
	rep  cluster.Report
	done chan error
}

// report queues rep for the next batch and waits for its result.
func (a *FakeAgent) report(ctx context.Context, rep cluster.Report) error {
	q := queuedReport{rep: rep, done: make(chan error, 1)}
	select {
	case a.reports <- q:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-q.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reportLoop sends the queued reports together, one request at a time,
// each with whatever queued while the previous was in flight (at most
// cluster.MaxReports), in queue order, until ctx ends. A request that
// fails as a whole is sent again (every report may be repeated).
func (a *FakeAgent) reportLoop(ctx context.Context) {
	for {
		var batch []queuedReport
		select {
		case q := <-a.reports:
			batch = append(batch, q)
		case <-ctx.Done():
			return
		}
	more:
		for len(batch) < cluster.MaxReports {
			select {
			case q := <-a.reports:
				batch = append(batch, q)
			default:
				break more
			}
		}
		req := cluster.Reports{Node: a.Node, Reports: make([]cluster.Report, len(batch))}
		for i, q := range batch {
			req.Reports[i] = q.rep
		}
		for {
			res, err := a.Client.Reports(ctx, req)
			if err == nil && len(res.Results) != len(batch) {
				err = fmt.Errorf("%d reports answered %d results", len(batch), len(res.Results))
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				time.Sleep(10 * time.Millisecond)
				continue
			}
			for i, q := range batch {
				if e := res.Results[i].Error; e != nil {
					q.done <- fmt.Errorf("%s report of step refused: %s (%d %s)", q.rep.Kind, e.Message, e.Status, e.Code)
					continue
				}
				q.done <- nil
			}
			break
		}
	}
}
