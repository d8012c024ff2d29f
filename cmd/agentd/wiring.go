package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rodon-compute/rodon/agentd"
	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/agentd/stream"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// schedulerClient adapts scheduler/client to the agent's Scheduler.
type schedulerClient struct{ c *client.Client }

func newSchedulerClient(urls []string, logger *slog.Logger) (*schedulerClient, error) {
	c, err := client.New(joinURLs(urls), client.Options{UserAgent: "rodon-agentd"})
	if err != nil {
		return nil, err
	}
	return &schedulerClient{c: c}, nil
}

func joinURLs(urls []string) string {
	s := ""
	for i, u := range urls {
		if i > 0 {
			s += ","
		}
		s += u
	}
	return s
}

// refused marks 4xx answers: the scheduler will not accept the report
// however often it is sent.
func refused(err error) error {
	var e *client.Error
	if errors.As(err, &e) && e.Status >= 400 && e.Status < 500 {
		return errors.Join(agentd.ErrReportRefused, err)
	}
	return err
}

func (s *schedulerClient) Register(ctx context.Context, r cluster.RegisterNode) (cluster.Node, error) {
	return s.c.Register(ctx, r)
}

func (s *schedulerClient) Heartbeat(ctx context.Context, h cluster.Heartbeat) (cluster.HeartbeatResult, error) {
	res, err := s.c.Heartbeat(ctx, h)
	return cluster.HeartbeatResult{Unwanted: res.Unwanted}, err
}

func (s *schedulerClient) Assignments(ctx context.Context, node cluster.NodeID, index uint64, wait time.Duration) (uint64, []cluster.Step, error) {
	a, err := s.c.Assignments(ctx, node, index, wait)
	return a.Index, a.Steps, err
}

func (s *schedulerClient) StepPhase(ctx context.Context, p cluster.StepPhase) error {
	return refused(s.c.ReportPhase(ctx, p))
}

func (s *schedulerClient) StepEvents(ctx context.Context, e cluster.StepEvents) error {
	return refused(s.c.ReportEvents(ctx, e))
}

func (s *schedulerClient) StepExit(ctx context.Context, x cluster.StepExit) error {
	return refused(s.c.ReportExit(ctx, x))
}

func (s *schedulerClient) ConfirmCancel(ctx context.Context, c cluster.ConfirmCancel) error {
	return refused(s.c.ConfirmCancel(ctx, c))
}

// newAgentMux serves step streams, /healthz and /metrics.
func newAgentMux(logs *logstore.Store, m *agentd.Metrics, logger *slog.Logger) (http.Handler, error) {
	h, err := stream.New(stream.DefaultConfig(), logs, logger)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/steps/", h)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	return mux, nil
}
