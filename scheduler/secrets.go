package scheduler

import (
	"strings"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/envseal"
)

// A step's secrets (cluster.StepSecrets) travel like its environment
// (env.go): the leader seals the delivery ticket in the HTTP handler of
// the submission, before raft.Apply, so that the log, the FSM and every
// snapshot hold the names, the gateway URL and ciphertext only; the
// assignments route opens it for the agent of the node that runs the
// step, and every other answer shows the names and the URL. The values
// themselves never reach the scheduler: the agent fetches them from the
// gateway with the ticket.

// secretsOf checks the secrets of a step request and returns them as the
// spec keeps them before sealing, or a 400 that names the field. The
// ticket is never quoted.
func secretsOf(req api.StepRequest) (*cluster.StepSecrets, error) {
	if req.Secrets == nil {
		return nil, nil
	}
	sec := &cluster.StepSecrets{Names: req.Secrets.Names, Gateway: req.Secrets.Gateway}
	if err := sec.Validate(); err != nil {
		return nil, badRequest("field \"secrets\": %v", err)
	}
	switch t := req.Secrets.Ticket; {
	case t == "":
		return nil, badRequest("field \"secrets.ticket\": missing: a step's secrets are fetched with the ticket the gateway made for it")
	case len(t) > cluster.MaxTicketBytes:
		return nil, badRequest("field \"secrets.ticket\": %d bytes, at most %d", len(t), cluster.MaxTicketBytes)
	}
	for _, n := range sec.Names {
		for _, e := range req.Env {
			if name, _, _ := strings.Cut(e, "="); name == n {
				return nil, badRequest("field \"secrets.names\": %s names a variable of \"env\" too: a variable has one value", n)
			}
		}
		for _, v := range req.SealedEnv {
			if v.Name == n {
				return nil, badRequest("field \"secrets.names\": %s names a variable of \"sealed_env\" too: a variable has one value", n)
			}
		}
	}
	return sec, nil
}

// sealTicket seals the ticket of req's secrets into spec's for step id.
func (s *Server) sealTicket(id cluster.StepID, req api.StepRequest, spec *cluster.StepSpec) error {
	if spec.Secrets == nil {
		return nil
	}
	sealed, err := s.envKey.Seal(envseal.ForSecretsTicket, string(id), envseal.TicketName, req.Secrets.Ticket)
	if err != nil {
		return err
	}
	spec.Secrets.SealedTicket = sealed
	return nil
}

// openTicket returns step as its node's agent receives it: its secrets'
// Ticket opened and SealedTicket cleared, or Error saying why it did not
// open. The state's record is not changed (step is a clone).
func (s *Server) openTicket(step cluster.Step) cluster.Step {
	sec := step.Spec.Secrets.Clone()
	if sec == nil {
		return step
	}
	sealed := sec.SealedTicket
	sec.SealedTicket, sec.Ticket = nil, ""
	t, err := s.envKey.Open(envseal.ForSecretsTicket, string(step.ID), envseal.TicketName, sealed)
	if err != nil {
		sec.Error = "the secrets ticket does not open with the env key of scheduler member " + s.cfg.ID +
			": every member needs the same env key (--env-key)"
	} else {
		sec.Ticket = t
	}
	step.Spec.Secrets = sec
	return step
}

// plaintextTicket reports whether spec holds what only assignments may,
// or secrets without their sealed ticket.
func plaintextTicket(spec cluster.StepSpec) bool {
	return spec.Secrets != nil && (spec.Secrets.Ticket != "" || spec.Secrets.Error != "" || len(spec.Secrets.SealedTicket) == 0)
}
