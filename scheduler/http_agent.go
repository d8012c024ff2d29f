package scheduler

import (
	"context"
	"net/http"
	"strconv"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// The agent routes take cluster commands as bodies. Their At field, if
// sent, is replaced by the leader's time; the step of a /steps/{id}/...
// route is the path's, and a body that names another is refused.

// heartbeatAnswer is the answer to a heartbeat (client.HeartbeatResponse).
type heartbeatAnswer struct {
	Unwanted []cluster.StepAttempt `json:"unwanted,omitempty"`
	TTL      api.Duration          `json:"ttl"`
}

// assignmentsAnswer is the answer of the assignments long poll
// (client.Assignments). With changes, Steps are only the live steps
// changed after the request's index, and Live every live attempt
// (docs/PROTOCOL.md, "Assignments").
type assignmentsAnswer struct {
	Index   uint64                `json:"index"`
	Steps   []cluster.Step        `json:"steps"`
	Changes bool                  `json:"changes,omitempty"`
	Live    []cluster.StepAttempt `json:"live,omitempty"`
}

// decodeRegister decodes and checks the body of POST /v1/agent/register.
func decodeRegister(w http.ResponseWriter, r *http.Request) (cluster.RegisterNode, error) {
	var c cluster.RegisterNode
	if err := decodeBody(w, r, &c, maxBody, false); err != nil {
		return c, err
	}
	switch {
	case cluster.ValidateNodeID(c.Node) != nil:
		return c, badRequest("field \"node\": %v", cluster.ValidateNodeID(c.Node))
	case !c.Address.IsValid():
		return c, badRequest("field \"address\": missing: want the HOST:PORT the agent serves its API on")
	case !(c.Capacity.CPU > 0):
		return c, badRequest("field \"capacity.cpu\": %v: want a positive number of cores", c.Capacity.CPU)
	case c.Capacity.MemoryBytes <= 0:
		return c, badRequest("field \"capacity.memory_bytes\": %d: want a positive number of bytes", c.Capacity.MemoryBytes)
	case c.MaxStarting < 0:
		return c, badRequest("field \"max_starting\": %d is negative: want a limit, or 0 for the default", c.MaxStarting)
	}
	if err := validateHealth(c.Health); err != nil {
		return c, badRequest("field \"health\": %s", trimInvalid(err))
	}
	return c, nil
}

func (s *Server) handleRegister(w http.ResponseWriter, r *http.Request) error {
	c, err := decodeRegister(w, r)
	if err != nil {
		return err
	}
	c.At = s.now()
	if _, err := s.raft.Apply(r.Context(), c); err != nil {
		return err
	}
	st := s.fsm.State()
	n, _ := st.Node(c.Node)
	writeIndexed(w, http.StatusOK, st.Index(), n)
	return nil
}

// decodeHeartbeat decodes and checks the body of POST /v1/agent/heartbeat.
func decodeHeartbeat(w http.ResponseWriter, r *http.Request) (cluster.Heartbeat, error) {
	var c cluster.Heartbeat
	if err := decodeBody(w, r, &c, maxBody, false); err != nil {
		return c, err
	}
	if c.Node == "" {
		return c, badRequest("field \"node\": missing")
	}
	if err := validateHealth(c.Health); err != nil {
		return c, badRequest("field \"health\": %s", trimInvalid(err))
	}
	for i, a := range c.Running {
		if a.Step == "" || a.Attempt < 1 {
			return c, badRequest("field \"running[%d]\": want a step and an attempt of at least 1", i)
		}
	}
	return c, nil
}

func (s *Server) handleHeartbeat(w http.ResponseWriter, r *http.Request) error {
	c, err := decodeHeartbeat(w, r)
	if err != nil {
		return err
	}
	st := s.fsm.State()
	n, ok := st.Node(c.Node)
	if !ok {
		return notFound("node %s: not found: register it first (POST /v1/agent/register)", c.Node)
	}
	c.At = s.now()
	out := heartbeatAnswer{TTL: api.Duration(s.cfg.NodeTTL)}
	// The leader keeps heartbeats in memory (heartbeat.go) and logs one
	// only when it changes the node's record, or when this term has not
	// logged one of the node yet (which refreshes LastHeartbeat in the
	// log for the next leader's view).
	hb := s.beats.Load()
	if hb != nil && !hb.record(&c) && !heartbeatChanges(n, &c) {
		// A leader whose state is behind what the agent has seen cannot
		// tell which of its steps are unwanted: it says none this time.
		if st.Index() >= c.SeenIndex {
			out.Unwanted = st.Unwanted(c.Node, c.Running)
		}
		writeIndexed(w, http.StatusOK, st.Index(), out)
		return nil
	}
	logged := c
	logged.Pool, logged.SeenIndex = nil, 0 // soft state, never replicated
	res, err := s.apply(r.Context(), logged)
	if err != nil {
		return err
	}
	if hb != nil {
		hb.logged(c.Node)
	}
	if hr, ok := res.(*cluster.HeartbeatResult); ok && hr != nil {
		out.Unwanted = hr.Unwanted
	}
	writeIndexed(w, http.StatusOK, st.Index(), out)
	return nil
}

// handleAssignments serves GET /v1/agent/assignments, the long poll of a
// node's assignments: at once when index is zero or they changed after
// it, else when they change (the node's assignment topic) or the wait
// ends. With changes=true the answer carries only the steps changed after
// index, and the live attempts, when index can serve as the base (see
// State.AssignmentChanges); otherwise, and for an agent that does not
// ask, every live step.
func (s *Server) handleAssignments(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	node := cluster.NodeID(q.Get("node"))
	if node == "" {
		return badRequest("query parameter node: missing: want the node's id")
	}
	index, wait, err := queryIndex(r, s.cfg.MaxWait)
	if err != nil {
		return err
	}
	var changes bool
	if v := q.Get("changes"); v != "" {
		if changes, err = strconv.ParseBool(v); err != nil {
			return badRequest("query parameter changes: %q: want true or false", v)
		}
	}
	st := s.fsm.State()
	if _, ok := st.Node(node); !ok {
		return notFound("node %s: not found: register it first (POST /v1/agent/register)", node)
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	for {
		changed := st.watch(assignTopic(node))
		if index == 0 || st.AssignmentsIndex(node) > index || wait == 0 || ctx.Err() != nil {
			after := uint64(0)
			if changes {
				after = index
			}
			idx, steps, live, delta := st.AssignmentChanges(node, after)
			for i := range steps {
				steps[i] = s.openWorkspace(r.Context(), s.openTicket(s.openEnv(steps[i])))
			}
			writeIndexed(w, http.StatusOK, idx, assignmentsAnswer{Index: idx, Steps: steps, Changes: delta, Live: live})
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
		}
	}
}

// stepReport checks the step of a report against the path and the state.
func (s *Server) stepReport(r *http.Request, body cluster.StepID) (cluster.StepID, error) {
	id := cluster.StepID(r.PathValue("id"))
	if body != "" && body != id {
		return id, badRequest("field \"step\": %q, but the path names step %q", body, id)
	}
	if _, ok := s.fsm.State().StepNode(id); !ok {
		return id, notFound("step %s: not found", id)
	}
	return id, nil
}

// decodeStepPhase decodes the body of POST /v1/agent/steps/{id}/phase.
func decodeStepPhase(w http.ResponseWriter, r *http.Request) (cluster.StepPhase, error) {
	var c cluster.StepPhase
	if err := decodeBody(w, r, &c, maxBody, false); err != nil {
		return c, err
	}
	if err := checkAttempt(c.Node, c.Attempt); err != nil {
		return c, err
	}
	if c.State != "" && c.State != cluster.StateStarting && c.State != cluster.StateRunning {
		return c, badRequest("field \"state\": %q: want starting, running, or none", c.State)
	}
	return c, nil
}

func checkAttempt(node cluster.NodeID, attempt int) error {
	switch {
	case node == "":
		return badRequest("field \"node\": missing")
	case attempt < 1:
		return badRequest("field \"attempt\": %d: want the attempt number the assignment carries (1 or more)", attempt)
	}
	return nil
}

func (s *Server) handlePhase(w http.ResponseWriter, r *http.Request) error {
	c, err := decodeStepPhase(w, r)
	if err != nil {
		return err
	}
	if c.Step, err = s.stepReport(r, c.Step); err != nil {
		return err
	}
	c.At = s.now()
	return s.applyReport(w, r, c)
}

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) error {
	var c cluster.StepEvents
	if err := decodeBody(w, r, &c, maxBody, false); err != nil {
		return err
	}
	if err := checkAttempt(c.Node, c.Attempt); err != nil {
		return err
	}
	if len(c.Events) > cluster.MaxEvents {
		return badRequest("field \"events\": %d events, at most %d in one report", len(c.Events), cluster.MaxEvents)
	}
	var err error
	if c.Step, err = s.stepReport(r, c.Step); err != nil {
		return err
	}
	now := s.now()
	for i := range c.Events {
		if c.Events[i].Time.IsZero() {
			c.Events[i].Time = now
		}
	}
	return s.applyReport(w, r, c)
}

// decodeStepExit decodes and checks the body of POST /v1/agent/steps/{id}/exit.
func decodeStepExit(w http.ResponseWriter, r *http.Request) (cluster.StepExit, error) {
	var c cluster.StepExit
	if err := decodeBody(w, r, &c, maxBody, false); err != nil {
		return c, err
	}
	if err := checkAttempt(c.Node, c.Attempt); err != nil {
		return c, err
	}
	if err := validateExit(&c.Record); err != nil {
		return c, badRequest("field \"record\": %s", trimInvalid(err))
	}
	return c, nil
}

func (s *Server) handleExit(w http.ResponseWriter, r *http.Request) error {
	c, err := decodeStepExit(w, r)
	if err != nil {
		return err
	}
	if c.Record.Step, err = s.stepReport(r, c.Record.Step); err != nil {
		return err
	}
	c.At = s.now()
	if c.Record.Workspace != nil {
		return s.exitWithWorkspace(w, r, c)
	}
	return s.applyReport(w, r, c)
}

func (s *Server) handleConfirmCancel(w http.ResponseWriter, r *http.Request) error {
	var c cluster.ConfirmCancel
	if err := decodeBody(w, r, &c, maxBody, false); err != nil {
		return err
	}
	if err := checkAttempt(c.Node, c.Attempt); err != nil {
		return err
	}
	var err error
	if c.Step, err = s.stepReport(r, c.Step); err != nil {
		return err
	}
	c.At = s.now()
	return s.applyReport(w, r, c)
}

// applyReport applies an agent's report and answers {"index": N}.
func (s *Server) applyReport(w http.ResponseWriter, r *http.Request, c cluster.Command) error {
	if _, err := s.apply(r.Context(), c); err != nil {
		return err
	}
	return s.answerIndex(w)
}

// trimInvalid drops the ErrInvalid suffix of a validation error.
func trimInvalid(err error) string { return errorOf(err).Message }
