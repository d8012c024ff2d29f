package scheduler

import (
	"errors"
	"net/http"
	"strings"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/envseal"
)

// Step environment values are write-only (SPEC.md). The leader seals each
// value in the HTTP handler of a submission, before raft.Apply, so that the
// log, the FSM and every snapshot hold only names and ciphertext (Apply
// stays deterministic: it never sees a key). The assignments route is the
// one place that opens them, for the agent of the node that runs the step;
// every other answer names the variables only (api.StepRequest.EnvNames).
// Error messages name a variable by its index and name, never quote an
// entry.

// maxEnv bounds the variables of one step.
const maxEnv = 1024

// sealEnv seals the environment of req for step id: first req.Env
// (NAME=VALUE, sealed now), then req.SealedEnv (sealed earlier by POST
// /v1/env/seal for this id, opened and sealed again for the replicated
// state, so that a ciphertext of the state never serves as a submission's
// and the other way round).
func (s *Server) sealEnv(id cluster.StepID, req api.StepRequest) ([]cluster.EnvVar, error) {
	if len(req.Env)+len(req.SealedEnv) > maxEnv {
		return nil, badRequest("fields \"env\" and \"sealed_env\": %d variables, at most %d", len(req.Env)+len(req.SealedEnv), maxEnv)
	}
	var out []cluster.EnvVar
	for i, e := range req.Env {
		name, value, ok := strings.Cut(e, "=")
		if !ok || cluster.ValidateEnvName(name) != nil || strings.ContainsRune(value, 0) {
			return nil, badRequest("field \"env[%d]\": want NAME=VALUE, NAME without '=' or NUL and VALUE without NUL", i)
		}
		sealed, err := s.envKey.Seal(envseal.ForStep, string(id), name, value)
		if err != nil {
			return nil, err
		}
		out = append(out, cluster.EnvVar{Name: name, Sealed: sealed})
	}
	if len(req.SealedEnv) > 0 && req.ID == "" {
		return nil, badRequest("field \"sealed_env\": values are sealed for one step id: send the id they were sealed for in field \"id\"")
	}
	for i, v := range req.SealedEnv {
		if err := cluster.ValidateEnvName(v.Name); err != nil {
			return nil, badRequest("field \"sealed_env[%d].name\": %v", i, err)
		}
		value, err := s.envKey.Open(envseal.ForSubmit, string(id), v.Name, v.Sealed)
		if errors.Is(err, envseal.ErrOpen) {
			return nil, badRequest("field \"sealed_env[%d]\" (%s): does not open for step %s: seal it for this step id "+
				"with POST /v1/env/seal (a value sealed for another step, or with a key this cluster does not have, is refused)", i, v.Name, id)
		} else if err != nil {
			return nil, err
		}
		sealed, err := s.envKey.Seal(envseal.ForStep, string(id), v.Name, value)
		if err != nil {
			return nil, err
		}
		out = append(out, cluster.EnvVar{Name: v.Name, Sealed: sealed})
	}
	return out, nil
}

// openEnv returns step as its node's agent receives it: Env holds the
// opened values and SealedEnv is cleared; when a value does not open,
// EnvError says why instead and the agent fails the step. The state's
// record is not changed.
func (s *Server) openEnv(step cluster.Step) cluster.Step {
	sealed := step.Spec.SealedEnv
	step.Spec.SealedEnv, step.Spec.Env = nil, nil
	for _, v := range sealed {
		value, err := s.envKey.Open(envseal.ForStep, string(step.ID), v.Name, v.Sealed)
		if err != nil {
			step.Spec.Env = nil
			step.Spec.EnvError = "the value of environment variable " + v.Name + " does not open with the env key of scheduler member " +
				s.cfg.ID + ": every member needs the same env key (--env-key); submit the step again once they have it"
			return step
		}
		step.Spec.Env = append(step.Spec.Env, v.Name+"="+value)
	}
	return step
}

// handleSealEnv seals values for a step to be submitted later with that
// id, for a caller that must keep them until then (the gateway's run
// records). Any member serves it: every member holds the env key, and
// nothing is replicated.
func (s *Server) handleSealEnv(w http.ResponseWriter, r *http.Request) error {
	var req api.SealEnvRequest
	if err := decodeBody(w, r, &req, maxBody, false); err != nil {
		return err
	}
	if err := cluster.ValidateStepID(cluster.StepID(req.Step)); err != nil {
		return badRequest("field \"step\": %v", err)
	}
	if len(req.Env) > maxEnv {
		return badRequest("field \"env\": %d variables, at most %d", len(req.Env), maxEnv)
	}
	out := api.SealEnvAnswer{Step: req.Step, SealedEnv: make([]api.SealedEnv, 0, len(req.Env))}
	for i, e := range req.Env {
		name, value, ok := strings.Cut(e, "=")
		if !ok || cluster.ValidateEnvName(name) != nil || strings.ContainsRune(value, 0) {
			return badRequest("field \"env[%d]\": want NAME=VALUE, NAME without '=' or NUL and VALUE without NUL", i)
		}
		sealed, err := s.envKey.Seal(envseal.ForSubmit, req.Step, name, value)
		if err != nil {
			return err
		}
		out.SealedEnv = append(out.SealedEnv, api.SealedEnv{Name: name, Sealed: sealed})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// local runs a handler on this member, whoever leads, without reading
// the state.
func (s *Server) local(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			writeError(w, errorOf(err))
		}
	}
}
