package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/lincheck"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// TestFleetSurvivesLeaderKill submits 200 steps to three scheduler members
// and two agents, each step appending one line to its own workspace, kills
// the leader with SIGKILL halfway, and checks that every step ended, that
// each ran exactly once (its workspace has one line), and that the history
// of API reads and writes is linearizable.
func TestFleetSurvivesLeaderKill(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	const steps = 200
	// The members share one local blob store (a directory every member
	// opens): the steps' workspaces outlive the leader's death.
	f := &fleet{schedArgs: []string{"--blob-store", "local://" + t.TempDir()}}
	startSchedulers(t, f, 3)
	startAgents(t, f, 2)

	hist := lincheck.NewHistory()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// One client per member, so that reads also go to followers.
	var clients []*client.Client
	for _, a := range f.httpAddrs {
		clients = append(clients, newClient(t, "https://"+a+","+f.urls()))
	}
	id := func(i int) string { return fmt.Sprintf("e2e-%03d", i) }

	var submitted atomic.Int32
	killed := make(chan string, 1)
	var wg sync.WaitGroup
	// Submitters.
	next := make(chan int)
	go func() {
		defer close(next)
		for i := 0; i < steps; i++ {
			next <- i
		}
	}()
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c := clients[w%len(clients)]
			for i := range next {
				req := api.StepRequest{ID: id(i), Image: "base", CPU: 0.1, MemoryBytes: 96 << 20,
					Args: []string{"sh", "-c", "echo ran >> /workspace/lines"}, Workspace: fmt.Sprintf("ws-%03d", i)}
				done := hist.Call(w, lincheck.Input{Kind: lincheck.Submit, Step: req.ID})
				_, err := c.SubmitStep(ctx, req)
				switch {
				case err == nil || client.IsCode(err, api.CodeConflict):
					done(lincheck.Output{OK: true})
				default:
					t.Logf("submit %s: %v (outcome unknown)", req.ID, err)
					done(lincheck.Output{Unknown: true})
				}
				if submitted.Add(1) == steps/2 {
					killed <- killLeader(t, f, clients)
				}
			}
		}(w)
	}
	// Readers, through every member, while the fleet works.
	stopReads := make(chan struct{})
	var rwg sync.WaitGroup
	for r := 0; r < 3; r++ {
		rwg.Add(1)
		go func(r int) {
			defer rwg.Done()
			c := clients[r]
			for {
				select {
				case <-stopReads:
					return
				default:
				}
				sid := id(rand.IntN(steps))
				done := hist.Call(10+r, lincheck.Input{Kind: lincheck.Read, Step: sid})
				rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
				st, err := c.Step(rctx, sid)
				rcancel()
				switch {
				case err == nil:
					done(lincheck.Output{Found: true, Rank: lincheck.Rank(st.Attempts, st.State)})
				case client.IsNotFound(err):
					done(lincheck.Output{Found: false})
				default:
					done(lincheck.Output{Unknown: true})
				}
				time.Sleep(20 * time.Millisecond)
			}
		}(r)
	}
	wg.Wait()
	leader := <-killed
	t.Logf("killed leader %s after %d submissions", leader, steps/2)

	// Every step reaches a terminal state.
	survivor := newClient(t, f.urls())
	var final []api.Step
	waitFor(t, 6*time.Minute, "every step to end", func() bool {
		all, err := survivor.Steps(ctx, client.StepFilter{})
		if err != nil {
			return false
		}
		n := 0
		for _, s := range all {
			if s.Terminal() {
				n++
			}
		}
		final = all
		return n == steps && len(all) == steps
	})
	close(stopReads)
	rwg.Wait()

	for _, s := range final {
		lines, revs := storeLines(t, survivor, s.Spec.Workspace, "lines", s.ID)
		switch {
		case s.State == "exited" && (s.ExitCode == nil || *s.ExitCode != 0):
			t.Errorf("step %s exited with %v: %+v", s.ID, s.ExitCode, s)
		case s.State == "exited" && (lines != 1 || revs != 1 || s.Attempts != 1):
			t.Errorf("step %s exited but its workspace has %d lines in %d revisions by it after %d attempts, want exactly 1 of each", s.ID, lines, revs, s.Attempts)
		case s.State != "exited":
			t.Errorf("step %s ended %s (%s), want exited", s.ID, s.State, s.Reason)
		}
	}
	t.Logf("checking %d recorded API operations for linearizability", hist.Len())
	if hist.Len() < steps*2 {
		t.Errorf("only %d operations recorded, want at least %d", hist.Len(), steps*2)
	}
	if err := hist.Check(2 * time.Minute); err != nil {
		t.Errorf("%d operations: %v", hist.Len(), err)
	}
	for _, a := range f.agents {
		a.stop(30 * time.Second)
	}
}

// killLeader SIGKILLs the current leader and returns its id.
func killLeader(t *testing.T, f *fleet, clients []*client.Client) string {
	for _, c := range clients {
		ms, err := c.Members(context.Background())
		if err != nil {
			continue
		}
		for _, m := range ms {
			if !m.Leader {
				continue
			}
			for i, a := range f.httpAddrs {
				if m.HTTPAddress == a || m.HTTPAddress == "https://"+a {
					f.schedulers[i].kill()
					return m.ID
				}
			}
		}
	}
	t.Errorf("no leader found to kill")
	return ""
}

var _ = errors.Is
