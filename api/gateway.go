package api

import "time"

// The JSON objects of the gateway's API (docs/GATEWAY.md): what its routes
// answer and take. web/src/api.ts declares the page's view of them, which
// web's TestAPITypes checks against these JSON names.

// Actor names who did something: an account or an API key.
type Actor struct {
	// Kind is "account" or "key".
	Kind string `json:"kind"`
	ID   string `json:"id"`
}

// Account is a member as the API shows it: never a password hash.
type Account struct {
	ID         string    `json:"id"`
	Email      string    `json:"email"`
	Role       Role      `json:"role"`
	Workspaces []string  `json:"workspaces"`
	CreatedAt  time.Time `json:"created_at"`
	// Existing is set in the answer of POST /v1/members when the email
	// was a person's already (a member of another account): they sign
	// in with their own password, and the request's was not used.
	Existing bool `json:"existing,omitempty"`
}

// Key is an API key as the API shows it: never its secret.
type Key struct {
	ID         string    `json:"id"`
	Name       string    `json:"name"`
	Role       Role      `json:"role"`
	Workspaces []string  `json:"workspaces"`
	CreatedAt  time.Time `json:"created_at"`
	LastUsedAt time.Time `json:"last_used_at,omitzero"`
}

// Workspace is a named set of files that the steps of its runs see.
type Workspace struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// Session groups the runs of one conversation or task in a workspace
// (kind "session").
type Session struct {
	ID        string    `json:"id"`
	Workspace string    `json:"workspace"`
	Title     string    `json:"title"`
	CreatedBy Actor     `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
}

// Me is the answer of GET /v1/me: the caller's credential, role and
// workspaces, and the CSRF token of a sign-in session.
type Me struct {
	Account    *Account `json:"account,omitempty"`
	Key        *Key     `json:"key,omitempty"`
	Role       Role     `json:"role"`
	Workspaces []string `json:"workspaces"`
	CSRFToken  string   `json:"csrf_token,omitempty"`
	// Tenant is the tenant the caller acts in, with their role there.
	Tenant *Tenant `json:"tenant,omitempty"`
}

// SignInRequest is the body of POST /v1/auth/signin.
type SignInRequest struct {
	Email    string `json:"email"`
	Password string `json:"password"`
}

// SignInAnswer is the answer of POST /v1/auth/signin; the session itself
// is the cookie.
type SignInAnswer struct {
	Account   Account `json:"account"`
	CSRFToken string  `json:"csrf_token"`
}

// CreateMemberRequest is the body of POST /v1/members.
type CreateMemberRequest struct {
	Email      string   `json:"email"`
	Password   string   `json:"password"`
	Role       Role     `json:"role"`
	Workspaces []string `json:"workspaces"`
}

// UpdateMemberRequest is the body of PATCH /v1/members/{id}: the fields
// present are changed.
type UpdateMemberRequest struct {
	Role       *Role     `json:"role"`
	Workspaces *[]string `json:"workspaces"`
}

// CreateKeyRequest is the body of POST /v1/keys.
type CreateKeyRequest struct {
	Name       string   `json:"name"`
	Role       Role     `json:"role"`
	Workspaces []string `json:"workspaces"`
}

// CreateKeyAnswer is the answer of POST /v1/keys.
type CreateKeyAnswer struct {
	Key Key `json:"key"`
	// Secret is the whole credential, rk_<id>_<secret>; it is shown once.
	Secret string `json:"secret"`
}

// CreateWorkspaceRequest is the body of POST /v1/workspaces.
type CreateWorkspaceRequest struct {
	Name string `json:"name"`
}

// CreateSessionRequest is the body of POST /v1/sessions.
type CreateSessionRequest struct {
	Workspace string `json:"workspace"`
	Title     string `json:"title"`
}

// AuditDropRequest is the body of the gateway's POST /v1/audit/drop (the
// scheduler's is DropAuditRequest, which the gateway fills in).
type AuditDropRequest struct {
	// Before drops the entries whose seq is less than it.
	Before uint64 `json:"before"`
}

// AuditDropAnswer is the answer of the gateway's POST /v1/audit/drop.
type AuditDropAnswer struct {
	Dropped uint64 `json:"dropped"`
}

// AuditDocument is the gateway's audit document (AuditEntry.Entry of
// GET /v1/audit); the scheduler adds the time and sequence number.
type AuditDocument struct {
	// Account is the tenant the call acted in (its id, acct-...); empty
	// for a failed sign-in of an unknown email, which has none.
	Account string `json:"account,omitempty"`
	// Who is the account or key id; empty for a failed sign-in of an
	// unknown email.
	Who        string         `json:"who"`
	Role       string         `json:"role,omitempty"`
	Credential *CredentialRef `json:"credential,omitempty"`
	// Action names the route ("run.create", "auth.signin", ...).
	Action string `json:"action"`
	Target string `json:"target,omitempty"`
	// Result is "ok" or the error code answered.
	Result string `json:"result"`
	Client string `json:"client"`
	// Input is what a terminal received (terminal.close).
	Input *TerminalInput `json:"input,omitempty"`
	// Workspace, Path and Revision name what a write to a workspace's
	// files changed: the workspace, the path (none for a restore or an
	// upload of several files) and the revision it made (never the
	// contents).
	Workspace string `json:"workspace,omitempty"`
	Path      string `json:"path,omitempty"`
	Revision  string `json:"revision,omitempty"`
	// Secret and Version name the secret a secrets write set or deleted
	// and its version (never its value).
	Secret  string `json:"secret,omitempty"`
	Version int    `json:"version,omitempty"`
}

// TerminalInput is what one stream sent to a step's terminal: bytes of
// stdin, stdin messages, resizes, and how long the stream was open.
type TerminalInput struct {
	Bytes    int64   `json:"bytes"`
	Messages int64   `json:"messages"`
	Resizes  int64   `json:"resizes"`
	Seconds  float64 `json:"seconds"`
}

// CredentialRef names a credential, never its secret: Kind is password,
// session or key; ID the sign-in session's id (a prefix of its digest) or
// the key's id.
type CredentialRef struct {
	Kind string `json:"kind"`
	ID   string `json:"id,omitempty"`
}
