package gatewaytest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// Scheduler is an in-memory stand-in for the scheduler's step API. Steps
// it accepts stay queued until the test moves them on (Start, Exit,
// ConfirmCancel, ...). It is safe for concurrent use; use NewScheduler.
type Scheduler struct {
	mu    sync.Mutex
	steps map[string]*api.Step
	// accepted counts accepted submissions per id; calls every SubmitStep
	// call, accepted or not.
	accepted map[string]int
	calls    int
	index    uint64
	// changed is closed and replaced on every change (WaitStep).
	changed chan struct{}
	// sealed maps the handles SealEnv returned to what they stand for;
	// env holds the environment each accepted step would run with.
	sealed map[string]sealedValue
	env    map[string][]string
	// reads counts Step calls, readBytes the JSON bytes they answered.
	reads     int
	readBytes int64
}

type sealedValue struct{ step, name, value string }

// NewScheduler returns a scheduler without steps.
func NewScheduler() *Scheduler {
	return &Scheduler{steps: map[string]*api.Step{}, accepted: map[string]int{}, changed: make(chan struct{}),
		sealed: map[string]sealedValue{}, env: map[string][]string{}}
}

// Node is the node every fake step runs on; the gateway must never show it.
const Node = "node-secret-7"

func (s *Scheduler) touch(st *api.Step) {
	s.index++
	st.ModifyIndex = s.index
	close(s.changed)
	s.changed = make(chan struct{})
}

func copyStep(st *api.Step) api.Step {
	out := *st
	out.Events = slices.Clone(st.Events)
	if st.Cancel != nil {
		c := *st.Cancel
		out.Cancel = &c
	}
	if st.ExitCode != nil {
		c := *st.ExitCode
		out.ExitCode = &c
	}
	return out
}

// SubmitStep queues a step; a request naming an existing id is a conflict.
func (s *Scheduler) SubmitStep(ctx context.Context, req api.StepRequest) (api.Step, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if req.ID == "" {
		req.ID = fmt.Sprintf("s-fake%d", len(s.steps)+1)
	}
	if _, ok := s.steps[req.ID]; ok {
		return api.Step{}, &client.Error{Status: http.StatusConflict, Code: api.CodeConflict, Message: "step " + req.ID + " exists already"}
	}
	// As the scheduler: sealed entries open for their step id only, and
	// the step's record names its variables without their values.
	env := slices.Clone(req.Env)
	for _, e := range req.Env {
		name, _, _ := strings.Cut(e, "=")
		req.EnvNames = append(req.EnvNames, name)
	}
	for i, v := range req.SealedEnv {
		sv, ok := s.sealed[string(v.Sealed)]
		if !ok || sv.step != req.ID || sv.name != v.Name {
			return api.Step{}, &client.Error{Status: http.StatusBadRequest, Code: api.CodeBadRequest,
				Message: fmt.Sprintf("field \"sealed_env[%d]\" (%s): does not open for step %s", i, v.Name, req.ID)}
		}
		env = append(env, v.Name+"="+sv.value)
		req.EnvNames = append(req.EnvNames, v.Name)
	}
	req.Env, req.SealedEnv = nil, nil
	id := req.ID
	s.env[id] = env
	req.ID = ""
	st := &api.Step{ID: id, State: "queued", Spec: req, Idempotent: req.Idempotent, Events: []api.Event{},
		Phases: api.Phases{Queued: time.Now().UTC()}}
	s.steps[id] = st
	s.accepted[id]++
	s.index++
	st.CreateIndex = s.index
	s.touch(st)
	return copyStep(st), nil
}

// SealEnv stands in for the scheduler's sealing: the values stay in the
// fake, and each answer is an opaque handle that opens only for step.
func (s *Scheduler) SealEnv(ctx context.Context, step string, env []string) ([]api.SealedEnv, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]api.SealedEnv, 0, len(env))
	for i, e := range env {
		name, value, ok := strings.Cut(e, "=")
		if !ok || name == "" {
			return nil, &client.Error{Status: http.StatusBadRequest, Code: api.CodeBadRequest,
				Message: fmt.Sprintf("field \"env[%d]\": want NAME=VALUE", i)}
		}
		h := fmt.Sprintf("fake-sealed-%d", len(s.sealed)+1)
		s.sealed[h] = sealedValue{step: step, name: name, value: value}
		out = append(out, api.SealedEnv{Name: name, Sealed: []byte(h)})
	}
	return out, nil
}

// Env returns the environment step id was accepted with, as its node
// would receive it (nil for an unknown step).
func (s *Scheduler) Env(id string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.env[id])
}

// Step returns step id.
func (s *Scheduler) Step(ctx context.Context, id string) (api.Step, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	st, ok := s.steps[id]
	if !ok {
		return api.Step{}, &client.Error{Status: http.StatusNotFound, Code: api.CodeNotFound, Message: "step " + id + ": not found"}
	}
	out := copyStep(st)
	b, _ := json.Marshal(out)
	s.readBytes += int64(len(b))
	return out, nil
}

// Reads returns how many Step calls were answered since the last
// ResetReads, and the bytes of their answers (JSON).
func (s *Scheduler) Reads() (calls int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads, s.readBytes
}

// ResetReads zeroes the counts of Reads.
func (s *Scheduler) ResetReads() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads, s.readBytes = 0, 0
}

// Compact forgets step id, as the scheduler does once a terminal step is
// past its retention: reads of it are then not_found.
func (s *Scheduler) Compact(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.steps, id)
}

// WaitStep returns step id once its ModifyIndex passes index, or when
// wait passes.
func (s *Scheduler) WaitStep(ctx context.Context, id string, index uint64, wait time.Duration) (api.Step, error) {
	if wait <= 0 {
		wait = 30 * time.Second
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		st, ok := s.steps[id]
		ch := s.changed
		var out api.Step
		if ok {
			out = copyStep(st)
		}
		s.mu.Unlock()
		if !ok {
			return api.Step{}, &client.Error{Status: http.StatusNotFound, Code: api.CodeNotFound, Message: "step " + id + ": not found"}
		}
		if out.ModifyIndex > index {
			return out, nil
		}
		select {
		case <-ch:
		case <-timer.C:
			return out, nil
		case <-ctx.Done():
			return api.Step{}, ctx.Err()
		}
	}
}

// CancelStep requests the cancel of step id: a queued step is cancelled
// and confirmed at once, a live one waits for ConfirmCancel.
func (s *Scheduler) CancelStep(ctx context.Context, id, reason string) (api.Step, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.steps[id]
	switch {
	case !ok:
		return api.Step{}, &client.Error{Status: http.StatusNotFound, Code: api.CodeNotFound, Message: "step " + id + ": not found"}
	case st.Cancel != nil:
		return copyStep(st), nil
	case st.Terminal():
		return api.Step{}, &client.Error{Status: http.StatusConflict, Code: api.CodeConflict, Message: "step " + id + " ended already"}
	}
	now := time.Now().UTC()
	st.Cancel = &api.Cancel{RequestedAt: now}
	if st.State == "queued" {
		st.State, st.TerminatedBy = "cancelled", "user"
		st.Cancel.ConfirmedAt = now
	}
	s.touch(st)
	return copyStep(st), nil
}

// StreamURL returns the agent URL of step id; a conflict while it has no
// node.
func (s *Scheduler) StreamURL(ctx context.Context, id string) (string, error) {
	st, err := s.Step(ctx, id)
	if err != nil {
		return "", err
	}
	if st.Node == "" {
		return "", &client.Error{Status: http.StatusConflict, Code: api.CodeConflict, Message: "step " + id + " has no node yet"}
	}
	return "http://10.1.2.3:7200/v1/steps/" + id + "/stream", nil
}

// update applies f to step id, which must exist.
func (s *Scheduler) update(id string, f func(st *api.Step)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.steps[id]
	if !ok {
		panic("gatewaytest: no step " + id)
	}
	f(st)
	s.touch(st)
}

// Update applies f to step id (which must exist), as one change.
func (s *Scheduler) Update(id string, f func(st *api.Step)) { s.update(id, f) }

// Start places step id on Node and marks it running.
func (s *Scheduler) Start(id string) {
	s.update(id, func(st *api.Step) {
		now := time.Now().UTC()
		st.State, st.Node, st.Attempts = "running", Node, st.Attempts+1
		st.Phases.Placed, st.Phases.Created, st.Phases.Started = now, now, now
	})
}

// Exit ends step id with code, as the runtime would report it: a step
// with a cancel request ends cancelled (terminated by the user).
func (s *Scheduler) Exit(id string, code int) {
	s.update(id, func(st *api.Step) {
		now := time.Now().UTC()
		st.ExitCode = &code
		st.State, st.TerminatedBy = "exited", "exit"
		if st.Cancel != nil {
			st.State, st.TerminatedBy = "cancelled", "user"
		}
		st.Phases.Exited, st.Phases.CleanedUp = now, now
	})
}

// Fail ends step id as failed (could not start) with reason.
func (s *Scheduler) Fail(id, reason string) {
	s.update(id, func(st *api.Step) {
		st.State, st.TerminatedBy, st.Reason = "failed", "platform", reason
	})
}

// Lose ends step id as lost: its node stopped answering.
func (s *Scheduler) Lose(id string) {
	s.update(id, func(st *api.Step) {
		st.State, st.TerminatedBy, st.Reason = "lost", "node_lost", "node stopped answering"
	})
}

// ConfirmCancel confirms the cancel of step id.
func (s *Scheduler) ConfirmCancel(id string) {
	s.update(id, func(st *api.Step) { st.Cancel.ConfirmedAt = time.Now().UTC() })
}

// AddEvent appends an event to step id.
func (s *Scheduler) AddEvent(id, kind, message string) {
	s.update(id, func(st *api.Step) {
		st.Events = append(st.Events, api.Event{Time: time.Now().UTC(), Kind: kind, Message: message})
	})
}

// AddTypedEvent appends e, an event with its payload, to step id (its
// time set if zero).
func (s *Scheduler) AddTypedEvent(id string, e api.Event) {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	s.update(id, func(st *api.Step) { st.Events = append(st.Events, e) })
}

// Accepted returns how many times a submission of id was accepted (at
// most once, unless the gateway lost track of its steps).
func (s *Scheduler) Accepted(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted[id]
}

// StepIDs returns the ids of every accepted step, sorted.
func (s *Scheduler) StepIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id := range s.steps {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Nodes lists the one node every step runs on.
func (s *Scheduler) Nodes(ctx context.Context) ([]api.Node, error) {
	return []api.Node{{ID: Node, Address: "10.1.2.3:7200", State: "ready"}}, nil
}
