package agentd

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/agentd/stream"
	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/httpapi"
)

// newAgentMux serves step streams, TTY input, /healthz and /metrics. With
// acc.authenticated, streams and input are for gateways and operators
// only; /healthz and /metrics for any cluster identity (the TLS listener
// admits no other).
// newAgentMux is the agent's HTTP API; extra collectors (the TLS
// handshake counts) are exported on /metrics beside the agent's own.
func newAgentMux(logs *logstore.Store, agent *Agent, acc access, logger *slog.Logger, extra ...prometheus.Collector) (http.Handler, error) {
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
func inputHandler(agent *Agent) http.Handler {
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
		case errors.Is(err, ErrNoSuchStep):
			writeError(w, http.StatusNotFound, api.CodeNotFound, fmt.Sprintf("step %s is not running on this node", id))
		case errors.Is(err, ErrNotInteractive):
			writeError(w, http.StatusConflict, api.CodeConflict, fmt.Sprintf("step %s does not run on a terminal (or has ended)", id))
		default:
			writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, err.Error())
		}
	})
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	httpapi.WriteError(w, &httpapi.Error{Status: status, Code: code, Message: msg})
}
