package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// tenantSide is one tenant of TestCrossTenant and its objects.
type tenantSide struct {
	tenant     string
	owner, key cred
	viewer     cred
	ownerID    string
	viewerID   string
	keyID, ws  string
	run, rev   string
	libraryID  string
}

// addTenant makes tenant with an owner, a viewer, an owner key, a
// workspace with a revision, and a run in it, as the fixture does for its
// own.
func (f *fixture) addTenant(tenant, name string) *tenantSide {
	f.t.Helper()
	store, own := f.store, f.tenant
	f.store, f.tenant = bindTenant(f.raw, tenant), tenant
	defer func() { f.store, f.tenant = store, own }()
	now := time.Now().UTC().Truncate(time.Second)
	f.put(kindTenant, tenant, tenantRecord{ID: tenant, Name: name, CreatedAt: now})
	s := &tenantSide{tenant: tenant, ws: "ws-" + name}
	s.ownerID = f.account("owner@"+name+".example.com", api.RoleOwner, nil)
	s.owner = f.session(s.ownerID)
	s.viewerID = f.account("viewer@"+name+".example.com", api.RoleViewer, nil)
	s.viewer = f.session(s.viewerID)
	s.key, s.keyID = f.key(api.RoleOwner, nil)
	f.put(kindWorkspace, s.ws, api.Workspace{ID: s.ws, Name: name, CreatedAt: now})
	rev, err := f.sched.PutFile(f.t.Context(), s.ws, "data/a.txt", strings.NewReader(aText), int64(len(aText)),
		client.WriteOptions{Author: api.Author{Kind: api.AuthorAccount, ID: "seed"}, Message: "seed"})
	if err != nil {
		f.t.Fatal(err)
	}
	s.rev = rev.ID
	var op api.Operation
	if w := f.serve(f.request(s.key, "POST", "/v1/runs", `{"workspace":"`+s.ws+`","steps":[{"args":["true"]}]}`)); w.Code != http.StatusCreated {
		f.t.Fatalf("create %s's run = %d %s", name, w.Code, w.Body)
	} else if err := json.Unmarshal(w.Body.Bytes(), &op); err != nil {
		f.t.Fatal(err)
	}
	s.run = op.ID
	if s.libraryID, err = f.g.libraryID(withTenant(f.t.Context(), tenant)); err != nil {
		f.t.Fatal(err)
	}
	return s
}

// crossPath is the path of pattern naming b's objects: each {param} is
// replaced by b's object of that place. ok is false for a parameter this
// test does not know yet (add it).
func crossPath(pattern string, b *tenantSide) (string, bool) {
	_, path, _ := strings.Cut(pattern, " ")
	segs := strings.Split(path, "/")
	for i, s := range segs {
		if !strings.HasPrefix(s, "{") {
			continue
		}
		prev := segs[i-1]
		switch {
		case s == "{id}" && prev == "members":
			segs[i] = b.viewerID
		case s == "{id}" && prev == "keys":
			segs[i] = b.keyID
		case s == "{id}" && prev == "runs":
			segs[i] = b.run
		case s == "{id}" && prev == "steps":
			segs[i] = stepID(b.run, 0)
		case s == "{id}" && prev == "workspaces":
			segs[i] = b.ws
		case s == "{rev}":
			segs[i] = b.rev
		case s == "{proposal}":
			segs[i] = "prop-x"
		case s == "{name}" && prev == "secrets":
			segs[i] = crossSecret
		case s == "{path...}":
			segs[i] = "data/a.txt"
		default:
			return "", false
		}
	}
	return strings.Join(segs, "/"), true
}

// crossBodies are the routes without path parameters whose request names
// another object (b's, in the test); crossNoObject those whose request
// names none: they act on the caller's own tenant only, which the listing
// half of the test checks. A route in neither fails the test.
var (
	crossBodies = map[string]func(b *tenantSide) string{
		"POST /v1/auth/switch": func(b *tenantSide) string { return `{"account":"` + b.tenant + `"}` },
		"POST /v1/sessions":    func(b *tenantSide) string { return `{"workspace":"` + b.ws + `","title":"x"}` },
		"POST /v1/runs": func(b *tenantSide) string {
			return `{"workspace":"` + b.ws + `","steps":[{"args":["true"]}]}`
		},
		"POST /v1/members": func(b *tenantSide) string {
			return `{"email":"x@example.com","password":"a long enough password","role":"viewer","workspaces":["` + b.ws + `"]}`
		},
		"POST /v1/keys":    func(b *tenantSide) string { return `{"name":"x","role":"viewer","workspaces":["` + b.ws + `"]}` },
		"GET /v1/runs":     nil, // ?workspace=, below
		"GET /v1/sessions": nil,
	}
	crossNoObject = map[string]bool{
		"POST /v1/auth/signin": true, "POST /v1/auth/signout": true, "GET /v1/me": true, "GET /v1/accounts": true,
		"GET /v1/workspaces": true, "POST /v1/workspaces": true, "GET /v1/members": true, "GET /v1/keys": true,
		"GET /v1/library": true, "GET /v1/audit": true, "POST /v1/audit/drop": true,
		"GET /v1/secrets": true,
	}
)

// crossSecret is the name of B's secret. A's PUT of that name makes A's
// own secret (names are per account), so TestCrossTenant checks after it
// that B's stayed as it was.
const crossSecret = "B_ONLY"

// crossBody is a body good enough to reach the object check.
func crossBody(pattern string, b *tenantSide) string {
	switch {
	case strings.HasPrefix(pattern, "PATCH /v1/members/"):
		return `{"role":"viewer"}`
	case strings.HasSuffix(pattern, "/steps"):
		return `{"tool":"Read","input":{"path":"data/a.txt"}}`
	case strings.HasSuffix(pattern, "/approve"), strings.HasSuffix(pattern, "/reject"):
		return `{"proposal":"prop-x"}`
	case strings.HasSuffix(pattern, "/uploads"):
		return `{"files":[{"path":"big.bin","sha256":"` + strings.Repeat("ab", 32) + `","size":3}]}`
	case strings.HasSuffix(pattern, "/restore"):
		return `{"rev":"` + b.rev + `"}`
	case pattern == "PUT /v1/secrets/{name}":
		return `{"value":"a's own value"}`
	case strings.HasPrefix(pattern, "PUT "):
		return "new file"
	case strings.HasSuffix(pattern, "/finish"):
		return `{}`
	}
	return ""
}

// TestCrossTenant is issue 17's cross-account matrix: A's owner (cookie)
// and A's owner key get 404 for every object of B on every route, never
// 403 for the object nor 200 (a route that refuses the credential itself,
// whatever the object, says so with 403), and B's lists never show A's
// objects. It walks routeTable, so a new route cannot escape it.
func TestCrossTenant(t *testing.T) {
	f := newFixture(t)
	a := &tenantSide{tenant: f.tenant, owner: f.creds["owner"], key: f.creds["key-owner"], viewer: f.creds["viewer"],
		viewerID: f.viewerID, keyID: f.targetKey, ws: wsMain, run: f.run, rev: f.rev}
	var err error
	if a.libraryID, err = f.g.libraryID(f.in(t.Context())); err != nil {
		t.Fatal(err)
	}
	b := f.addTenant("acct-bbbtenant", "bravo")
	if w := f.serve(f.request(b.owner, "PUT", "/v1/secrets/"+crossSecret, `{"value":"b's value"}`)); w.Code != http.StatusCreated {
		t.Fatalf("PUT B's secret as B's owner = %d %s", w.Code, w.Body)
	}

	for _, rt := range f.g.routes {
		method, _, _ := strings.Cut(rt.pattern, " ")
		if rt.pattern == "PUT /v1/secrets/{name}" {
			// A's own secret of that name: B's stays version 1, below.
			continue
		}
		path, ok := crossPath(rt.pattern, b)
		if !ok {
			t.Errorf("route %s: a path parameter TestCrossTenant does not know: add it to crossPath", rt.pattern)
			continue
		}
		body := crossBody(rt.pattern, b)
		if !strings.Contains(rt.pattern, "{") {
			mk, named := crossBodies[rt.pattern]
			switch {
			case !named && !crossNoObject[rt.pattern]:
				t.Errorf("route %s: add it to crossBodies or crossNoObject", rt.pattern)
				continue
			case !named:
				continue
			case mk != nil:
				body = mk(b)
			default:
				path += "?workspace=" + b.ws
			}
		}
		for _, c := range []struct {
			name string
			cred cred
		}{{"A's owner", a.owner}, {"A's key", a.key}} {
			want := http.StatusNotFound
			if rt.onlyGrant || rt.person && c.cred.bearer != "" {
				want = http.StatusForbidden // the credential, whatever the object
			}
			w := f.serve(f.request(c.cred, method, path, body))
			if w.Code != want {
				t.Errorf("%s %s as %s = %d %s, want %d", method, path, c.name, w.Code, strings.TrimSpace(w.Body.String()), want)
			}
		}
	}

	var bSecrets []api.Secret
	if w := f.serve(f.request(b.viewer, "GET", "/v1/secrets", "")); json.Unmarshal(w.Body.Bytes(), &bSecrets) != nil ||
		len(bSecrets) != 1 || bSecrets[0].Name != crossSecret || bSecrets[0].Version != 1 {
		t.Errorf("B's secrets after A's calls = %d %s, want %s at version 1", w.Code, w.Body, crossSecret)
	}

	// B's lists show nothing of A's.
	aIDs := []string{"FIXTURE_SECRET", a.tenant, a.viewerID, f.editorID, a.keyID, wsMain, wsOther, a.run, a.rev, a.libraryID, "sess-main", accountID("owner@example.com")}
	for _, rt := range f.g.routes {
		method, path, _ := strings.Cut(rt.pattern, " ")
		if method != "GET" || strings.Contains(path, "{") {
			continue
		}
		if rt.pattern == "GET /v1/audit" {
			continue // the audit log's tenant filter is another part of issue 17
		}
		switch path {
		case "/v1/runs", "/v1/sessions":
			path += "?workspace=" + b.ws
		}
		for _, c := range []cred{b.owner, b.key, b.viewer} {
			w := f.serve(f.request(c, method, path, ""))
			if w.Code >= 300 && w.Code != http.StatusForbidden {
				t.Errorf("GET %s as B = %d %s", path, w.Code, w.Body)
			}
			for _, id := range aIDs {
				if strings.Contains(w.Body.String(), id) {
					t.Errorf("GET %s as B shows A's %s: %s", path, id, w.Body)
				}
			}
		}
	}
}

// TestDriverAcrossTenants: the Driver and the maintenance pass, which
// scan every tenant, move and keep each tenant's runs in that tenant.
func TestDriverAcrossTenants(t *testing.T) {
	f := newFixture(t)
	b := f.addTenant("acct-bbbtenant", "bravo")
	ctx := t.Context()
	f.g.Driver().Pass(ctx)
	step := stepID(b.run, 0)
	if f.sched.Accepted(step) == 0 {
		t.Fatalf("bravo's first step %s was not submitted by a pass", step)
	}
	f.sched.Start(step)
	f.sched.Exit(step, 0)
	f.g.Driver().Pass(ctx)
	var op api.Operation
	w := f.serve(f.request(b.key, "GET", "/v1/runs/"+b.run, ""))
	if err := json.Unmarshal(w.Body.Bytes(), &op); err != nil || op.State != api.RunSucceeded {
		t.Errorf("bravo's run after its step exited 0 = %d %s, want succeeded", w.Code, w.Body)
	}
	if _, err := f.g.Maintain(ctx); err != nil {
		t.Errorf("Maintain() with two tenants = %v", err)
	}
	// The fixture's run is where it was: live, in its own tenant.
	f.do("key-viewer", "GET", "/v1/runs/"+f.run, "", 200, &op)
	if op.State != api.RunRunning {
		t.Errorf("the fixture's run = %s, want running", op.State)
	}
}
