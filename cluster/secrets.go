package cluster

import (
	"fmt"
	"net/url"
	"slices"
)

// Bounds of a step's secrets (StepSecrets).
const (
	// MaxStepSecrets is how many secrets one step may name.
	MaxStepSecrets = 32
	// MaxTicketBytes bounds a delivery ticket (the gateway's are 64 hex
	// digits).
	MaxTicketBytes = 256
	// MaxGatewayURLBytes bounds the gateway URL a node fetches from.
	MaxGatewayURLBytes = 2048
)

// StepSecrets is what a step carries of its agent's secrets: their names,
// the gateway cluster listener its node fetches the values from, and the
// single-use ticket for that fetch. The values themselves never reach the
// scheduler.
//
// The replicated state holds the ticket sealed (SealedTicket, sealed by
// the leader with the cluster env key, envseal purpose "secrets-ticket",
// bound to the step id); only an agent's assignment holds it opened
// (Ticket), like StepSpec.Env.
type StepSecrets struct {
	Names   []string `json:"names"`
	Gateway string   `json:"gateway"`
	// Ticket is set only in an agent's assignments: the member answering
	// opened SealedTicket for the node that runs the step.
	Ticket string `json:"ticket,omitempty"`
	// Error, in an agent's assignment only, replaces Ticket when the
	// member answering could not open it; the agent fails the step.
	Error string `json:"error,omitempty"`
	// SealedTicket is the ticket as replicated.
	SealedTicket []byte `json:"sealed_ticket,omitempty"`
}

// Validate reports the first problem of the names and gateway URL.
func (s *StepSecrets) Validate() error {
	if len(s.Names) == 0 {
		return fmt.Errorf("secrets: no names: omit the secrets of a step that has none")
	}
	if len(s.Names) > MaxStepSecrets {
		return fmt.Errorf("secrets: %d names, at most %d", len(s.Names), MaxStepSecrets)
	}
	for i, n := range s.Names {
		if err := ValidateEnvName(n); err != nil {
			return fmt.Errorf("secrets name %d: %w", i, err)
		}
		if slices.Contains(s.Names[:i], n) {
			return fmt.Errorf("secrets name %d: %s is named twice", i, n)
		}
	}
	return ValidateGatewayURL(s.Gateway)
}

// ValidateGatewayURL reports whether u can be the URL of a gateway's
// cluster listener: https://HOST[:PORT] with no user, query or fragment.
func ValidateGatewayURL(u string) error {
	if len(u) > MaxGatewayURLBytes {
		return fmt.Errorf("gateway URL: %d bytes, at most %d", len(u), MaxGatewayURLBytes)
	}
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "https" || p.Host == "" || p.User != nil || p.RawQuery != "" || p.Fragment != "" {
		return fmt.Errorf("gateway URL %q: want https://HOST[:PORT] (the gateway's --cluster-url)", u)
	}
	return nil
}

// Clone returns a deep copy of s.
func (s *StepSecrets) Clone() *StepSecrets {
	if s == nil {
		return nil
	}
	c := *s
	c.Names = slices.Clone(s.Names)
	c.SealedTicket = slices.Clone(s.SealedTicket)
	return &c
}
