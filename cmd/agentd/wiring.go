package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rodon-compute/rodon/agentd"
	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/agentd/stream"
	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/httpapi"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// schedulerClient adapts scheduler/client to the agent's Scheduler.
type schedulerClient struct {
	c *client.Client
	// tr is the TLS transport, nil in plaintext mode; close releases its
	// idle connections.
	tr *http.Transport
	// ready, if set, must return nil before assignments are handed to the
	// agent: no step starts before the control-plane list is loaded.
	ready func(ctx context.Context) error
}

// newSchedulerClient returns the agent's client of the scheduler: with src,
// over mutual TLS to servers that are scheduler members.
func newSchedulerClient(urls []string, src *pki.Source) (*schedulerClient, error) {
	opts := client.Options{UserAgent: "rodon-agentd"}
	var tr *http.Transport
	if src != nil {
		tr = src.Transport(pki.AllowRoles(pki.RoleMember))
		opts.HTTPClient = &http.Client{Transport: tr}
	}
	c, err := client.New(joinURLs(urls), opts)
	if err != nil {
		return nil, err
	}
	return &schedulerClient{c: c, tr: tr}, nil
}

func (s *schedulerClient) close() {
	if s.tr != nil {
		s.tr.CloseIdleConnections()
	}
}

func (s *schedulerClient) Platform(ctx context.Context) (cluster.Platform, error) {
	return s.c.Platform(ctx)
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
	if s.ready != nil {
		if err := s.ready(ctx); err != nil {
			return 0, nil, err
		}
	}
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

// newAgentMux serves step streams, TTY input, /healthz and /metrics. With
// acc.authenticated, streams and input are for gateways and operators
// only; /healthz and /metrics for any cluster identity (the TLS listener
// admits no other).
// newAgentMux is the agent's HTTP API; extra collectors (the TLS
// handshake counts) are exported on /metrics beside the agent's own.
func newAgentMux(logs *logstore.Store, agent *agentd.Agent, acc access, logger *slog.Logger, extra ...prometheus.Collector) (http.Handler, error) {
	h, err := stream.New(stream.DefaultConfig(), logs, logger)
	if err != nil {
		return nil, err
	}
	m := agent.Metrics()
	mux := http.NewServeMux()
	t := agentTimeouts
	mux.Handle("/v1/steps/", acc.only("read step streams", h, streamRoles...))
	mux.Handle("POST /v1/steps/{id}/input", withDeadlines(t.input, acc.only("send terminal input", inputHandler(agent), streamRoles...)))
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(extra...)
	mux.Handle("GET /metrics", withDeadlines(t.metrics, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})))
	mux.Handle("GET /healthz", withDeadlines(t.health, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"status":"ok"}` + "\n"))
	})))
	return acc.observe(mux), nil
}

// maxInput bounds one input message to a TTY step.
const maxInput = 64 << 10

// inputHandler serves POST /v1/steps/{id}/input: one api.StepInput for a
// running TTY step. 204 when delivered; 400 for a bad message, 404 for a
// step not running here, 409 for a step not on a terminal.
func inputHandler(agent *agentd.Agent) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := cluster.StepID(r.PathValue("id"))
		if err := cluster.ValidateStepID(id); err != nil {
			writeError(w, http.StatusBadRequest, api.CodeBadRequest, err.Error())
			return
		}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxInput))
		dec.DisallowUnknownFields()
		var in api.StepInput
		if err := dec.Decode(&in); err != nil {
			writeError(w, http.StatusBadRequest, api.CodeBadRequest, "input message: "+err.Error())
			return
		}
		if dec.More() {
			writeError(w, http.StatusBadRequest, api.CodeBadRequest, "input message: data after the JSON object")
			return
		}
		if err := in.Validate(); err != nil {
			writeError(w, http.StatusBadRequest, api.CodeBadRequest, err.Error())
			return
		}
		var err error
		if in.Type == "stdin" {
			err = agent.Input(id, []byte(in.Data))
		} else {
			err = agent.Resize(r.Context(), id, in.Cols, in.Rows)
		}
		switch {
		case err == nil:
			w.WriteHeader(http.StatusNoContent)
		case errors.Is(err, agentd.ErrNoSuchStep):
			writeError(w, http.StatusNotFound, api.CodeNotFound, fmt.Sprintf("step %s is not running on this node", id))
		case errors.Is(err, agentd.ErrNotInteractive):
			writeError(w, http.StatusConflict, api.CodeConflict, fmt.Sprintf("step %s does not run on a terminal (or has ended)", id))
		default:
			writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, err.Error())
		}
	})
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	httpapi.WriteError(w, &httpapi.Error{Status: status, Code: code, Message: msg})
}
