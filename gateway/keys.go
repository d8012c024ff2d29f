package gateway

import (
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/rodon-compute/rodon/api"
)

func (g *Gateway) handleKeys(c *call) error {
	pg, err := parsePage(c.r.URL.Query(), "keys")
	if err != nil {
		return err
	}
	recs, next, err := scanPage[keyRecord](c.ctx, g.store, kindKey, "", pg, nil)
	if err != nil {
		return err
	}
	out := make([]api.Key, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.Value.public())
	}
	return c.page("keys", out, next)
}

func (g *Gateway) handleCreateKey(c *call) error {
	var req api.CreateKeyRequest
	if err := c.decode(&req); err != nil {
		return err
	}
	if err := checkName("name", req.Name); err != nil {
		return err
	}
	if err := checkGrant(c.p, req.Role, req.Workspaces); err != nil {
		return err
	}
	if err := g.checkWorkspaceList(c, req.Workspaces); err != nil {
		return err
	}
	id := newID(prefixKey)
	secret := randomString(52)
	k := keyRecord{ID: id, Name: req.Name, Role: req.Role, Workspaces: req.Workspaces, SecretHash: digest(secret),
		CreatedBy: c.p.actor.ID, CreatedAt: g.now()}
	c.target = id
	// The key's tenant first: a bearer key is looked up there before its
	// (scoped) record.
	if _, err := putRecord(c.ctx, g.store, kindKeyTenant, id, 0, &keyTenantRecord{Tenant: c.p.tenant}); err != nil {
		return err
	}
	if _, err := putRecord(c.ctx, g.store, kindKey, id, 0, &k); err != nil {
		return err
	}
	return c.json(http.StatusCreated, api.CreateKeyAnswer{Key: k.public(),
		Secret: keyPrefix + strings.TrimPrefix(id, prefixKey) + "_" + secret})
}

func (g *Gateway) handleDeleteKey(c *call) error {
	id := c.r.PathValue("id")
	if !validID(id, prefixKey) {
		return badRequest("key id %q: want key- and letters or digits", id)
	}
	c.target = id
	var k keyRecord
	version, err := getRecord(c.ctx, g.store, kindKey, id, &k)
	if IsNotFound(err) {
		return notFound("no key %s", id)
	}
	if err != nil {
		return err
	}
	if err := checkGrant(c.p, k.Role, nil); err != nil {
		return err
	}
	if err := g.store.DeleteRecord(c.ctx, kindKey, id, version); err != nil && !IsNotFound(err) {
		if IsConflict(err) {
			return conflict("key %s changed meanwhile: retry", id)
		}
		return err
	}
	if err := deleteAny(c.ctx, g.store, kindKeyTenant, id); err != nil {
		g.log.Warn("delete the key's tenant index", "key_id", id, "error", err)
	}
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}

// checkName checks a short human name (1-100 characters, no control
// characters).
func checkName(field, s string) error {
	if strings.TrimSpace(s) == "" || utf8.RuneCountInString(s) > 100 || !utf8.ValidString(s) ||
		strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return badRequest("field %q: want 1 to 100 characters without control characters", field)
	}
	return nil
}
