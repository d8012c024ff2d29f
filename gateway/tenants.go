package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// Tenants and their members (docs/design/tenants.md). A person (global
// record) is a member of one or more tenants, with a role in each (the
// scoped account record of the same id); a sign-in acts in one of them at
// a time.

// defaultTenantName names the tenant of a bootstrap without a name, and
// the one migrate.go moves a cluster from before tenants into.
const defaultTenantName = "default"

func (t *tenantRecord) public(role api.Role, current bool) api.Tenant {
	return api.Tenant{ID: t.ID, Name: t.Name, CreatedAt: t.CreatedAt, Role: role, Current: current}
}

// errNeedPassword is joinTenant's refusal to make a person without a
// password.
var errNeedPassword = errors.New("a new person needs a password")

// joinTenant makes the person of email a member of ctx's tenant with role
// and workspaces. A new person is made with password; an existing one
// keeps theirs (existing is then true, and password is not used; "" is
// errNeedPassword for a new one). A person who is a member of no tenant
// any more counts as new. A member of the tenant already is a
// conflict.
func joinTenant(ctx context.Context, s *tenantStore, email, password string, role api.Role, workspaces []string, now time.Time) (a accountRecord, existing bool, err error) {
	email = normalizeEmail(email)
	id, tenant := accountID(email), tenantFrom(ctx)
	if tenant == "" {
		return a, false, errNoTenant
	}
	for try := 0; ; try++ {
		if try == casTries {
			return a, false, fmt.Errorf("person %s kept changing; retry", id)
		}
		var p personRecord
		version, err := getRecord(ctx, s, kindPerson, id, &p)
		switch {
		case IsNotFound(err):
			if password == "" {
				return a, false, errNeedPassword
			}
			p, version, existing = personRecord{ID: id, Email: email, PasswordHash: hashPassword(password), CreatedAt: now}, 0, false
		case err != nil:
			return a, false, err
		case len(p.Tenants) == 0:
			// A person no account has any more is made anew.
			if password == "" {
				return a, false, errNeedPassword
			}
			p.PasswordHash, p.LastTenant, existing = hashPassword(password), "", false
		default:
			existing = true
		}
		if slices.Contains(p.Tenants, tenant) {
			break
		}
		p.Tenants = append(p.Tenants, tenant)
		if _, err := putRecord(ctx, s, kindPerson, id, version, &p); IsConflict(err) {
			continue
		} else if err != nil {
			return a, false, err
		}
		break
	}
	a = accountRecord{ID: id, Email: email, Role: role, Workspaces: workspaces, CreatedAt: now, Generation: newGeneration()}
	_, err = putRecord(ctx, s, kindAccount, id, 0, &a)
	return a, existing, err
}

// leaveTenant drops ctx's tenant from person id's list (best effort: the
// membership record, already deleted, is what counts).
func (g *Gateway) leaveTenant(ctx context.Context, id string) {
	tenant := tenantFrom(ctx)
	for range casTries {
		var p personRecord
		version, err := getRecord(ctx, g.store, kindPerson, id, &p)
		i := slices.Index(p.Tenants, tenant)
		if err != nil || i < 0 {
			return
		}
		p.Tenants = slices.Delete(p.Tenants, i, i+1)
		if _, err := putRecord(ctx, g.store, kindPerson, id, version, &p); !IsConflict(err) {
			return
		}
	}
}

// memberIn reads person id's membership of tenant.
func (g *Gateway) memberIn(ctx context.Context, tenant, id string) (accountRecord, uint64, error) {
	var a accountRecord
	v, err := getRecord(withTenant(ctx, tenant), g.store, kindAccount, id, &a)
	return a, v, err
}

// signinTenant picks the tenant a sign-in of p starts in: the one they
// were in last, else the first they belong to. It returns their
// membership there.
func (g *Gateway) signinTenant(ctx context.Context, p *personRecord) (string, accountRecord, uint64, error) {
	candidates := p.Tenants
	if p.LastTenant != "" {
		candidates = append([]string{p.LastTenant}, p.Tenants...)
	}
	for _, t := range candidates {
		a, v, err := g.memberIn(ctx, t, p.ID)
		if err == nil {
			return t, a, v, nil
		}
		if !IsNotFound(err) {
			return "", a, 0, err
		}
	}
	return "", accountRecord{}, 0, forbidden("%s is a member of no account: ask an account's admin to invite you", p.Email)
}

// rememberTenant records tenant as person id's last (best effort).
func (g *Gateway) rememberTenant(ctx context.Context, id, tenant string) {
	var p personRecord
	version, err := getRecord(ctx, g.store, kindPerson, id, &p)
	if err != nil || p.LastTenant == tenant {
		return
	}
	p.LastTenant = tenant
	if _, err := putRecord(ctx, g.store, kindPerson, id, version, &p); err != nil && !IsConflict(err) {
		g.log.Warn("remember the last account", "account", id, "error", err)
	}
}

// handleAccounts lists the caller's tenants: a person's memberships, a
// key's or grant's one tenant.
func (g *Gateway) handleAccounts(c *call) error {
	ids := []string{c.p.tenant}
	if c.p.account != nil {
		var p personRecord
		if _, err := getRecord(c.ctx, g.store, kindPerson, c.p.account.ID, &p); err != nil && !IsNotFound(err) {
			return err
		}
		for _, t := range p.Tenants {
			if !slices.Contains(ids, t) {
				ids = append(ids, t)
			}
		}
	}
	out := make([]api.Tenant, 0, len(ids))
	for _, id := range ids {
		role := c.p.Role
		if id != c.p.tenant {
			a, _, err := g.memberIn(c.ctx, id, c.p.account.ID)
			if IsNotFound(err) {
				continue // left it
			}
			if err != nil {
				return err
			}
			role = a.Role
		}
		var t tenantRecord
		if _, err := getRecord(c.ctx, g.store, kindTenant, id, &t); IsNotFound(err) {
			continue
		} else if err != nil {
			return err
		}
		out = append(out, t.public(role, id == c.p.tenant))
	}
	return c.json(http.StatusOK, out)
}

// handleSwitch moves the caller's sign-in to another tenant they are a
// member of (404 for any other, existing or not).
func (g *Gateway) handleSwitch(c *call) error {
	var req api.SwitchAccountRequest
	if err := c.decode(&req); err != nil {
		return err
	}
	if !validID(req.Account, prefixTenant) {
		return badRequest("field \"account\" %q: want an account id such as acct-%s", truncateText(req.Account, 40), "abc123")
	}
	ck, err := c.r.Cookie(cookieName)
	if err != nil || c.p.account == nil {
		return badRequest("switching accounts needs the %s cookie", cookieName)
	}
	c.target = req.Account
	a, _, err := g.memberIn(c.ctx, req.Account, c.p.account.ID)
	if IsNotFound(err) {
		return notFound("no account %s", req.Account)
	}
	if err != nil {
		return err
	}
	sid := digest(ck.Value)
	var s signinRecord
	version, err := getRecord(c.ctx, g.store, kindSignin, sid, &s)
	if IsNotFound(err) {
		return unauthorized("signed out meanwhile: sign in again")
	}
	if err != nil {
		return err
	}
	s.Tenant, s.Generation = req.Account, a.Generation
	if _, err := putRecord(c.ctx, g.store, kindSignin, sid, version, &s); err != nil {
		if IsConflict(err) {
			return conflict("the sign-in changed meanwhile: retry")
		}
		return err
	}
	g.rememberTenant(c.ctx, a.ID, req.Account)
	return c.json(http.StatusOK, api.SignInAnswer{Account: a.public(), CSRFToken: c.p.csrf})
}

// CreateTenant creates a tenant named name with the person of ownerEmail
// as its owner (`gateway account create`: a platform operator's act). A
// new person gets a random password, answered once; an existing person
// keeps theirs.
func CreateTenant(ctx context.Context, store Store, name, ownerEmail string, now time.Time) (api.CreateTenantAnswer, error) {
	var out api.CreateTenantAnswer
	if err := checkName("name", name); err != nil {
		return out, fmt.Errorf("account name %q: want 1 to 100 characters without control characters", name)
	}
	if err := checkEmail(ownerEmail); err != nil {
		return out, err
	}
	t := tenantRecord{ID: newID(prefixTenant), Name: name, CreatedAt: now.UTC()}
	s := tenantStore{Store: store}
	if _, err := putRecord(ctx, &s, kindTenant, t.ID, 0, &t); err != nil {
		return out, fmt.Errorf("create account: %w", err)
	}
	password := newPassword()
	a, existing, err := joinTenant(withTenant(ctx, t.ID), &s, ownerEmail, password, api.RoleOwner, nil, now.UTC())
	if err != nil {
		return out, fmt.Errorf("make %s its owner: %w", ownerEmail, err)
	}
	out = api.CreateTenantAnswer{Tenant: t.public(api.RoleOwner, false), OwnerID: a.ID}
	if !existing {
		out.OwnerPassword = password
	}
	return out, nil
}

// ListTenants lists every tenant (`gateway account list`), in id order.
func ListTenants(ctx context.Context, store Store) ([]api.Tenant, error) {
	var out []api.Tenant
	err := eachRecord(ctx, store, kindTenant, "", func(t versioned[tenantRecord]) (bool, error) {
		out = append(out, t.Value.public(api.RoleNone, false))
		return true, nil
	})
	return out, err
}
