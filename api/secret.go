package api

import "time"

// Secret is a secret as GET /v1/secrets lists it: never its value.
type Secret struct {
	Name      string    `json:"name"`
	Version   int       `json:"version"`
	UpdatedBy Actor     `json:"updated_by"`
	UpdatedAt time.Time `json:"updated_at"`
	CreatedAt time.Time `json:"created_at"`
}

// PutSecretRequest is the body of PUT /v1/secrets/{name}.
type PutSecretRequest struct {
	Value string `json:"value"`
}

// StepSecrets is what a step request carries of its agent's secrets:
// their names, where its node fetches the values (the gateway's cluster
// listener, mutual TLS) and the single-use ticket bound to the step's
// first attempt. The scheduler seals Ticket before it is replicated and
// opens it only in the assignment of the step's node; no answer returns it.
type StepSecrets struct {
	Names   []string `json:"names"`
	Gateway string   `json:"gateway"`
	Ticket  string   `json:"ticket,omitempty"`
}

// SecretsDeliveryRequest is the body of the gateway cluster listener's
// POST /v1/agent/secrets, sent by the agent of the node that runs Step.
type SecretsDeliveryRequest struct {
	Step    string `json:"step"`
	Attempt int    `json:"attempt"`
	Ticket  string `json:"ticket"`
}

// SecretsDeliveryAnswer answers SecretsDeliveryRequest with the values,
// by name: once, and only over mutual TLS to the agent of the step's node.
type SecretsDeliveryAnswer struct {
	Values map[string]string `json:"values"`
}
