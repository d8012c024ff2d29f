package gateway

import (
	"errors"
	"net/http"

	"github.com/rodon-compute/rodon/api"
)

func (g *Gateway) handleMembers(c *call) error {
	pg, err := parsePage(c.r.URL.Query(), "members")
	if err != nil {
		return err
	}
	recs, next, err := scanPage[accountRecord](c.ctx, g.store, kindAccount, "", pg, nil)
	if err != nil {
		return err
	}
	out := make([]api.Account, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.Value.public())
	}
	return c.page("members", out, next)
}

// checkGrant checks that the caller may give (or take) role: admins and
// owners are made and unmade by owners only, and owners act everywhere.
func checkGrant(p *principal, role api.Role, workspaces []string) error {
	if role == api.RoleNone {
		return badRequest("field \"role\" is required: viewer, editor, admin or owner")
	}
	if role >= api.RoleAdmin && p.Role < api.RoleOwner {
		return forbidden("only an owner may grant or take the %s role", role)
	}
	if role > p.Role {
		return forbidden("cannot grant %s: more than your own role %s", role, p.Role)
	}
	if role == api.RoleOwner && len(workspaces) > 0 {
		return badRequest("an owner cannot be limited to workspaces: leave \"workspaces\" empty")
	}
	return nil
}

func (g *Gateway) handleCreateMember(c *call) error {
	var req api.CreateMemberRequest
	if err := c.decode(&req); err != nil {
		return err
	}
	if err := checkEmail(req.Email); err != nil {
		return badRequest("field \"email\": %v", err)
	}
	if err := checkGrant(c.p, req.Role, req.Workspaces); err != nil {
		return err
	}
	if err := g.checkWorkspaceList(c, req.Workspaces); err != nil {
		return err
	}
	email := normalizeEmail(req.Email)
	c.target = accountID(email)
	// A person who exists already (a member of another account) keeps
	// their password: the request's is not needed, and not used.
	var p personRecord
	_, err := getRecord(c.ctx, g.store, kindPerson, accountID(email), &p)
	if err != nil && !IsNotFound(err) {
		return err
	}
	if len(p.Tenants) == 0 && (len(req.Password) < minPassword || len(req.Password) > 1024) {
		return badRequest("field \"password\": want %d to 1024 characters", minPassword)
	}
	a, existing, err := joinTenant(c.ctx, g.store, email, req.Password, req.Role, req.Workspaces, g.now())
	if err != nil {
		if IsConflict(err) {
			return conflict("a member with email %s exists already", email)
		}
		if errors.Is(err, errNeedPassword) {
			return badRequest("field \"password\": want %d to 1024 characters", minPassword)
		}
		return err
	}
	out := a.public()
	out.Existing = existing
	return c.json(http.StatusCreated, out)
}

// getAccount reads member id (checked), or answers 404.
func (g *Gateway) getAccount(c *call, id string) (accountRecord, uint64, error) {
	var a accountRecord
	if !validID(id, prefixAccount) {
		return a, 0, badRequest("member id %q: want acct- and letters or digits", id)
	}
	c.target = id
	v, err := getRecord(c.ctx, g.store, kindAccount, id, &a)
	if IsNotFound(err) {
		return a, 0, notFound("no member %s", id)
	}
	return a, v, err
}

// ownerCount counts the owners, up to two (all the callers need to know
// is whether there is more than one).
func (g *Gateway) ownerCount(c *call) (int, error) {
	n := 0
	err := eachRecord(c.ctx, g.store, kindAccount, "", func(r versioned[accountRecord]) (bool, error) {
		if r.Value.Role == api.RoleOwner {
			n++
		}
		return n < 2, nil
	})
	return n, err
}

func (g *Gateway) handleUpdateMember(c *call) error {
	a, version, err := g.getAccount(c, c.r.PathValue("id"))
	if err != nil {
		return err
	}
	var req api.UpdateMemberRequest
	if err := c.decode(&req); err != nil {
		return err
	}
	if req.Role == nil && req.Workspaces == nil {
		return badRequest("nothing to change: send \"role\" and/or \"workspaces\"")
	}
	role, workspaces := a.Role, a.Workspaces
	if req.Role != nil {
		role = *req.Role
	}
	if req.Workspaces != nil {
		workspaces = *req.Workspaces
	}
	// Both the old and the new role must be the caller's to give.
	if err := checkGrant(c.p, a.Role, nil); err != nil {
		return err
	}
	if err := checkGrant(c.p, role, workspaces); err != nil {
		return err
	}
	if err := g.checkWorkspaceList(c, workspaces); err != nil {
		return err
	}
	if a.Role == api.RoleOwner && role != api.RoleOwner {
		if n, err := g.ownerCount(c); err != nil {
			return err
		} else if n <= 1 {
			return conflict("%s is the last owner: make another owner first", a.Email)
		}
	}
	// A new generation ends the member's sign-ins and streams: they sign
	// in again with what they may do now.
	a.Role, a.Workspaces, a.Generation = role, workspaces, newGeneration()
	if _, err := putRecord(c.ctx, g.store, kindAccount, a.ID, version, &a); err != nil {
		if IsConflict(err) {
			return conflict("member %s changed meanwhile: read it again and retry", a.ID)
		}
		return err
	}
	return c.json(http.StatusOK, a.public())
}

func (g *Gateway) handleDeleteMember(c *call) error {
	a, version, err := g.getAccount(c, c.r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := checkGrant(c.p, a.Role, nil); err != nil {
		return err
	}
	if a.Role == api.RoleOwner {
		if n, err := g.ownerCount(c); err != nil {
			return err
		} else if n <= 1 {
			return conflict("%s is the last owner: make another owner first", a.Email)
		}
	}
	if err := g.store.DeleteRecord(c.ctx, kindAccount, a.ID, version); err != nil {
		if IsConflict(err) || IsNotFound(err) {
			return conflict("member %s changed meanwhile: read it again and retry", a.ID)
		}
		return err
	}
	g.leaveTenant(c.ctx, a.ID)
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}
