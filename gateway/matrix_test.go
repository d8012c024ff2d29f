package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rodon-compute/rodon/api"
)

// matrixRow is how the authorization matrix calls one route.
type matrixRow struct {
	// path and body of the request, given the fixture.
	path func(f *fixture) string
	body func(f *fixture) string
	// ok is the status of an allowed call.
	ok int
	// other is the status for the admin limited to ws-other, when the
	// route's role and organisation rules let it through.
	other int
	// grant is the status for the grant of the run in the path, on a
	// route that takes grants; 0 is any status but 401 and 403.
	grant int
}

func fixed(s string) func(*fixture) string { return func(*fixture) string { return s } }

func stepOf(f *fixture) string { return stepID(f.run, 0) }

// agentPath is the path of the fixture's agent run followed by rest.
func agentPath(rest string) func(*fixture) string {
	return func(f *fixture) string { return "/v1/runs/" + f.agent.run + rest }
}

// matrixRows has one row per route of routeTable; TestAuthorizationMatrix
// fails for a route without one.
var matrixRows = map[string]matrixRow{
	"POST /v1/auth/signin": {path: fixed("/v1/auth/signin"),
		body: fixed(`{"email":"viewer@example.com","password":"` + testPassword + `"}`), ok: 200, other: 200},
	"POST /v1/auth/signout": {path: fixed("/v1/auth/signout"), ok: 204, other: 204},
	"GET /v1/me":            {path: fixed("/v1/me"), ok: 200, other: 200},
	"GET /v1/accounts":      {path: fixed("/v1/accounts"), ok: 200, other: 200},
	"POST /v1/auth/switch": {path: fixed("/v1/auth/switch"),
		body: func(f *fixture) string { return `{"account":"` + f.tenant + `"}` }, ok: 200, other: 200},
	"GET /v1/workspaces":  {path: fixed("/v1/workspaces"), ok: 200, other: 200},
	"POST /v1/workspaces": {path: fixed("/v1/workspaces"), body: fixed(`{"name":"new"}`), ok: 201},
	"GET /v1/members":     {path: fixed("/v1/members"), ok: 200},
	"POST /v1/members": {path: fixed("/v1/members"),
		body: fixed(`{"email":"new@example.com","password":"a long enough password","role":"editor","workspaces":["ws-main"]}`), ok: 201},
	"PATCH /v1/members/{id}": {path: func(f *fixture) string { return "/v1/members/" + f.editorID },
		body: fixed(`{"role":"viewer"}`), ok: 200},
	"DELETE /v1/members/{id}": {path: func(f *fixture) string { return "/v1/members/" + f.viewerID }, ok: 204},
	"GET /v1/keys":            {path: fixed("/v1/keys"), ok: 200},
	"POST /v1/keys":           {path: fixed("/v1/keys"), body: fixed(`{"name":"ci","role":"viewer"}`), ok: 201},
	"DELETE /v1/keys/{id}":    {path: func(f *fixture) string { return "/v1/keys/" + f.targetKey }, ok: 204},
	"POST /v1/sessions": {path: fixed("/v1/sessions"), body: fixed(`{"workspace":"ws-main","title":"x"}`),
		ok: 201, other: 403},
	"GET /v1/sessions": {path: fixed("/v1/sessions?workspace=ws-main"), ok: 200, other: 403},
	"POST /v1/runs": {path: fixed("/v1/runs"), body: fixed(`{"workspace":"ws-main","steps":[{"args":["echo","hi"]}]}`),
		ok: 201, other: 403},
	"GET /v1/runs":                      {path: fixed("/v1/runs?workspace=ws-main"), ok: 200, other: 403},
	"GET /v1/runs/{id}":                 {path: func(f *fixture) string { return "/v1/runs/" + f.run }, ok: 200, other: 404, grant: 200},
	"POST /v1/runs/{id}/cancel":         {path: func(f *fixture) string { return "/v1/runs/" + f.run + "/cancel" }, ok: 200, other: 404},
	"GET /v1/steps/{id}":                {path: func(f *fixture) string { return "/v1/steps/" + stepOf(f) }, ok: 200, other: 404},
	"GET /v1/steps/{id}/stream":         {path: func(f *fixture) string { return "/v1/steps/" + stepOf(f) + "/stream" }, ok: 200, other: 404},
	"GET /v1/library":                   {path: fixed("/v1/library"), ok: 200, other: 200},
	"GET /v1/workspaces/{id}/revisions": {path: fixed("/v1/workspaces/ws-main/revisions"), ok: 200, other: 403},
	"GET /v1/workspaces/{id}/revisions/{rev}": {path: func(f *fixture) string { return "/v1/workspaces/ws-main/revisions/" + f.rev },
		ok: 200, other: 403},
	"GET /v1/workspaces/{id}/tree":               {path: fixed("/v1/workspaces/ws-main/tree"), ok: 200, other: 403},
	"GET /v1/workspaces/{id}/files/{path...}":    {path: fixed("/v1/workspaces/ws-main/files/data/a.txt"), ok: 200, other: 403},
	"PUT /v1/workspaces/{id}/files/{path...}":    {path: fixed("/v1/workspaces/ws-main/files/data/b.txt"), body: fixed("new file"), ok: 201, other: 403},
	"DELETE /v1/workspaces/{id}/files/{path...}": {path: fixed("/v1/workspaces/ws-main/files/data/a.txt"), ok: 200, other: 403},
	"POST /v1/workspaces/{id}/uploads": {path: fixed("/v1/workspaces/ws-main/uploads"),
		body: fixed(`{"files":[{"path":"big.bin","sha256":"` + strings.Repeat("ab", 32) + `","size":3}]}`), ok: 200, other: 403},
	"GET /v1/workspaces/{id}/archive": {path: fixed("/v1/workspaces/ws-main/archive"), ok: 200, other: 403},
	"GET /v1/workspaces/{id}/diff":    {path: func(f *fixture) string { return "/v1/workspaces/ws-main/diff?to=" + f.rev }, ok: 200, other: 403},
	"POST /v1/workspaces/{id}/restore": {path: fixed("/v1/workspaces/ws-main/restore"),
		body: func(f *fixture) string { return `{"rev":"` + f.rev + `"}` }, ok: 201, other: 403},
	// Agent runs: their rows name the fixture's agent run (the run of
	// the credential "grant"). The handlers' helpers set their ok codes.
	"POST /v1/runs/{id}/steps": {path: agentPath("/steps"), body: fixed(`{"tool":"Read","input":{"path":"data/a.txt"}}`),
		ok: 403, other: 403},
	"GET /v1/runs/{id}/events":               {path: agentPath("/events"), ok: 200, other: 404, grant: 200},
	"POST /v1/runs/{id}/finish":              {path: agentPath("/finish"), body: fixed(`{}`), ok: 200, other: 404, grant: 200},
	"GET /v1/runs/{id}/proposals/{proposal}": {path: agentPath("/proposals/prop-x"), ok: 404, other: 404},
	"POST /v1/runs/{id}/approve":             {path: agentPath("/approve"), body: fixed(`{"proposal":"prop-x"}`), ok: 404, other: 404},
	"POST /v1/runs/{id}/reject":              {path: agentPath("/reject"), body: fixed(`{"proposal":"prop-x"}`), ok: 404, other: 404},
	"PUT /v1/secrets/{name}":                 {path: fixed("/v1/secrets/API_TOKEN"), body: fixed(`{"value":"s3cret"}`), ok: 201},
	"GET /v1/secrets":                        {path: fixed("/v1/secrets"), ok: 200, other: 200},
	"DELETE /v1/secrets/{name}":              {path: fixed("/v1/secrets/" + fixtureSecret), ok: 204},
	"GET /v1/audit":                          {path: fixed("/v1/audit"), ok: 200},
	"POST /v1/audit/drop":                    {path: fixed("/v1/audit/drop"), body: fixed(`{"before":1}`), ok: 200},
}

// matrixCreds are the credentials of the matrix, with their role and
// whether they are a person.
var matrixCreds = []struct {
	name   string
	role   api.Role
	person bool
}{
	{"none", api.RoleNone, false},
	{"viewer", api.RoleViewer, true}, {"editor", api.RoleEditor, true}, {"admin", api.RoleAdmin, true}, {"owner", api.RoleOwner, true},
	{"key-viewer", api.RoleViewer, false}, {"key-editor", api.RoleEditor, false}, {"key-admin", api.RoleAdmin, false}, {"key-owner", api.RoleOwner, false},
	{"other", api.RoleAdmin, true},
	// grant is the grant of the fixture's agent run, called on its own
	// run (matrixPath); grant-other the grant of another live run of
	// ws-main, called on the same paths.
	{"grant", api.RoleEditor, false}, {"grant-other", api.RoleEditor, false},
}

// admitted is matrixRow.want's status for "anything but 401 and 403".
const admitted = -1

// matrixPath is the path credential name calls row with: the grant acts
// on its own run wherever the row names the fixture's run.
func matrixPath(f *fixture, row matrixRow, name string) string {
	p := row.path(f)
	if name == "grant" {
		p = strings.Replace(p, "/v1/runs/"+f.run, "/v1/runs/"+f.agent.run, 1)
	}
	return p
}

// want is the status the matrix expects of credential c on rt.
func (row matrixRow) want(rt route, name string, role api.Role, person bool) int {
	switch {
	case rt.least == api.RoleNone:
		return row.ok
	case name == "none":
		return http.StatusUnauthorized
	case name == "grant" && rt.grant && row.grant != 0:
		return row.grant
	case name == "grant" && rt.grant:
		return admitted
	case name == "grant" || name == "grant-other":
		// Another route, or another run's.
		return http.StatusForbidden
	case rt.onlyGrant:
		return http.StatusForbidden
	case rt.person && !person, role < rt.least:
		return http.StatusForbidden
	case name == "other" && rt.org:
		return http.StatusForbidden
	case name == "other":
		return row.other
	}
	return row.ok
}

// TestAuthorizationMatrix calls every route of the route table with every
// kind of credential, each on a fresh fixture, and checks the status: no
// write below its least role, person-only routes refused to keys, nothing
// of ws-main shown to a member of ws-other. Every write by a known caller
// leaves exactly one audit entry naming the route's action and result,
// and no call changes an earlier entry.
func TestAuthorizationMatrix(t *testing.T) {
	probe := newAgentFixture(t, nil)
	for _, rt := range probe.g.routes {
		if _, ok := matrixRows[rt.pattern]; !ok {
			t.Errorf("route %s has no row in matrixRows: add one", rt.pattern)
		}
		if rt.write() && rt.action == "" {
			t.Errorf("write route %s has no audit action", rt.pattern)
		}
	}
	for pattern := range matrixRows {
		if !slices.ContainsFunc(probe.g.routes, func(rt route) bool { return rt.pattern == pattern }) {
			t.Errorf("matrixRows has %s, which is no route", pattern)
		}
	}
	for _, rt := range probe.g.routes {
		row, ok := matrixRows[rt.pattern]
		if !ok {
			continue
		}
		method, _, _ := strings.Cut(rt.pattern, " ")
		for _, mc := range matrixCreds {
			t.Run(rt.pattern+"/"+mc.name, func(t *testing.T) {
				f := newAgentFixture(t, nil)
				before, _ := f.store.Audit(t.Context(), 0, 0)
				body := ""
				if row.body != nil {
					body = row.body(f)
				}
				path := matrixPath(f, row, mc.name)
				w := f.serve(f.request(f.creds[mc.name], method, path, body))
				want := row.want(rt, mc.name, mc.role, mc.person)
				switch {
				case want == admitted && (w.Code == 401 || w.Code == 403):
					t.Fatalf("%s %s as %s = %d %s, want it admitted", method, path, mc.name, w.Code, w.Body)
				case want != admitted && w.Code != want:
					t.Fatalf("%s %s as %s = %d %s, want %d", method, path, mc.name, w.Code, w.Body, want)
				}
				if mc.name == "grant-other" && rt.grant && !strings.Contains(w.Body.String(), "may not act on run") {
					t.Errorf("another run's grant on %s = %s, want the run named", path, w.Body)
				}
				if w.Code >= 400 {
					if code := errorCode(w.Body); code == "" {
						t.Errorf("error answer %s is not an api.Error", w.Body)
					}
				}
				if mc.name == "other" && w.Code == 200 && (strings.Contains(w.Body.String(), f.run) || strings.Contains(w.Body.String(), `"ws-main"`)) {
					t.Errorf("member of ws-other sees ws-main: %s", w.Body)
				}
				if strings.Contains(w.Body.String(), "node-secret") || strings.Contains(w.Body.String(), testNodeAddr) {
					t.Errorf("answer leaks a provider identifier: %s", w.Body)
				}

				after, _ := f.store.Audit(t.Context(), 0, 0)
				if !cmp.Equal(after[:min(len(before), len(after))], before) {
					t.Errorf("audit entries before the call changed:\n%s", cmp.Diff(before, after[:len(before)]))
				}
				wantEntries := 0
				if rt.write() && (mc.name != "none" || rt.least == api.RoleNone) {
					wantEntries = 1
				}
				if got := len(after) - len(before); got != wantEntries {
					t.Fatalf("call left %d audit entries, want %d", got, wantEntries)
				}
				switch {
				case wantEntries == 1 && rt.action == "audit.drop" && w.Code == http.StatusOK:
					// The scheduler's own entry says so, naming the caller.
					var drop struct {
						By json.RawMessage `json:"by"`
					}
					json.Unmarshal(after[len(after)-1].Entry, &drop)
					checkAuditEntry(t, api.AuditEntry{Entry: drop.By}, rt.action, w)
				case wantEntries == 1:
					checkAuditEntry(t, after[len(after)-1], rt.action, w)
				}
			})
		}
	}
}

func checkAuditEntry(t *testing.T, e api.AuditEntry, action string, w interface{ Result() *http.Response }) {
	t.Helper()
	var got api.AuditDocument
	if err := json.Unmarshal(e.Entry, &got); err != nil {
		t.Fatal(err)
	}
	res := w.Result()
	wantResult := "ok"
	if res.StatusCode >= 400 {
		var body api.Error
		json.NewDecoder(res.Body).Decode(&body)
		wantResult = body.Detail.Code
	}
	if got.Action != action || got.Result != wantResult || got.Client != "192.0.2.1" || got.Credential == nil {
		t.Errorf("audit entry = %+v, want action %s, result %s, client 192.0.2.1 and a credential", got, action, wantResult)
	}
	if got.Credential != nil && got.Credential.Kind != "password" && got.Who == "" {
		t.Errorf("audit entry %+v names nobody", got)
	}
	if got.Credential != nil && got.Credential.Kind == "grant" && (got.Credential.ID == "" || !strings.HasPrefix(got.Who, prefixRun)) {
		t.Errorf("audit entry %+v: want the grant's id and its run", got)
	}
	if strings.Contains(string(e.Entry), "rk_") || strings.Contains(string(e.Entry), grantPrefix) || strings.Contains(string(e.Entry), testPassword) {
		t.Errorf("audit entry carries a secret: %s", e.Entry)
	}
}

// TestCSRF: every write made with the cookie needs the session's token.
func TestCSRF(t *testing.T) {
	f := newAgentFixture(t, nil)
	for _, rt := range f.g.routes {
		if !rt.write() || rt.least == api.RoleNone {
			continue
		}
		row := matrixRows[rt.pattern]
		method, _, _ := strings.Cut(rt.pattern, " ")
		for _, token := range []string{"", "wrong", f.creds["admin"].csrf} {
			t.Run(fmt.Sprintf("%s/%q", rt.pattern, token), func(t *testing.T) {
				body := ""
				if row.body != nil {
					body = row.body(f)
				}
				r := f.request(f.creds["owner"], method, row.path(f), body)
				r.Header.Set(csrfHeader, token)
				w := f.serve(r)
				if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), csrfHeader) {
					t.Errorf("%s without the right CSRF token = %d %s, want 403 naming %s", rt.pattern, w.Code, w.Body, csrfHeader)
				}
			})
		}
	}
	// A foreign Origin is refused even with the token.
	r := f.request(f.creds["owner"], "POST", "/v1/workspaces", `{"name":"x"}`)
	r.Header.Set("Origin", "http://evil.test")
	if w := f.serve(r); w.Code != http.StatusForbidden {
		t.Errorf("POST from a foreign origin = %d %s, want 403", w.Code, w.Body)
	}
}
