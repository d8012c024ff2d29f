package api

import "time"

// Tenant is an account in the sense of SPEC.md "Secrets": an organisation
// with its members, workspaces, keys, library, secrets and audit, which
// shares the cluster with other tenants and never sees any of theirs. (The
// older name Account is a member of one tenant, as the API shows a person
// with their role there.)
type Tenant struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	// Role is the caller's role in this tenant (GET /v1/accounts).
	Role Role `json:"role,omitempty"`
	// Current marks the tenant the caller's sign-in acts in.
	Current bool `json:"current,omitempty"`
}

// SwitchAccountRequest is the body of POST /v1/auth/switch: a signed-in
// person moves their session to another tenant they are a member of.
type SwitchAccountRequest struct {
	Account string `json:"account"`
}

// CreateTenantRequest creates a tenant with its first owner (`gateway
// account create`, a platform operator's act, not a tenant role's).
type CreateTenantRequest struct {
	Name       string `json:"name"`
	OwnerEmail string `json:"owner_email"`
}

// CreateTenantAnswer answers CreateTenantRequest: the owner's password is
// shown once, only when the owner is a new person.
type CreateTenantAnswer struct {
	Tenant        Tenant `json:"account"`
	OwnerID       string `json:"owner_id"`
	OwnerPassword string `json:"owner_password,omitempty"`
}
