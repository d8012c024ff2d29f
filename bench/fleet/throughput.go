package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rodon-compute/rodon/agentd/agentdtest"
	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/benchtls"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// clients is how many goroutines send heartbeats, and submit steps, at
// once.
const clients = 32

// tpCluster is a 3-member cluster with its fake agents, each acting with
// its own identity (agent/fake-I) through its own client.
type tpCluster struct {
	*schedCluster
	agents []*client.Client
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// tpResult is one cluster's throughput.
type tpResult struct {
	beatsPerSec, submitPerSec, stepsPerSec float64
	failed                                 int64
}

func startThroughput(c config, dir string, mode benchtls.Mode) (*tpCluster, error) {
	sc, err := startCluster(c.bin, dir, "throughput", mode, 3)
	tc := &tpCluster{schedCluster: sc, cancel: func() {}}
	if err != nil {
		return tc, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	tc.cancel = cancel
	for i := range c.agents {
		node := cluster.NodeID(fakeNode(i))
		ac, err := mode.Client(sc.urls, pki.Identity{Role: pki.RoleAgent, Name: string(node)}, client.Options{})
		if err != nil {
			return tc, err
		}
		tc.agents = append(tc.agents, ac)
		a := &agentdtest.FakeAgent{Node: node, Capacity: cluster.Resources{CPU: 1000, MemoryBytes: 1 << 42}, MaxStarting: 64, Client: ac}
		tc.wg.Go(func() { a.Run(ctx) })
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		nodes, err := sc.op.Nodes(ctx)
		if err == nil && len(nodes) == c.agents {
			return tc, nil
		}
		if time.Now().After(deadline) {
			return tc, fmt.Errorf("%s: fake agents did not register: %v", mode, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (tc *tpCluster) stop() {
	tc.cancel()
	tc.wg.Wait()
	for _, a := range tc.agents {
		a.CloseIdleConnections()
	}
	tc.schedCluster.stop()
}

// heartbeats measures the cheapest replicated write for d: heartbeats
// from clients goroutines, each for a node through that node's agent
// client.
func (tc *tpCluster) heartbeats(d time.Duration) float64 {
	var beats atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for w := range clients {
		ac, node := tc.agents[w%len(tc.agents)], cluster.NodeID(fakeNode(w%len(tc.agents)))
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := ac.Heartbeat(ctx, cluster.Heartbeat{Node: node, Health: cluster.Health{State: cluster.NodeReady}}); err == nil {
					beats.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return float64(beats.Load()) / d.Seconds()
}

// steps submits n steps from clients goroutines as the operator and waits
// until every accepted one has exited.
func (tc *tpCluster) steps(n int, r *tpResult) error {
	ctx := context.Background()
	start := time.Now()
	next := make(chan int)
	go func() {
		defer close(next)
		for i := range n {
			next <- i
		}
	}()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range clients {
		wg.Go(func() {
			for i := range next {
				if _, err := tc.op.SubmitStep(ctx, api.StepRequest{ID: fmt.Sprintf("b-%05d", i), Image: "base", CPU: 0.01, MemoryBytes: 16 << 20, Args: []string{"true"}}); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	submitted := time.Since(start)
	for {
		st, err := tc.op.Steps(ctx, client.StepFilter{State: "exited"})
		if err == nil && len(st) == n-int(failed.Load()) {
			break
		}
		if time.Since(start) > 10*time.Minute {
			return errors.New("steps did not all exit within 10 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.submitPerSec = float64(n) / submitted.Seconds()
	r.stepsPerSec = float64(n) / time.Since(start).Seconds()
	r.failed = failed.Load()
	return nil
}

// throughput starts a plaintext and a TLS cluster side by side and
// measures them in turn, in the order plaintext, TLS for heartbeats and
// TLS, plaintext for steps, so that a drift of the machine's load during
// the run weighs on both alike.
func throughput(b *strings.Builder, c config, dir string, plain, tlsMode benchtls.Mode) error {
	var pc, tc *tpCluster
	defer func() {
		for _, x := range []*tpCluster{tc, pc} {
			if x != nil {
				x.stop()
			}
		}
	}()
	var err error
	if pc, err = startThroughput(c, dir, plain); err != nil {
		return err
	}
	if tc, err = startThroughput(c, dir, tlsMode); err != nil {
		return err
	}
	var p, t tpResult
	p.beatsPerSec = pc.heartbeats(3 * time.Second)
	t.beatsPerSec = tc.heartbeats(3 * time.Second)
	if err := tc.steps(c.steps, &t); err != nil {
		return fmt.Errorf("%s: %w", tlsMode, err)
	}
	if err := pc.steps(c.steps, &p); err != nil {
		return fmt.Errorf("%s: %w", plain, err)
	}
	fmt.Fprintf(b, "Placement throughput, 3 members on loopback, %d fake agents, %d steps submitted by %d clients; "+
		"a plaintext and a mutual-TLS cluster up side by side, measured in turn (heartbeats for 3 s: plaintext, then TLS; steps: TLS, then plaintext):\n\n",
		c.agents, c.steps, clients)
	fmt.Fprintf(b, "| measure | plaintext | mutual TLS | TLS / plaintext |\n|---|---|---|---|\n")
	fmt.Fprintf(b, "| baseline: heartbeats committed per second (%d clients) | %.0f | %.0f | **%s** |\n", clients, p.beatsPerSec, t.beatsPerSec, ratio(t.beatsPerSec, p.beatsPerSec))
	fmt.Fprintf(b, "| steps submitted per second | %.0f | %.0f | %s |\n", p.submitPerSec, t.submitPerSec, ratio(t.submitPerSec, p.submitPerSec))
	fmt.Fprintf(b, "| steps committed end to end per second (submit, place, running, exit) | %.0f | %.0f | **%s** |\n", p.stepsPerSec, t.stepsPerSec, ratio(t.stepsPerSec, p.stepsPerSec))
	fmt.Fprintf(b, "| ratio: full step lifecycles per heartbeat write | %.2f | %.2f | |\n", p.stepsPerSec/p.beatsPerSec, t.stepsPerSec/t.beatsPerSec)
	fmt.Fprintf(b, "| failed submissions | %d | %d | |\n\n", p.failed, t.failed)
	return nil
}

// fakeNode is the node id of fake agent i.
func fakeNode(i int) string { return fmt.Sprintf("fake-%d", i) }
