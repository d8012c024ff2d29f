package scheduler

import (
	"errors"
	"net/http"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/pki"
)

// handleReports serves POST /v1/agent/reports: an agent's reports about
// its steps, together (cluster.Reports). Each item is checked as its
// single-report route checks it (the body's node is the caller's, by the
// route's authorization; each item's node is the body's, and its step's
// current attempt is on that node), stamped with the leader's time, and
// the valid ones go through the leader's batcher in order, usually in one
// entry shared with other callers. Each item gets its own result; the
// request fails as a whole only when they could not be logged (then any
// of them may or may not be applied, and every report may be repeated).
func (s *Server) handleReports(w http.ResponseWriter, r *http.Request) error {
	var req cluster.Reports
	if err := decodeBody(w, r, &req, maxBody, false); err != nil {
		return err
	}
	switch {
	case req.Node == "":
		return badRequest("field \"node\": missing")
	case len(req.Reports) > cluster.MaxReports:
		return badRequest("field \"reports\": %d reports, at most %d in one request", len(req.Reports), cluster.MaxReports)
	}
	c, authorized := callerOf(r.Context())
	now := s.now()
	results := make([]cluster.ReportResult, len(req.Reports))
	var cmds []cluster.Command
	var at []int // index in req.Reports of each of cmds
	for i, rep := range req.Reports {
		cmd, err := s.reportCommand(req.Node, rep, now)
		if err == nil && authorized && c.id.Role == pki.RoleAgent {
			err = s.ownReport(r, c, cmd)
		}
		if err != nil {
			results[i].Error = reportError(err)
			continue
		}
		cmds = append(cmds, cmd)
		at = append(at, i)
	}
	res, err := s.applyReports(r, cmds)
	if err != nil {
		return err
	}
	for j, v := range res {
		if err, ok := v.(error); ok {
			results[at[j]].Error = reportError(err)
		}
	}
	writeJSON(w, http.StatusOK, cluster.ReportsResult{Results: results, Index: s.fsm.State().Index()})
	return nil
}

// applyReports logs cmds in order through the leader's batcher (or, while
// it has none yet, one entry each) and returns each one's result.
func (s *Server) applyReports(r *http.Request, cmds []cluster.Command) ([]any, error) {
	if len(cmds) == 0 {
		return nil, nil
	}
	if b := s.batcher.Load(); b != nil {
		return b.ApplyAll(r.Context(), cmds)
	}
	out := make([]any, len(cmds))
	for i, c := range cmds {
		res, err := s.raft.Apply(r.Context(), c)
		switch {
		case err != nil && isLogError(err):
			return nil, err
		case err != nil:
			out[i] = err
		default:
			out[i] = res
		}
	}
	return out, nil
}

// reportCommand checks one report of node's, as its single-report route
// does, and returns its command stamped with now.
func (s *Server) reportCommand(node cluster.NodeID, rep cluster.Report, now time.Time) (cluster.Command, error) {
	st := s.fsm.State()
	known := func(id cluster.StepID) error {
		if id == "" {
			return badRequest("field \"step\": missing")
		}
		if _, ok := st.StepNode(id); !ok {
			return notFound("step %s: not found", id)
		}
		return nil
	}
	sameNode := func(n cluster.NodeID, attempt int) error {
		if err := checkAttempt(n, attempt); err != nil {
			return err
		}
		if n != node {
			return badRequest("field \"node\": %q, but the request is node %q's", n, node)
		}
		return nil
	}
	set := 0
	for _, p := range []bool{rep.Phase != nil, rep.Events != nil, rep.Exit != nil, rep.ConfirmCancel != nil} {
		if p {
			set++
		}
	}
	if set != 1 {
		return nil, badRequest("report of kind %q: want exactly one of phase, events, exit and confirm_cancel", rep.Kind)
	}
	switch {
	case rep.Kind == cluster.ReportPhase && rep.Phase != nil:
		c := *rep.Phase
		if err := sameNode(c.Node, c.Attempt); err != nil {
			return nil, err
		}
		if c.State != "" && c.State != cluster.StateStarting && c.State != cluster.StateRunning {
			return nil, badRequest("field \"state\": %q: want starting, running, or none", c.State)
		}
		c.At = now
		return c, known(c.Step)
	case rep.Kind == cluster.ReportEvents && rep.Events != nil:
		c := *rep.Events
		if err := sameNode(c.Node, c.Attempt); err != nil {
			return nil, err
		}
		if len(c.Events) > cluster.MaxEvents {
			return nil, badRequest("field \"events\": %d events, at most %d in one report", len(c.Events), cluster.MaxEvents)
		}
		c.Events = append([]cluster.Event(nil), c.Events...)
		for i := range c.Events {
			if c.Events[i].Time.IsZero() {
				c.Events[i].Time = now
			}
		}
		return c, known(c.Step)
	case rep.Kind == cluster.ReportExit && rep.Exit != nil:
		c := *rep.Exit
		if err := sameNode(c.Node, c.Attempt); err != nil {
			return nil, err
		}
		if err := validateExit(&c.Record); err != nil {
			return nil, badRequest("field \"record\": %s", trimInvalid(err))
		}
		if c.Record.Workspace != nil || c.Commit != nil {
			return nil, badRequest("an exit with a workspace result is not batched: send it to POST /v1/agent/steps/%s/exit", c.Record.Step)
		}
		c.At = now
		return c, known(c.Record.Step)
	case rep.Kind == cluster.ReportConfirmCancel && rep.ConfirmCancel != nil:
		c := *rep.ConfirmCancel
		if err := sameNode(c.Node, c.Attempt); err != nil {
			return nil, err
		}
		c.At = now
		return c, known(c.Step)
	}
	return nil, badRequest("report of kind %q: want phase, events, exit or confirm_cancel, with its field set", rep.Kind)
}

// ownReport is authorizeState for one report of an agent: the step's
// current attempt must be on the agent's node.
func (s *Server) ownReport(r *http.Request, c caller, cmd cluster.Command) error {
	var id cluster.StepID
	action := "report"
	switch x := cmd.(type) {
	case cluster.StepPhase:
		id, action = x.Step, "report a step's phase"
	case cluster.StepEvents:
		id, action = x.Step, "report a step's events"
	case cluster.StepExit:
		id, action = x.Record.Step, "report a step's exit"
	case cluster.ConfirmCancel:
		id, action = x.Step, "confirm a step's cancel"
	}
	if node, ok := s.fsm.State().StepNode(id); ok && string(node) != c.id.Name {
		err := refusal(c.id, "%s may not %s for step %s: its current attempt is not on node %s", c.id, action, id, c.id.Name)
		s.metrics.forbidden.WithLabelValues(string(c.id.Role), r.Pattern).Inc()
		s.logger.Warn("report refused", "identity", c.id.String(), "route", r.Pattern, "step", id, "reason", err.msg)
		return err
	}
	return nil
}

// reportError is the result of a refused report: the answer its
// single-report route would have given.
func reportError(err error) *cluster.ReportError {
	var fe *forbiddenError
	if errors.As(err, &fe) {
		return &cluster.ReportError{Status: http.StatusForbidden, Code: api.CodeForbidden, Message: fe.msg}
	}
	he := errorOf(err)
	return &cluster.ReportError{Status: he.Status, Code: he.Code, Message: he.Message}
}
