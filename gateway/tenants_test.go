package gateway

import (
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/api"
)

// TestAccountsAndSwitch: a person in two accounts lists both with their
// role in each, switches between them (and only to theirs), signs in
// again where they were last; a member added in a second account keeps
// their password, and the answer says so without naming the first.
func TestAccountsAndSwitch(t *testing.T) {
	f := newFixture(t)
	ans, err := CreateTenant(t.Context(), f.raw, "bravo", "owner@example.com", f.g.now())
	if err != nil {
		t.Fatal(err)
	}
	if ans.OwnerPassword != "" || ans.OwnerID != accountID("owner@example.com") {
		t.Errorf("CreateTenant for an existing person = %+v, want no password", ans)
	}
	b := ans.Tenant.ID
	f.signIn("owner1", "owner@example.com", testPassword)

	var list []api.Tenant
	f.do("owner1", "GET", "/v1/accounts", "", 200, &list)
	if len(list) != 2 || list[0].ID != f.tenant || !list[0].Current || list[1].ID != b || list[1].Current || list[1].Role != api.RoleOwner {
		t.Fatalf("GET /v1/accounts = %+v, want the fixture's (current) and bravo", list)
	}
	f.do("owner1", "POST", "/v1/auth/switch", `{"account":"acct-nosuchaccount"}`, 404, nil)
	f.do("owner1", "POST", "/v1/auth/switch", `{"account":"`+b+`"}`, 200, nil)
	var me api.Me
	f.do("owner1", "GET", "/v1/me", "", 200, &me)
	if me.Tenant == nil || me.Tenant.ID != b || me.Tenant.Name != "bravo" || !me.Tenant.Current {
		t.Errorf("GET /v1/me after the switch: tenant %+v, want bravo", me.Tenant)
	}
	var wss []api.Workspace
	f.do("owner1", "GET", "/v1/workspaces", "", 200, &wss)
	if len(wss) != 0 {
		t.Errorf("bravo's workspaces = %+v, want none (the fixture's are not bravo's)", wss)
	}

	// A member of the fixture's account joins bravo: no password needed.
	var m api.Account
	w := f.do("owner1", "POST", "/v1/members", `{"email":"viewer@example.com","role":"editor"}`, 201, &m)
	if !m.Existing || m.Role != api.RoleEditor || strings.Contains(w.Body.String(), "fixture") || strings.Contains(w.Body.String(), f.tenant) {
		t.Errorf("POST /v1/members for an existing person = %s, want existing, naming no other account", w.Body)
	}
	f.do("owner1", "POST", "/v1/members", `{"email":"newbie@example.com","role":"viewer"}`, 400, nil)
	f.signIn("viewer1", "viewer@example.com", testPassword)
	f.do("viewer1", "GET", "/v1/accounts", "", 200, &list)
	if len(list) != 2 || list[0].Role != api.RoleViewer || list[1].Role != api.RoleEditor {
		t.Errorf("the viewer's accounts = %+v, want viewer here and editor in bravo", list)
	}

	// The owner signs in again: in bravo, where they were last.
	f.signIn("owner2", "owner@example.com", testPassword)
	f.do("owner2", "GET", "/v1/me", "", 200, &me)
	if me.Tenant == nil || me.Tenant.ID != b {
		t.Errorf("a new sign-in's tenant = %+v, want bravo (the last)", me.Tenant)
	}
	// A key sees its one account.
	f.do("key-viewer", "GET", "/v1/accounts", "", 200, &list)
	if len(list) != 1 || list[0].ID != f.tenant || !list[0].Current {
		t.Errorf("a key's accounts = %+v, want its own", list)
	}
}
