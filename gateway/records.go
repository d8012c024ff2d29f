package gateway

import (
	"time"

	"github.com/rodon-compute/rodon/api"
)

// The documents the gateway keeps in the record store, one type per kind.
// Secrets are never stored: passwords as argon2id hashes, key secrets and
// sign-in tokens as SHA-256 digests.

// tenantRecord is a tenant (kind "tenant", global, id "acct-..."): an
// organisation whose records are stored under its id (tenant.go).
type tenantRecord struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// personRecord is a person (kind "person", global, id accountID(email)):
// who signs in. Their memberships are the scoped account records of the
// same id; Tenants lists the tenants they were made a member of (a hint
// that GET /v1/accounts checks against the membership records).
type personRecord struct {
	ID           string    `json:"id"`
	Email        string    `json:"email"`
	PasswordHash string    `json:"password_hash"`
	CreatedAt    time.Time `json:"created_at"`
	Tenants      []string  `json:"tenants,omitempty"`
	// LastTenant is the tenant the person signed in to or switched to
	// last: the next sign-in starts there.
	LastTenant string `json:"last_tenant,omitempty"`
}

// keyTenantRecord says which tenant an API key belongs to (kind
// "key_tenant", global, id the key's): what a bearer key needs before a
// tenant is known.
type keyTenantRecord struct {
	Tenant string `json:"tenant"`
}

// accountRecord is a member of a tenant (kind "account", scoped, id
// accountID(email), the id of their person record).
type accountRecord struct {
	ID    string   `json:"id"`
	Email string   `json:"email"`
	Role  api.Role `json:"role"`
	// Workspaces limits the member to these workspaces; empty is all.
	Workspaces []string `json:"workspaces,omitempty"`
	// PasswordHash is set only in a record from before tenants, which
	// was the person too: migrate.go moves it to the person record.
	PasswordHash string    `json:"password_hash,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	// Generation is random, made anew whenever the member is created or
	// changed: a sign-in is valid only for the generation it was made
	// in, so deleting a member (and inviting the same email again) or
	// changing their role or workspaces ends their sign-ins and streams.
	Generation string `json:"generation,omitempty"`
}

// keyRecord is an API key (kind "key", id "key-...").
type keyRecord struct {
	ID         string   `json:"id"`
	Name       string   `json:"name"`
	Role       api.Role `json:"role"`
	Workspaces []string `json:"workspaces,omitempty"`
	// SecretHash is the hex SHA-256 of the key's secret part.
	SecretHash string    `json:"secret_hash"`
	CreatedBy  string    `json:"created_by"`
	CreatedAt  time.Time `json:"created_at"`
	LastUsedAt time.Time `json:"last_used_at,omitzero"`
}

// signinRecord is a person's sign-in session (kind "signin", global, id
// the hex SHA-256 of the cookie's token).
type signinRecord struct {
	// Account is the person's id.
	Account string `json:"account"`
	// Tenant is the tenant the sign-in acts in (POST /v1/auth/switch
	// moves it).
	Tenant string `json:"tenant"`
	// Generation is the membership's in Tenant when the sign-in was made
	// or moved.
	Generation string    `json:"generation,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// bootstrapRecord marks who creates the first owner (kind "bootstrap", id
// "owner"): the gateway whose create wins.
type bootstrapRecord struct {
	Account string `json:"account"`
	// Tenant is the account the bootstrap creates.
	Tenant    string    `json:"tenant,omitempty"`
	StartedAt time.Time `json:"started_at"`
}

// runRecord is a run (kind "run", id "run-..."): its steps and how far
// the Driver got. The scheduler's step records hold the rest.
type runRecord struct {
	ID        string          `json:"id"`
	Workspace string          `json:"workspace"`
	Session   string          `json:"session,omitempty"`
	State     string          `json:"state"`
	CreatedBy api.Actor       `json:"created_by"`
	CreatedAt time.Time       `json:"created_at"`
	EndedAt   time.Time       `json:"ended_at,omitzero"`
	Steps     []runStepRecord `json:"steps"`
	Errors    []string        `json:"errors,omitempty"`
	Cancel    *api.Cancel     `json:"cancel,omitempty"`
	// CancelStep is the step that was live when the run was cancelled:
	// the run's cancel is confirmed when that step's is.
	CancelStep string `json:"cancel_step,omitempty"`
	// Agent is set on an agent run: a live run whose steps are tool
	// calls appended with its grant (agents.go).
	Agent *agentRunRecord `json:"agent,omitempty"`
}

// agentRunRecord is what an agent run keeps besides a run's fields.
type agentRunRecord struct {
	api.RunAgent
	// Grant is the grant's id (its jti): a grant is accepted only for
	// the run whose record names it, while the run is live.
	Grant string `json:"grant"`
	// Events is the last run event's seq: the next event is Events+1,
	// reserved by compare-and-set on the run record before it is
	// written (kind run_event, id RUN.SEQ).
	Events int `json:"events"`
	// Refusals counts the refused calls.
	Refusals int `json:"refusals"`
	// Awaiting is the proposal the run waits on (state
	// awaiting_approval); empty when running.
	Awaiting string `json:"awaiting,omitempty"`
	// Approved is the proposal a person approved last (gates.go): the
	// step its record names (ForStep) may apply it and no other
	// proposal. Kept after that step; its ForStep has passed then.
	Approved string `json:"approved,omitempty"`
	// Ending is set by finish (succeeded or failed, and why) until the
	// Driver ended the run (after its live Bash step, if any, ended).
	Ending *api.FinishRequest `json:"ending,omitempty"`
}

// liveRecord marks a run the Driver has work on (kind "run_live", id the
// run's): created before the run, deleted once the run is settled, so a
// pass reads only these and not every run ever made. Workspace and By
// (the creator's id) say which quota counters hold the run, for when the
// run record was never written.
type liveRecord struct {
	CreatedAt time.Time `json:"created_at"`
	Workspace string    `json:"workspace,omitempty"`
	By        string    `json:"by,omitempty"`
}

// runIndexRecord is an entry of a run index, written when the run is
// created and deleted with it: kind "run_ws" (id "WS.RUN": a workspace's
// runs, newest first, for the lists of one workspace) and kind
// "run_expiry" (id "TIME.RUN", TIME sorting oldest first: what retention
// reads). Run records themselves (kind "run") are listed newest first by
// their ids.
type runIndexRecord struct {
	Workspace string    `json:"workspace"`
	CreatedAt time.Time `json:"created_at"`
}

// runStepRecord is one step of a run.
type runStepRecord struct {
	ID    string          `json:"id"`
	Index int             `json:"index"`
	Spec  api.StepRequest `json:"spec"`
	// Status is pending (not submitted yet), submitted, ended (the
	// scheduler's record is terminal and the run moved on) or skipped
	// (cancelled without running); a file tool's step is calling until
	// its answer ends it.
	Status string `json:"status"`
	// View is the ended step as the API shows it, taken from the
	// scheduler when the step ended and kept up to date until Final (its
	// sandbox cleaned up and its cancel settled, or viewSettle after it
	// ended): from then on reading the run never asks the scheduler for
	// the step again, and the step may leave the scheduler's state.
	View    *api.RunStep `json:"view,omitempty"`
	Final   bool         `json:"final,omitempty"`
	EndedAt time.Time    `json:"ended_at,omitzero"`
	// Tool is set on a step of an agent run: the call it is. A file
	// tool's step is ended (with its View) when its answer is written; a
	// Bash step is a script step (Spec) the Driver submits like any.
	Tool *api.ToolStep `json:"tool,omitempty"`
}

// Run step statuses.
const (
	stepPending   = "pending"
	stepSubmitted = "submitted"
	stepEnded     = "ended"
	stepSkipped   = "skipped"
	// stepCalling is a file tool's step of an agent run while the gateway
	// answers it (agents.go); the Driver leaves it alone.
	stepCalling = "calling"
)

// live reports whether the run has not ended: running, or an agent run
// awaiting approval.
func (r *runRecord) live() bool {
	return r.State == api.RunRunning || r.State == api.RunAwaitingApproval
}

// settled reports whether the run is over and its cancel, if any, settled:
// nothing is left for the Driver to do.
func (r *runRecord) settled() bool {
	if r.live() || r.Cancel != nil && r.Cancel.ConfirmedAt.IsZero() && r.Cancel.Unverified == "" {
		return false
	}
	for _, s := range r.Steps {
		if s.Status == stepEnded && s.View != nil && !s.Final {
			return false
		}
	}
	return true
}
