package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// decodeStepRequest decodes and checks the body of POST /v1/steps.
func decodeStepRequest(w http.ResponseWriter, r *http.Request) (api.StepRequest, cluster.StepSpec, error) {
	var req api.StepRequest
	if err := decodeBody(w, r, &req, maxBody, false); err != nil {
		return req, cluster.StepSpec{}, err
	}
	spec, err := specFromRequest(req)
	return req, spec, err
}

var stepIDEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// newStepID returns a fresh random step ID such as "s-mfrggzdfmztwq2lk".
func newStepID() cluster.StepID {
	b := make([]byte, 10)
	rand.Read(b)
	return cluster.StepID("s-" + strings.ToLower(stepIDEncoding.EncodeToString(b)))
}

func (s *Server) handleSubmit(w http.ResponseWriter, r *http.Request) error {
	req, spec, err := decodeStepRequest(w, r)
	if err != nil {
		return err
	}
	id := cluster.StepID(req.ID)
	if id == "" {
		id = newStepID()
	}
	if err := s.resolveBase(&spec); err != nil {
		return err
	}
	// Sealed here, before the log: see env.go.
	if spec.SealedEnv, err = s.sealEnv(id, req); err != nil {
		return err
	}
	if err := s.sealTicket(id, req, &spec); err != nil {
		return err
	}
	st := s.fsm.State()
	cmd := cluster.SubmitStep{Step: id, Spec: spec, At: s.now()}
	// A step that no node could ever take is recorded failed at once,
	// and answered 422: it would otherwise wait for the queue timeout.
	nodes, used, _ := st.Placement()
	var ce *CapacityError
	if _, err := Place(nodes, used, spec); errors.As(err, &ce) && ce.Unplaceable != nil {
		cmd.Unplaceable, cmd.Reason = ce.Unplaceable, ce.Reason
	}
	if _, err := s.apply(r.Context(), cmd); err != nil {
		return err
	}
	step, ok := st.Step(id)
	if !ok {
		return fmt.Errorf("step %s vanished after its submission", id)
	}
	w.Header().Set("Location", "/v1/steps/"+url.PathEscape(string(id)))
	if cmd.Unplaceable != nil {
		w.Header().Set(IndexHeader, strconv.FormatUint(st.Index(), 10))
		return &httpError{Status: http.StatusUnprocessableEntity, Code: api.CodeUnplaceable,
			Message: fmt.Sprintf("step %s: %s (recorded failed)", id, cmd.Reason)}
	}
	writeIndexed(w, http.StatusCreated, st.Index(), apiStep(step))
	return nil
}

var stepStates = []cluster.StepState{
	cluster.StateQueued, cluster.StatePlaced, cluster.StateStarting, cluster.StateRunning, cluster.StateExited,
	cluster.StateFailed, cluster.StateCancelled, cluster.StateLost, cluster.StateExpired,
}

func (s *Server) handleSteps(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := StepFilter{State: cluster.StepState(q.Get("state")), Node: cluster.NodeID(q.Get("node"))}
	if f.State != "" && !slices.Contains(stepStates, f.State) {
		return badRequest("query parameter state %q: want one of %s", f.State, joinStates(stepStates))
	}
	p, err := pageOf(r, cursorSteps)
	if err != nil {
		return err
	}
	from, err := stepCursor(p.key)
	if err != nil {
		return err
	}
	st := s.fsm.State()
	idx := st.Index()
	steps, next, more := st.StepsPage(f, from, p.limit)
	setNext(w, cursorSteps, stepCursorKey(next), more)
	writeIndexed(w, http.StatusOK, idx, apiSteps(steps))
	return nil
}

func (s *Server) handleStep(w http.ResponseWriter, r *http.Request) error {
	id := cluster.StepID(r.PathValue("id"))
	index, wait, err := queryIndex(r, s.cfg.MaxWait)
	if err != nil {
		return err
	}
	st := s.fsm.State()
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	for {
		idx := st.Index()
		step, ok := st.Step(id)
		if !ok {
			return notFound("step %s: not found", id)
		}
		if step.ModifyIndex > index || wait == 0 || ctx.Err() != nil {
			writeIndexed(w, http.StatusOK, idx, apiStep(step))
			return nil
		}
		_, _ = st.WaitIndex(ctx, idx)
	}
}

// maxReason bounds the reason of a cancel, which is replicated.
const maxReason = 1024

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) error {
	id := cluster.StepID(r.PathValue("id"))
	var req api.CancelRequest
	if err := decodeBody(w, r, &req, maxBody, true); err != nil {
		return err
	}
	if len(req.Reason) > maxReason {
		return badRequest("field \"reason\": %d bytes, at most %d", len(req.Reason), maxReason)
	}
	st := s.fsm.State()
	if _, ok := st.Step(id); !ok {
		return notFound("step %s: not found", id)
	}
	if _, err := s.apply(r.Context(), cluster.RequestCancel{Step: id, Reason: req.Reason, At: s.now()}); err != nil {
		return err
	}
	step, _ := st.Step(id)
	writeIndexed(w, http.StatusOK, st.Index(), apiStep(step))
	return nil
}

func (s *Server) handleStreamURL(w http.ResponseWriter, r *http.Request) error {
	id := cluster.StepID(r.PathValue("id"))
	st := s.fsm.State()
	step, ok := st.Step(id)
	if !ok {
		return notFound("step %s: not found", id)
	}
	if step.Node == "" {
		return conflict("step %s is %s: it has no node, so no output yet; wait until it is placed", id, step.State)
	}
	n, ok := st.Node(step.Node)
	if !ok || !n.Address.IsValid() {
		return notFound("step %s ran on node %s, which the scheduler no longer knows", id, step.Node)
	}
	// The agent serves TLS when the cluster does: whoever dials the URL
	// verifies the server is exactly agent/NODE.
	u := url.URL{Scheme: s.scheme(), Host: n.Address.String(), Path: "/v1/steps/" + string(id) + "/stream"}
	writeIndexed(w, http.StatusOK, st.Index(), api.StreamURL{URL: u.String(), Node: string(step.Node)})
	return nil
}

func joinStates[T ~string](list []T) string {
	s := make([]string, len(list))
	for i, x := range list {
		s[i] = string(x)
	}
	return strings.Join(s, ", ")
}
