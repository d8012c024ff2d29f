package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/browsertest"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/web"
)

// TestBrowserSettings drives the account's settings in headless Chromium
// against a real gateway and scheduler (issue 17, Done 6): as the owner it
// invites a member, creates a key (whose secret, shown once, works) and
// deletes it (it stops working), sets a secret (its value nowhere in the
// page), filters the audit log, and reads its account in the header; the
// member, a viewer, sees the secrets' names and no control. No step runs:
// it needs no agent and no containerd. web's TestSettingsPage drives the
// same views, the account switch included, against a stand-in.
func TestBrowserSettings(t *testing.T) {
	if !web.Built() {
		testenv.Missing(t, "the browser tests need the web page: run web/build (scripts/test does)")
	}
	f := &fleet{}
	startSchedulers(t, f, 1)
	const ownerEmail = "owner@example.com"
	g := startGateway(t, f, ownerEmail)
	password := g.ownerPassword(t, ownerEmail)
	apiC := newGWClient(t, g, &recorder{})
	owner := apiC.signIn(ownerEmail, password)
	var ws struct {
		ID string `json:"id"`
	}
	apiC.must(http.StatusCreated, http.MethodPost, "/v1/workspaces", map[string]string{"name": "settings-demo"}, &ws)

	ctx := browsertest.Start(t, 4*time.Minute)
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
		browsertest.Wait(t, ctx, 20*time.Second, what, js)
	}
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
	js := func(s string) string {
		b, _ := json.Marshal(s)
		return string(b)
	}

	browserSignIn(t, ctx, g.site, ownerEmail, password, ws.ID)
	do("open the settings", chromedp.Navigate(g.site+"/#/settings"), chromedp.WaitVisible(chromedp.CSS("#settings-members")))
	wait("the owner's row", `!!document.querySelector('tr[data-testid=member-row][data-member-id=`+js(owner.ID)+`]')`)
	if got := eval(`[...document.querySelectorAll('#settings-tabs a')].map(a => a.dataset.tab).join(',')`); got != "members,keys,secrets,audit" {
		t.Errorf("the owner's tabs = %q, want members,keys,secrets,audit", got)
	}

	// Invite a viewer.
	const viewerEmail, viewerPassword = "viewer@example.com", "viewer-password-1"
	fill("#member-email", viewerEmail)
	fill("#member-password", viewerPassword)
	fill("#member-role", "viewer")
	click("invite", "#member-invite-submit")
	wait("the viewer's row", `(r => r && r.dataset.role === 'viewer')(document.querySelector('tr[data-email="`+viewerEmail+`"]'))`)
	// The gateway's own error, in the page.
	fill("#member-email", viewerEmail)
	fill("#member-password", viewerPassword)
	click("invite again", "#member-invite-submit")
	wait("the conflict", `document.querySelector('#member-invite-error').textContent.includes('exists already')`)

	// A key: its secret shown once works; deleted, it does not.
	click("the keys tab", "#settings-tab-keys")
	wait("the keys view", `!!document.querySelector('#key-create')`)
	fill("#key-name", "ci")
	fill("#key-role", "editor")
	click("create a key", "#key-create-submit")
	wait("the key's secret", `!document.querySelector('#key-secret').hidden && !!document.querySelector('tr[data-name=ci]')`)
	secret := eval(`document.querySelector('#key-secret-value').textContent`)
	keyC := apiC.withKey(secret)
	var me api.Me
	keyC.must(http.StatusOK, http.MethodGet, "/v1/me", nil, &me)
	if me.Key == nil || me.Key.Name != "ci" || me.Role != api.RoleEditor {
		t.Errorf("GET /v1/me with the secret shown = %+v, want the editor key ci", me)
	}
	click("hide the secret", "#key-secret-hide")
	if got := eval(`String(document.documentElement.outerHTML.includes(` + js(secret) + `))`); got != "false" {
		t.Errorf("the key's secret is still in the page after hiding it")
	}
	click("delete the key", `tr[data-name=ci] button[data-action=delete]`)
	click("confirm", "#settings-confirm-yes")
	wait("the key gone", `!document.querySelector('tr[data-name=ci]')`)
	if code, _ := keyC.do(http.MethodGet, "/v1/me", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/me with the deleted key = %d, want 401", code)
	}

	t.Run("secrets", func(t *testing.T) {
		click("the secrets tab", "#settings-tab-secrets")
		wait("the secrets view", `!!document.querySelector('#secret-set')`)
		b := make([]byte, 32)
		rand.Read(b)
		value := hex.EncodeToString(b)
		fill("#secret-name", "DB_PASSWORD")
		fill("#secret-value", value)
		click("set a secret", "#secret-set-submit")
		wait("the secret's row", `(r => r && r.dataset.version === '1')(document.querySelector('tr[data-name=DB_PASSWORD]'))`)
		if got := eval(`String(document.documentElement.outerHTML.includes(` + js(value) + `) || [...document.querySelectorAll('input')].some(e => e.value.includes(` + js(value) + `)))`); got != "false" {
			t.Errorf("the secret's value is in the page after it was set")
		}
		var secrets []api.Secret
		b2 := apiC.must(http.StatusOK, http.MethodGet, "/v1/secrets", nil, &secrets)
		if strings.Contains(string(b2), value) || len(secrets) != 1 || secrets[0].Name != "DB_PASSWORD" || secrets[0].Version != 1 {
			t.Errorf("GET /v1/secrets = %s, want DB_PASSWORD version 1 and no value", b2)
		}
	})

	// The audit log, filtered by action and by who.
	click("the audit tab", "#settings-tab-audit")
	rows := `[...document.querySelectorAll('#audit-table tr[data-testid=audit-row]')]`
	wait("the audit log", rows+`.length > 0`)
	fill("#audit-action", "key.create")
	fill("#audit-who", owner.ID)
	click("filter", "#audit-apply")
	wait("the key entries", rows+`.length === 1 && `+rows+`.every(r => r.dataset.who === `+js(owner.ID)+` && r.dataset.action === 'key.create')`)
	if got := eval(rows + `.map(r => r.dataset.action).join(',')`); got != "key.create" {
		t.Errorf("the owner's key.create entries = %q, want key.create", got)
	}

	t.Run("account in the header", func(t *testing.T) {
		// One account: its name, and no switcher. Switching between two
		// is TestSettingsPage's (this stack has one tenant).
		wait("the account's name", `!document.querySelector('#account-name').hidden && document.querySelector('#account-name').textContent !== ''`)
		if got := eval(`String(document.querySelector('#account-switch').hidden)`); got != "true" {
			t.Errorf("#account-switch shown with one account")
		}
		// A second account with the same owner (a platform operator's
		// act): the switcher offers it, and switching shows its own
		// (empty) secrets, then back.
		cmd := exec.Command(bin+"/gateway", append([]string{"account", "create", "--account-name", "second-co", "--owner-email", ownerEmail,
			"-o", "json", "--scheduler", f.urls()}, tlsArgs(t, pki.RoleGateway, "gateway")...)...)
		var created api.CreateTenantAnswer
		if b, err := cmd.Output(); err != nil || json.Unmarshal(b, &created) != nil || created.Tenant.ID == "" {
			t.Fatalf("gateway account create = %v %s, want the second account", err, b)
		}
		do("reload the secrets", chromedp.Navigate(g.site+"/#/settings/secrets"), chromedp.Reload())
		wait("the account switcher", `!document.querySelector('#account-switch').hidden && document.querySelectorAll('#account-switch option').length === 2`)
		switchTo := func(id string) {
			eval(`(() => { const s = document.querySelector('#account-switch'); s.value = ` + js(id) + `; s.dispatchEvent(new Event('change')); return ''; })()`)
		}
		switchTo(created.Tenant.ID)
		wait("the second account's secrets", `location.hash === '#/settings/secrets' && !!document.querySelector('#secrets-empty') && !document.querySelector('#secrets-empty').hidden && !document.querySelector('tr[data-name=DB_PASSWORD]')`)
		var secrets []api.Secret
		apiC.must(http.StatusOK, http.MethodGet, "/v1/secrets", nil, &secrets)
		if len(secrets) != 1 {
			t.Errorf("the API client's account after the browser's switch has %d secrets, want its own 1 (a switch moves one sign-in)", len(secrets))
		}
		var first string
		for _, o := range strings.Split(eval(`[...document.querySelectorAll('#account-switch option')].map(o => o.value).join(',')`), ",") {
			if o != created.Tenant.ID {
				first = o
			}
		}
		switchTo(first)
		wait("the first account's secrets", `!!document.querySelector('tr[data-name=DB_PASSWORD]')`)
	})

	// The viewer: the secrets' names, no control at all.
	click("sign out", "#signout")
	browserSignIn(t, ctx, g.site, viewerEmail, viewerPassword, ws.ID)
	do("open the settings as the viewer", chromedp.Navigate(g.site+"/#/settings/members"))
	wait("the viewer's secrets view", `location.hash === '#/settings/secrets' && !!document.querySelector('#secrets-read-only')`)
	if got := eval(`[...document.querySelectorAll('#settings-tabs a')].map(a => a.dataset.tab).join(',') + ' ' + document.querySelectorAll('main button, main form, main input, main select, main [data-action]').length`); got != "secrets 0" {
		t.Errorf("the viewer's tabs and controls = %q, want secrets only and no control", got)
	}
}
