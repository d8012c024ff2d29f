package gateway

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// Credential names.
const (
	cookieName = "rodon_session"
	csrfHeader = "X-CSRF-Token"
	keyPrefix  = "rk_"
	// auditTimeout bounds an audit append.
	auditTimeout = 10 * time.Second
	// keyUseEvery is how stale a key's last_used_at may get before a use
	// records it again.
	keyUseEvery = time.Minute
)

// principal is an authenticated caller: a person signed in with the
// cookie, an API key, or a run's grant.
type principal struct {
	actor api.Actor
	// tenant is the one tenant the caller acts in (serveRoute puts it
	// into the call's context).
	tenant string
	Role   api.Role
	// Workspaces limits the caller; empty is every workspace.
	Workspaces []string
	cred       api.CredentialRef
	// cookie is set for a person signed in with the cookie; csrf is then
	// the token their writes must carry.
	cookie  bool
	csrf    string
	account *accountRecord
	key     *keyRecord
	// grant is set for a run's grant (grant.go): it may call only the
	// routes marked grant, of its own run.
	grant *grantClaims
}

// canSee reports whether the caller may read (and, with the role, act)
// in workspace ws.
func (p *principal) canSee(ws string) bool {
	return len(p.Workspaces) == 0 || slices.Contains(p.Workspaces, ws)
}

// checkCSRF compares the header's token with the session's in constant
// time.
func (p *principal) checkCSRF(got string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(p.csrf)) == 1
}

// csrfToken derives a session's CSRF token from its cookie token: nothing
// more to store, and nobody without the cookie can compute it.
func csrfToken(sessionToken string) string {
	return digest("rodon-csrf\x00" + sessionToken)[:43]
}

// authenticate finds the caller of r: nil without a credential, an
// unauthorized error for a bad one. A bearer key or grant wins over the
// cookie.
func (g *Gateway) authenticate(ctx context.Context, r *http.Request) (*principal, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return nil, unauthorized("Authorization header: want Bearer rk_<id>_<secret>")
		}
		tok = strings.TrimSpace(tok)
		if strings.HasPrefix(tok, grantPrefix) {
			return g.authenticateGrant(ctx, tok)
		}
		return g.authenticateKey(ctx, tok)
	}
	ck, err := r.Cookie(cookieName)
	if err != nil || ck.Value == "" {
		return nil, nil
	}
	return g.authenticateSession(ctx, ck.Value)
}

func (g *Gateway) authenticateKey(ctx context.Context, tok string) (*principal, error) {
	rest, ok := strings.CutPrefix(tok, keyPrefix)
	id, secret, ok2 := strings.Cut(rest, "_")
	if !ok || !ok2 || !validID(prefixKey+id, prefixKey) || secret == "" {
		return nil, unauthorized("API key: want rk_<id>_<secret> as POST /v1/keys answered it")
	}
	// The key's tenant first: its record is scoped.
	var kt keyTenantRecord
	if _, err := getRecord(ctx, g.store, kindKeyTenant, prefixKey+id, &kt); IsNotFound(err) || err == nil && kt.Tenant == "" {
		return nil, unauthorized("API key %s%s does not exist (deleted?)", prefixKey, id)
	} else if err != nil {
		return nil, err
	}
	ctx = withTenant(ctx, kt.Tenant)
	var k keyRecord
	version, err := getRecord(ctx, g.store, kindKey, prefixKey+id, &k)
	if IsNotFound(err) {
		return nil, unauthorized("API key %s%s does not exist (deleted?)", prefixKey, id)
	}
	if err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare([]byte(digest(secret)), []byte(k.SecretHash)) != 1 {
		return nil, unauthorized("API key %s: wrong secret", k.ID)
	}
	if now := g.now(); now.Sub(k.LastUsedAt) > keyUseEvery {
		// Best effort: a lost race means another request just did it.
		k.LastUsedAt = now
		if _, err := putRecord(ctx, g.store, kindKey, k.ID, version, &k); err != nil && !IsConflict(err) {
			g.log.Warn("record key use", "key_id", k.ID, "error", err)
		}
	}
	return &principal{
		actor: api.Actor{Kind: "key", ID: k.ID}, tenant: kt.Tenant, Role: k.Role, Workspaces: k.Workspaces,
		cred: api.CredentialRef{Kind: "key", ID: k.ID}, key: &k,
	}, nil
}

// authenticateGrant verifies a run's grant. Its principal acts as the
// run (actor grant/RUN) in the run's workspace; authorize admits it only
// on the routes marked grant, of that run, while the run is live.
func (g *Gateway) authenticateGrant(ctx context.Context, tok string) (*principal, error) {
	c, err := g.grants.verify(ctx, tok)
	if errors.Is(err, errBadGrant) {
		g.log.Debug("grant refused", "error", err)
		return nil, unauthorized("grant does not verify (expired, tampered, or not this cluster's)")
	}
	if err != nil {
		return nil, err
	}
	if c.Tenant == "" {
		// A grant from before tenants: its run moved to the default
		// tenant (migrate.go).
		if c.Tenant, err = migratedTenant(ctx, g.store); err != nil {
			return nil, err
		}
	}
	return &principal{
		actor: api.Actor{Kind: "grant", ID: c.Run}, tenant: c.Tenant, Role: api.RoleEditor, Workspaces: []string{c.Workspace},
		cred: api.CredentialRef{Kind: "grant", ID: c.ID}, grant: c,
	}, nil
}

func (g *Gateway) authenticateSession(ctx context.Context, tok string) (*principal, error) {
	sid := digest(tok)
	var s signinRecord
	version, err := getRecord(ctx, g.store, kindSignin, sid, &s)
	if IsNotFound(err) {
		return nil, unauthorized("signed out or sign-in expired: sign in again")
	}
	if err != nil {
		return nil, err
	}
	if !g.now().Before(s.ExpiresAt) {
		if err := g.store.DeleteRecord(ctx, kindSignin, sid, version); err != nil && !IsNotFound(err) && !IsConflict(err) {
			g.log.Warn("delete expired sign-in", "error", err)
		}
		return nil, unauthorized("sign-in expired: sign in again")
	}
	if s.Tenant == "" {
		return nil, unauthorized("sign-in from before accounts: sign in again")
	}
	ctx = withTenant(ctx, s.Tenant)
	var a accountRecord
	if _, err := getRecord(ctx, g.store, kindAccount, s.Account, &a); err != nil {
		if IsNotFound(err) {
			return nil, unauthorized("the membership of this sign-in no longer exists")
		}
		return nil, err
	}
	if a.Generation == "" || s.Generation != a.Generation {
		// The member was deleted (and invited again) or changed since.
		if err := g.store.DeleteRecord(ctx, kindSignin, sid, version); err != nil && !IsNotFound(err) && !IsConflict(err) {
			g.log.Warn("delete a stale sign-in", "error", err)
		}
		return nil, unauthorized("the member was changed or removed since this sign-in: sign in again")
	}
	return &principal{
		actor: api.Actor{Kind: "account", ID: a.ID}, tenant: s.Tenant, Role: a.Role, Workspaces: a.Workspaces,
		cred: api.CredentialRef{Kind: "session", ID: sessionRef(sid)}, cookie: true, csrf: csrfToken(tok), account: &a,
	}, nil
}

// sessionRef is how the audit log names a sign-in session: a prefix of
// the digest that is its record id (not enough to find it).
func sessionRef(sid string) string { return sid[:16] }
