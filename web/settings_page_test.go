package web

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/browsertest"
)

// The account's settings (#/settings/...), driven in Chromium against
// settingsAPI: as an owner it invites, changes and removes a member,
// creates a key (its secret shown once) and deletes it, sets and replaces
// a secret (whose value is nowhere in the page), reads and filters the
// audit log a page at a time, and switches accounts; as a viewer and as an
// admin it sees only what the role may use. It saves
// docs/screenshots/settings-*.png.

func TestSettingsPage(t *testing.T) {
	requireBuilt(t)
	now := time.Date(2026, 12, 5, 21, 0, 0, 0, time.UTC)
	f := newSettingsAPI(now)
	acme := f.addTenant("acct-acme", "Acme", api.RoleOwner)
	acme.members = append(acme.members,
		api.Account{ID: "acct-admin", Email: "admin@example.com", Role: api.RoleAdmin, Workspaces: []string{}, CreatedAt: now.Add(-20 * time.Hour)},
		api.Account{ID: "acct-viewer", Email: "viewer@example.com", Role: api.RoleViewer, Workspaces: []string{"ws-ops"}, CreatedAt: now.Add(-10 * time.Hour)})
	acme.keys = []api.Key{{ID: "key-deploy", Name: "deploy", Role: api.RoleEditor, Workspaces: []string{"ws-sales"}, CreatedAt: now.Add(-5 * time.Hour), LastUsedAt: now.Add(-time.Hour)}}
	acme.secrets = []api.Secret{{Name: "OPENAI_API_KEY", Version: 2, UpdatedBy: api.Actor{Kind: api.AuthorAccount, ID: "acct-admin"}, UpdatedAt: now.Add(-2 * time.Hour), CreatedAt: now.Add(-3 * time.Hour)}}
	// 120 entries before the test's own: three pages of 50.
	for i := range 120 {
		who, action := "acct-admin", "run.create"
		if i%3 == 0 {
			who, action = "key-deploy", "workspace.write"
		}
		f.auditf(acme, who, api.RoleAdmin, action, fmt.Sprintf("run-%03d", i), "ok")
	}
	beta := f.addTenant("acct-beta", "Beta", api.RoleViewer)
	beta.members = append(beta.members, api.Account{ID: "acct-boss", Email: "boss@beta.example", Role: api.RoleOwner, Workspaces: []string{}, CreatedAt: now})
	beta.secrets = []api.Secret{{Name: "BETA_TOKEN", Version: 1, UpdatedBy: api.Actor{Kind: api.AuthorAccount, ID: "acct-boss"}, UpdatedAt: now, CreatedAt: now}}
	gamma := f.addTenant("acct-gamma", "Gamma", api.RoleAdmin)
	gamma.members = append(gamma.members,
		api.Account{ID: "acct-gowner", Email: "owner@gamma.example", Role: api.RoleOwner, Workspaces: []string{}, CreatedAt: now},
		api.Account{ID: "acct-geditor", Email: "editor@gamma.example", Role: api.RoleEditor, Workspaces: []string{}, CreatedAt: now})

	srv := httptest.NewServer(f.handler())
	t.Cleanup(srv.Close)
	ctx := browsertest.Start(t, 3*time.Minute)
	do := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		browsertest.Do(t, ctx, what, actions...)
	}
	eval := func(js string) string {
		t.Helper()
		return browsertest.Eval(t, ctx, js)
	}
	wait := func(what, js string) {
		t.Helper()
		browsertest.Wait(t, ctx, 15*time.Second, what, js)
	}
	shot := func(name string) {
		t.Helper()
		browsertest.Screenshot(t, ctx, filepath.Join("..", "docs", "screenshots", "settings-"+name+".png"))
	}
	// fill sets the value of the input or select sel.
	fill := func(sel, value string) {
		t.Helper()
		s, _ := json.Marshal(sel)
		v, _ := json.Marshal(value)
		eval(`(() => { const e = document.querySelector(` + string(s) + `); e.value = ` + string(v) + `; return ''; })()`)
	}
	click := func(what, sel string) {
		t.Helper()
		do(what, chromedp.Click(chromedp.CSS(sel)))
	}
	tabs := `[...document.querySelectorAll('#settings-tabs a')].map(a => a.dataset.tab).join(',')`

	// An owner sees every view; the settings open on the members.
	do("open the settings", chromedp.Navigate(srv.URL+"/#/settings"), chromedp.WaitVisible(chromedp.CSS("#settings-members")))
	wait("the members", `document.querySelectorAll('#members-table tr[data-testid=member-row]').length === 3`)
	if got := eval(tabs); got != "members,keys,secrets,audit" {
		t.Errorf("an owner's tabs = %q, want members,keys,secrets,audit", got)
	}
	if got := eval(`location.hash`); got != "#/settings/members" {
		t.Errorf("#/settings went to %q, want #/settings/members", got)
	}
	wait("the account switcher", `!document.querySelector('#account-switch').hidden`)
	if got := eval(`[...document.querySelectorAll('#account-switch option')].map(o => o.value + (o.selected ? '*' : '')).join(',')`); got != "acct-acme*,acct-beta,acct-gamma" {
		t.Errorf("#account-switch = %q, want the three accounts, Acme current", got)
	}
	if got := eval(`[...document.querySelectorAll('#member-role option')].map(o => o.value).join(',')`); got != "viewer,editor,admin,owner" {
		t.Errorf("an owner grants %q, want every role", got)
	}

	// Invite a member, limited to one workspace.
	fill("#member-email", "new@example.com")
	fill("#member-password", "first-password-1")
	fill("#member-role", "editor")
	eval(`(() => { document.querySelector('#member-workspaces option[value=ws-sales]').selected = true; return ''; })()`)
	click("invite", "#member-invite-submit")
	wait("the new member", `!!document.querySelector('tr[data-email="new@example.com"]')`)
	if got := eval(`(r => r.dataset.role + '|' + r.querySelector('.member-workspaces').textContent)(document.querySelector('tr[data-email="new@example.com"]'))`); got != "editor|sales" {
		t.Errorf("the new member's row = %q, want editor|sales", got)
	}
	if got := eval(`document.querySelector('#member-password').value + '|' + document.querySelector('#member-invite-status').textContent`); !strings.HasPrefix(got, "|new@example.com is a member (editor)") {
		t.Errorf("after the invite: %q, want the password cleared and the invite confirmed", got)
	}
	f.mu.Lock()
	if got := f.passwords["new@example.com"]; got != "first-password-1" {
		t.Errorf("the invite's password = %q, want the one typed", got)
	}
	f.mu.Unlock()

	// The API's error, inline: the email is a member already.
	fill("#member-email", "new@example.com")
	fill("#member-password", "first-password-2")
	click("invite again", "#member-invite-submit")
	wait("the conflict", `document.querySelector('#member-invite-error').textContent === 'a member with email new@example.com exists already'`)

	// Change the new member's role and workspaces.
	click("change the new member", `tr[data-email="new@example.com"] button[data-action=edit]`)
	wait("the editor", `!document.querySelector('#member-edit').hidden && document.querySelector('#member-edit-role').value === 'editor'`)
	fill("#member-edit-role", "viewer")
	eval(`(() => { for (const o of document.querySelectorAll('#member-edit-workspaces option')) o.selected = false; return ''; })()`)
	click("save the change", "#member-edit-save")
	wait("the member changed", `(r => r && r.dataset.role === 'viewer' && r.querySelector('.member-workspaces').textContent === 'all')(document.querySelector('tr[data-email="new@example.com"]'))`)
	shot("members")

	// Remove a member: asked first, in the page.
	click("remove the viewer", `tr[data-email="viewer@example.com"] button[data-action=remove]`)
	wait("the confirmation", `!document.querySelector('#settings-confirm').hidden && document.querySelector('#settings-confirm').dataset.target === 'acct-viewer'`)
	click("confirm", "#settings-confirm-yes")
	wait("the viewer gone", `!document.querySelector('tr[data-email="viewer@example.com"]') && document.querySelectorAll('tr[data-testid=member-row]').length === 3`)

	// Keys: create one, read its secret once, delete it.
	click("the keys tab", "#settings-tab-keys")
	wait("the keys", `!!document.querySelector('#keys-table tr[data-key-id=key-deploy]')`)
	if got := eval(`document.querySelector('tr[data-key-id=key-deploy] .last-used').getAttribute('title')`); got != now.Add(-time.Hour).Format(time.RFC3339) {
		t.Errorf("the deploy key's last use = %q, want %s", got, now.Add(-time.Hour).Format(time.RFC3339))
	}
	fill("#key-name", "ci")
	fill("#key-role", "editor")
	click("create a key", "#key-create-submit")
	wait("the key's secret", `!document.querySelector('#key-secret').hidden && !!document.querySelector('tr[data-name=ci]')`)
	f.mu.Lock()
	secret := f.keySecrets["key-0001"]
	f.mu.Unlock()
	if got := eval(`document.querySelector('#key-secret-value').textContent`); got == "" || got != secret {
		t.Errorf("#key-secret-value = %q, want the secret made, %q", got, secret)
	}
	if got := eval(`document.querySelector('tr[data-name=ci] .last-used').textContent`); got != "never" {
		t.Errorf("the new key's last use = %q, want never", got)
	}
	shot("keys")
	click("hide the secret", "#key-secret-hide")
	if got := eval(`String(document.documentElement.outerHTML.includes(` + jsString(secret) + `))`); got != "false" {
		t.Errorf("the key's secret is still in the page after hiding it")
	}
	click("delete the key", `tr[data-name=ci] button[data-action=delete]`)
	click("confirm", "#settings-confirm-yes")
	wait("the key gone", `!document.querySelector('tr[data-name=ci]') && !!document.querySelector('tr[data-key-id=key-deploy]')`)

	// Secrets: set one, replace it; its value is nowhere in the page.
	click("the secrets tab", "#settings-tab-secrets")
	wait("the secrets", `!!document.querySelector('tr[data-name=OPENAI_API_KEY]')`)
	if got := eval(`document.querySelector('tr[data-name=OPENAI_API_KEY] td[data-id]').textContent`); got != "admin@example.com" {
		t.Errorf("OPENAI_API_KEY set by %q, want admin@example.com", got)
	}
	fill("#secret-name", "db-password")
	fill("#secret-value", "whatever")
	click("set a misnamed secret", "#secret-set-submit")
	wait("the name refused", `document.querySelector('#secret-set-error').textContent.startsWith('Name "db-password": want capital letters')`)
	value := randomHex(t)
	fill("#secret-name", "DB_PASSWORD")
	fill("#secret-value", value)
	click("set a secret", "#secret-set-submit")
	wait("the secret set", `(r => r && r.dataset.version === '1')(document.querySelector('tr[data-name=DB_PASSWORD]'))`)
	value2 := randomHex(t)
	click("replace it", `tr[data-name=DB_PASSWORD] button[data-action=replace]`)
	if got := eval(`document.querySelector('#secret-name').value`); got != "DB_PASSWORD" {
		t.Errorf("replace filled the name %q, want DB_PASSWORD", got)
	}
	fill("#secret-value", value2)
	click("set it again", "#secret-set-submit")
	wait("version 2", `(r => r && r.dataset.version === '2' && r.querySelector('td[data-id]').textContent === 'you')(document.querySelector('tr[data-name=DB_PASSWORD]'))`)
	f.mu.Lock()
	if got := f.secretValues["acct-acme/DB_PASSWORD"]; got != value2 {
		t.Errorf("the gateway got %q, want the value typed", got)
	}
	f.mu.Unlock()
	for _, v := range []string{value, value2} {
		if got := eval(`String(document.documentElement.outerHTML.includes(` + jsString(v) + `) || [...document.querySelectorAll('input, textarea')].some(e => e.value.includes(` + jsString(v) + `)))`); got != "false" {
			t.Errorf("a secret value is in the page after it was set")
		}
	}
	if got := eval(`document.querySelector('#secret-value').type`); got != "password" {
		t.Errorf("#secret-value is of type %q, want password", got)
	}
	shot("secrets")

	// The audit log: pages of 50, oldest first, then filters.
	click("the audit tab", "#settings-tab-audit")
	rows := `[...document.querySelectorAll('#audit-table tr[data-testid=audit-row]')]`
	wait("the first page", rows+`.length === 50 && !document.querySelector('#audit-next').disabled`)
	click("the next page", "#audit-next")
	wait("the second page", rows+`[0]?.dataset.seq === '51' && document.querySelector('#audit-page').dataset.page === '2'`)
	click("back", "#audit-prev")
	wait("the first page again", rows+`[0]?.dataset.seq === '1' && document.querySelector('#audit-prev').disabled`)
	fill("#audit-action", "secret.put")
	click("filter by action", "#audit-apply")
	wait("the secret puts", rows+`.length === 2 && `+rows+`.every(r => r.dataset.action === 'secret.put' && r.dataset.who === '`+testMe+`')`)
	if got := eval(rows + `.map(r => r.children[4].textContent).join(',')`); got != "DB_PASSWORD v1,DB_PASSWORD v2" {
		t.Errorf("the secret puts' targets = %q, want the name and version, never a value", got)
	}
	fill("#audit-action", "")
	fill("#audit-who", "key-deploy")
	// Entries 10 to 19, in the browser's own time zone.
	local := func(t time.Time) string {
		return `(d => d.getFullYear() + '-' + String(d.getMonth() + 1).padStart(2, '0') + '-' + String(d.getDate()).padStart(2, '0') + 'T' +` +
			` String(d.getHours()).padStart(2, '0') + ':' + String(d.getMinutes()).padStart(2, '0') + ':' + String(d.getSeconds()).padStart(2, '0'))(new Date(` + jsString(t.Format(time.RFC3339)) + `))`
	}
	eval(`(() => { document.querySelector('#audit-since').value = ` + local(now.Add(10*time.Second)) + `; document.querySelector('#audit-until').value = ` + local(now.Add(20*time.Second)) + `; return ''; })()`)
	click("filter by who and time", "#audit-apply")
	wait("the deploy key's entries 10 to 19", rows+`.map(r => r.dataset.seq).join(',') === '10,13,16,19'`)
	if got := eval(rows + `[0].children[2].textContent`); got != "key deploy (admin)" {
		t.Errorf("who = %q, want the key's name and role", got)
	}
	shot("audit")
	click("clear the filter", "#audit-clear")
	wait("every entry again", rows+`.length === 50`)

	// Switch to Beta, where the person is a viewer: the secrets' names
	// only, and no control to change anything.
	eval(`(() => { const s = document.querySelector('#account-switch'); s.value = 'acct-beta'; s.dispatchEvent(new Event('change')); return ''; })()`)
	wait("Beta's secrets", `location.hash === '#/settings/secrets' && !!document.querySelector('tr[data-name=BETA_TOKEN]')`)
	f.mu.Lock()
	if f.current != "acct-beta" {
		t.Errorf("the sign-in acts in %s, want acct-beta", f.current)
	}
	var switched bool
	for _, e := range acme.audit {
		switched = switched || strings.Contains(string(e.Entry), `"action":"auth.switch","target":"acct-beta"`)
	}
	f.mu.Unlock()
	if !switched {
		t.Errorf("no auth.switch to acct-beta in Acme's audit")
	}
	viewerSees := func(who string) {
		t.Helper()
		if got := eval(tabs); got != "secrets" {
			t.Errorf("%s's tabs = %q, want secrets only", who, got)
		}
		if got := eval(`String(document.querySelectorAll('main button, main form, main input, main select, main [data-action]').length)`); got != "0" {
			t.Errorf("%s sees %s controls, want none", who, got)
		}
		if got := eval(`String(!document.querySelector('#secrets-read-only').hidden) + ' ' + document.querySelector('#whoami').textContent`); got != "true owner@example.com (viewer)" {
			t.Errorf("%s: %q, want the read-only note and the viewer role in the header", who, got)
		}
	}
	viewerSees("a viewer")
	shot("viewer")
	for _, tab := range []string{"members", "keys", "audit"} {
		do("open "+tab+" as a viewer", chromedp.Navigate(srv.URL+"/#/settings/"+tab))
		wait(tab+" refused: back to the secrets", `location.hash === '#/settings/secrets' && !!document.querySelector('tr[data-name=BETA_TOKEN]')`)
	}
	do("reload as a viewer", chromedp.Reload())
	wait("Beta's secrets after a reload", `!!document.querySelector('tr[data-name=BETA_TOKEN]') && document.querySelector('#account-switch').value === 'acct-beta'`)
	viewerSees("a viewer, reloaded")

	// Gamma, as an admin: members and keys, granting up to editor, and
	// no control on the owner's row.
	eval(`(() => { const s = document.querySelector('#account-switch'); s.value = 'acct-gamma'; s.dispatchEvent(new Event('change')); return ''; })()`)
	wait("Gamma's tabs", tabs+` === 'members,keys,secrets,audit'`)
	do("Gamma's members", chromedp.Navigate(srv.URL+"/#/settings/members"))
	wait("Gamma's members", `document.querySelectorAll('tr[data-testid=member-row]').length === 3`)
	if got := eval(`[...document.querySelectorAll('#member-role option')].map(o => o.value).join(',')`); got != "viewer,editor" {
		t.Errorf("an admin grants %q, want viewer,editor", got)
	}
	if got := eval(`[...document.querySelectorAll('tr[data-testid=member-row]')].map(r => r.dataset.role + ':' + r.querySelectorAll('button').length).join(',')`); got != "editor:2,admin:0,owner:0" {
		t.Errorf("an admin's controls per member = %q, want none on an admin or owner, change and remove on an editor", got)
	}
}

// randomHex is 32 random bytes in hex, a value that cannot be in the page by chance.
func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
