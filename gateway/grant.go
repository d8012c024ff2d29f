package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// grantPrefix starts every grant (SPEC.md: "rg_...").
const grantPrefix = "rg_"

// grantClaims are what a grant says (docs/design/agents.md, "Grants"):
// exactly the agent file's tools, secrets, network, image, limits and
// gates, bound to one run, its workspace and the agent file's revision.
// The token is "rg_" + a compact JWS (go-jose, EdDSA over Ed25519) of
// these claims with the registered ones (iss, aud, sub = run, jti = ID,
// iat, nbf, exp), signed by a key of the gateway that issued it (header
// kid; the public key is record grant_key/KID, so any gateway verifies).
type grantClaims struct {
	ID        string `json:"-"` // jti
	Run       string `json:"run"`
	Workspace string `json:"workspace"`
	// Tenant is the run's tenant: the grant's principal acts in it.
	Tenant string `json:"acct"`
	// Agent: the agent's name, its file's revision and digest, and the
	// grant's contents.
	Agent         string          `json:"agent"`
	AgentRevision string          `json:"agent_revision"`
	AgentSHA256   string          `json:"agent_sha256"`
	Tools         []string        `json:"tools"`
	Secrets       []string        `json:"secrets"`
	Network       string          `json:"network"`
	Image         string          `json:"image"`
	Limits        api.AgentLimits `json:"limits"`
	Gates         []string        `json:"gates"`
	IssuedAt      time.Time       `json:"-"`
	Expires       time.Time       `json:"-"`
}

// has reports whether the grant holds tool.
func (c *grantClaims) has(tool string) bool {
	for _, t := range c.Tools {
		if t == tool {
			return true
		}
	}
	return false
}

// errBadGrant is every grant that does not verify (tampered, unknown key,
// expired, malformed): the caller gets 401 without more.
var errBadGrant = errors.New("grant does not verify")

// grants issues and verifies grants. Its signing key lives in memory only
// and rotates (grantKeyEvery); its public half is published as a record
// kept until every grant it signed expired. Safe for concurrent use.
type grants interface {
	// issue signs claims (ID, IssuedAt and Expires set by the caller)
	// and returns the token.
	issue(ctx context.Context, c grantClaims) (string, error)
	// verify checks tok's signature, audience and expiry and returns
	// its claims; errBadGrant (wrapped) when it does not verify.
	verify(ctx context.Context, tok string) (*grantClaims, error)
}
