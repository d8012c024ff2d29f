package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// Delivery tickets (docs/design/tenants.md, "Secrets"; docs/PROTOCOL.md,
// "Secrets delivery"). The Driver, submitting the Bash step of an agent
// run whose grant names secrets, writes a secret_ticket record and puts
// the ticket's token into the step request (api.StepSecrets); the
// scheduler seals the token before Raft and opens it only for the step's
// node, whose agent presents it once to the cluster listener
// (secret_delivery.go). The record's id is the hex SHA-256 of the token:
// the store never holds a token, and a token is found by its digest.

// kindSecretTicket is a global kind (not a tenant's): id the token's
// digest, value secretTicketRecord.
const kindSecretTicket = "secret_ticket"

// secretTicketTTL is how long a ticket may wait for its step to start:
// past it the delivery is refused and maintenance deletes the record.
const secretTicketTTL = 10 * time.Minute

// secretTicketRecord is a ticket: the tenant whose secrets it opens, the
// step attempt it is bound to, the names, and when it expires.
type secretTicketRecord struct {
	Tenant    string    `json:"tenant"`
	Step      string    `json:"step"`
	Attempt   int       `json:"attempt"`
	Names     []string  `json:"names"`
	ExpiresAt time.Time `json:"expires_at"`
}

// ticketDigest is the id of the record of ticket token.
func ticketDigest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// errSecretsNoTenant refuses the secrets of a step submitted outside a tenant.
var errSecretsNoTenant = errors.New("the run's secrets cannot be delivered: the run acts in no tenant")

// issueSecretTicket writes the ticket of the first attempt of step, for
// names of ctx's tenant, and returns what the step request carries:
// the names, gatewayURL and the token. The token is returned once, here.
func issueSecretTicket(ctx context.Context, store Store, now time.Time, step string, names []string, gatewayURL string) (*api.StepSecrets, error) {
	tenant := tenantFrom(ctx)
	if tenant == "" {
		return nil, errSecretsNoTenant
	}
	b := make([]byte, 32)
	rand.Read(b)
	token := hex.EncodeToString(b)
	rec := secretTicketRecord{Tenant: tenant, Step: step, Attempt: 1, Names: slices.Clone(names), ExpiresAt: now.Add(secretTicketTTL)}
	if _, err := putRecord(ctx, store, kindSecretTicket, ticketDigest(token), 0, &rec); err != nil {
		return nil, fmt.Errorf("write the secrets ticket of step %s: %w", step, err)
	}
	return &api.StepSecrets{Names: slices.Clone(names), Gateway: gatewayURL, Ticket: token}, nil
}

// dropSecretTicket deletes the ticket of token, whatever its version: a
// ticket whose step was not submitted (or was already) serves nothing.
func dropSecretTicket(ctx context.Context, store Store, token string) error {
	id := ticketDigest(token)
	rec, err := store.GetRecord(ctx, kindSecretTicket, id)
	if err != nil {
		if IsNotFound(err) {
			return nil
		}
		return err
	}
	if err := store.DeleteRecord(ctx, kindSecretTicket, id, rec.Version); err != nil && !IsNotFound(err) && !IsConflict(err) {
		return err
	}
	return nil
}

// expireSecretTickets deletes the tickets past their expiry (maintenance):
// a ticket lives ten minutes, so few are ever stored.
func (g *Gateway) expireSecretTickets(ctx context.Context) (int, error) {
	return expireRecords(ctx, g.store, kindSecretTicket, g.now(), func(t secretTicketRecord) time.Time { return t.ExpiresAt })
}
