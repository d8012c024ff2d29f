package grammartest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/size"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/scheduler"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// TestTableIsTheGrammar: the table says what internal/size and
// cluster/ids.go say, so that the entry points' tests check the grammar.
func TestTableIsTheGrammar(t *testing.T) {
	Run(t, Entry{
		Size:        func(_ *testing.T, s string) (int64, error) { return size.Parse(s) },
		StepID:      func(_ *testing.T, s string) (int64, error) { return 0, cluster.ValidateStepID(cluster.StepID(s)) },
		NodeID:      func(_ *testing.T, s string) (int64, error) { return 0, cluster.ValidateNodeID(cluster.NodeID(s)) },
		WorkspaceID: func(_ *testing.T, s string) (int64, error) { return 0, cluster.ValidateWorkspaceID(s) },
		Name:        func(_ *testing.T, s string) (int64, error) { return 0, cluster.ValidateName("name", s) },
	})
}

// TestSchedulerAPI feeds the ids to a real in-process scheduler member
// (plaintext, on loopback) over HTTP: the step id, node and workspace of
// POST /v1/steps, the node of POST /v1/agent/register and the name of PUT
// /v1/gateways/{name}. A 400 is the grammar's refusal; any other answer
// (a step accepted, or failed for want of its node) means the id was
// taken. The scheduler takes sizes as bytes only (docs/PROTOCOL.md,
// "Sizes").
func TestSchedulerAPI(t *testing.T) {
	c := startScheduler(t)
	var n atomic.Int64
	submit := func(t *testing.T, req api.StepRequest) (int64, error) {
		if req.ID == "" {
			req.ID = fmt.Sprintf("grammar-%d", n.Add(1))
		}
		req.Image, req.Args, req.CPU, req.MemoryBytes = "base", []string{"true"}, 0.1, 64<<20
		_, err := c.SubmitStep(t.Context(), req)
		return 0, badRequest(err)
	}
	t.Run("steps", func(t *testing.T) {
		Run(t, Entry{
			StepID:      func(t *testing.T, s string) (int64, error) { return submit(t, api.StepRequest{ID: s}) },
			NodeID:      func(t *testing.T, s string) (int64, error) { return submit(t, api.StepRequest{Node: s}) },
			WorkspaceID: func(t *testing.T, s string) (int64, error) { return submit(t, api.StepRequest{Workspace: s}) },
			Name: func(t *testing.T, s string) (int64, error) {
				return 0, badRequest(c.RegisterGateway(t.Context(), s, []netip.Addr{netip.MustParseAddr("127.0.0.1")}))
			},
		})
	})
	t.Run("register", func(t *testing.T) {
		Run(t, Entry{NodeID: func(t *testing.T, s string) (int64, error) {
			_, err := c.Register(t.Context(), cluster.RegisterNode{
				Node:     cluster.NodeID(s),
				Address:  netip.MustParseAddrPort("127.0.0.1:7200"),
				Capacity: cluster.Resources{CPU: 1, MemoryBytes: 1 << 30},
				Health:   cluster.Health{State: cluster.NodeReady},
			})
			return 0, badRequest(err)
		}})
	})
}

// badRequest returns err if the scheduler answered 400, else nil: only a
// 400 is a refusal of what was sent.
func badRequest(err error) error {
	if client.IsCode(err, api.CodeBadRequest) {
		return err
	}
	return nil
}

// startScheduler runs a one-member plaintext scheduler until the test
// ends and returns a client of it once it leads.
func startScheduler(t *testing.T) *client.Client {
	t.Helper()
	cfg := scheduler.DefaultConfig()
	cfg.ID, cfg.DataDir, cfg.Bootstrap = "m1", t.TempDir(), true
	cfg.RaftAddr, cfg.HTTPAddr = testenv.FreeAddr(t), testenv.FreeAddr(t)
	cfg.ShutdownTimeout = 2 * time.Second
	cfg.Raft.HeartbeatTimeout, cfg.Raft.ElectionTimeout, cfg.Raft.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	srv, err := scheduler.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	tr := &http.Transport{}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("scheduler Run = %v", err)
		}
		tr.CloseIdleConnections()
	})
	c, err := client.New(cfg.HTTPAddr, client.Options{HTTPClient: &http.Client{Transport: tr}, RetryFor: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Ready once it leads and applies: a read through the leader.
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := c.Nodes(t.Context())
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("scheduler not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
