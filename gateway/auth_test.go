package gateway

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/testenv"
)

func TestSignin(t *testing.T) {
	f := newFixture(t)
	signin := func(email, password string) *http.Response {
		w := f.serve(f.request(cred{}, "POST", "/v1/auth/signin", `{"email":"`+email+`","password":"`+password+`"}`))
		return w.Result()
	}
	res := signin("Editor@Example.com", testPassword)
	if res.StatusCode != 200 {
		t.Fatalf("sign in = %d, want 200", res.StatusCode)
	}
	var out api.SignInAnswer
	json.NewDecoder(res.Body).Decode(&out)
	var ck *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == cookieName {
			ck = c
		}
	}
	if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.Secure {
		t.Fatalf("cookie = %+v, want HttpOnly, SameSite=Strict, Path=/, not Secure on http", ck)
	}
	if out.Account.Role != api.RoleEditor || out.CSRFToken == "" || out.CSRFToken != csrfToken(ck.Value) {
		t.Errorf("sign-in answer = %+v, want the editor and the session's CSRF token", out)
	}
	// Only the token's digest is stored.
	recs, _ := f.store.ListRecords(t.Context(), kindSignin, "")
	for _, r := range recs {
		if strings.Contains(string(r.Value), ck.Value) || strings.Contains(r.ID, ck.Value) {
			t.Errorf("sign-in record %s stores the token", r.ID)
		}
	}
	f.creds["new"] = cred{cookie: ck.Value, csrf: out.CSRFToken, person: true}
	var me api.Me
	f.do("new", "GET", "/v1/me", "", 200, &me)
	if me.Account == nil || me.Account.Email != "editor@example.com" || me.CSRFToken != out.CSRFToken {
		t.Errorf("GET /v1/me = %+v, want the editor with the CSRF token", me)
	}
	f.do("new", "POST", "/v1/auth/signout", "", 204, nil)
	f.do("new", "GET", "/v1/me", "", 401, nil)

	// Wrong password and unknown email get the same answer.
	for _, c := range [][2]string{{"editor@example.com", "wrong password!"}, {"nobody@example.com", "whatever it is"}} {
		w := f.serve(f.request(cred{}, "POST", "/v1/auth/signin", `{"email":"`+c[0]+`","password":"`+c[1]+`"}`))
		if w.Code != 401 || !strings.Contains(w.Body.String(), "email or password is wrong") {
			t.Errorf("sign in %s = %d %s, want 401 email or password is wrong", c[0], w.Code, w.Body)
		}
	}
	// The failure on an existing account is audited, without the
	// password; the unknown email's is only counted.
	entries, _ := f.store.Audit(t.Context(), 0, 0)
	var fails int
	for _, e := range entries {
		var a api.AuditDocument
		json.Unmarshal(e.Entry, &a)
		if a.Action == "auth.signin" && a.Result == codeUnauthorized {
			fails++
		}
		if strings.Contains(string(e.Entry), "wrong password") {
			t.Errorf("audit entry carries a password: %s", e.Entry)
		}
	}
	if fails != 1 {
		t.Errorf("%d failed sign-ins audited, want 1", fails)
	}
}

func TestSigninExpired(t *testing.T) {
	f := newFixture(t)
	tok := randomString(40)
	now := time.Now().UTC()
	f.put(kindSignin, digest(tok), signinRecord{Account: accountID("owner@example.com"), CreatedAt: now.Add(-13 * time.Hour), ExpiresAt: now.Add(-time.Hour)})
	f.creds["old"] = cred{cookie: tok, csrf: csrfToken(tok), person: true}
	f.do("old", "GET", "/v1/me", "", 401, nil)
	if _, err := f.store.GetRecord(t.Context(), kindSignin, digest(tok)); !IsNotFound(err) {
		t.Errorf("expired sign-in record = %v, want deleted", err)
	}
}

// TestSigninRateLimit: a sixth attempt on one email within the window is
// refused with 429 and Retry-After, before the password is checked.
func TestSigninRateLimit(t *testing.T) {
	f := newFixture(t)
	clock := time.Now()
	var mu sync.Mutex
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	f.g.signinByEmail.now, f.g.signinByAddr.now = now, now
	attempt := func(email, pw, addr string) *http.Response {
		r := f.request(cred{}, "POST", "/v1/auth/signin", `{"email":"`+email+`","password":"`+pw+`"}`)
		r.RemoteAddr = addr
		return f.serve(r).Result()
	}
	for i := range 5 {
		if res := attempt("viewer@example.com", "wrong password!", "192.0.2.7:1"); res.StatusCode != 401 {
			t.Fatalf("attempt %d = %d, want 401", i, res.StatusCode)
		}
	}
	res := attempt("viewer@example.com", testPassword, "192.0.2.8:1")
	if res.StatusCode != 429 || res.Header.Get("Retry-After") == "" {
		t.Fatalf("sixth attempt = %d Retry-After %q, want 429 with Retry-After", res.StatusCode, res.Header.Get("Retry-After"))
	}
	// Another email is not limited by this one...
	if res := attempt("editor@example.com", testPassword, "192.0.2.8:1"); res.StatusCode != 200 {
		t.Errorf("other email = %d, want 200", res.StatusCode)
	}
	// ...but one address trying many emails is.
	var limited bool
	for i := range 30 {
		if attempt("user"+string(rune('a'+i))+"@example.com", "x", "192.0.2.9:1").StatusCode == 429 {
			limited = true
			break
		}
	}
	if !limited {
		t.Errorf("30 attempts from one address on different emails were never limited")
	}
	// The bucket refills.
	mu.Lock()
	clock = clock.Add(time.Minute)
	mu.Unlock()
	if res := attempt("viewer@example.com", testPassword, "192.0.2.10:1"); res.StatusCode != 200 {
		t.Errorf("attempt after a minute = %d, want 200", res.StatusCode)
	}
}

func TestKeyCannotActAsPerson(t *testing.T) {
	f := newFixture(t)
	// A key's secret is checked: a wrong one is refused.
	c := f.creds["key-owner"]
	c.bearer = c.bearer[:len(c.bearer)-2] + "xx"
	f.creds["badkey"] = c
	f.do("badkey", "GET", "/v1/me", "", 401, nil)
	f.creds["malformed"] = cred{bearer: "hello"}
	f.do("malformed", "GET", "/v1/me", "", 401, nil)
	// A created key works once and its secret is not stored.
	var out api.CreateKeyAnswer
	f.do("owner", "POST", "/v1/keys", `{"name":"ci","role":"editor","workspaces":["ws-main"]}`, 201, &out)
	if !strings.HasPrefix(out.Secret, "rk_") {
		t.Fatalf("secret = %q, want rk_...", out.Secret)
	}
	rec, _ := f.store.GetRecord(t.Context(), kindKey, out.Key.ID)
	if strings.Contains(string(rec.Value), strings.Split(out.Secret, "_")[2]) {
		t.Errorf("key record stores the secret")
	}
	f.creds["ci"] = cred{bearer: out.Secret}
	var me api.Me
	f.do("ci", "GET", "/v1/me", "", 200, &me)
	if me.Key == nil || me.Account != nil || me.Role != api.RoleEditor {
		t.Errorf("GET /v1/me as a key = %+v, want the key as editor", me)
	}
	f.do("ci", "POST", "/v1/runs", `{"workspace":"ws-other","steps":[{"args":["x"]}]}`, 403, nil)
	// An admin cannot make an owner, nor an admin key.
	f.do("admin", "POST", "/v1/members", `{"email":"x@example.com","password":"long enough password","role":"owner"}`, 403, nil)
	f.do("admin", "POST", "/v1/keys", `{"name":"x","role":"admin"}`, 403, nil)
	f.do("admin", "PATCH", "/v1/members/"+f.editorID, `{"role":"admin"}`, 403, nil)
	// The last owner stays.
	f.do("owner", "PATCH", "/v1/members/"+accountID("owner@example.com"), `{"role":"viewer"}`, 409, nil)
}

// TestStreamOrigin: a websocket opened with the cookie must come from the
// site; the stream is interactive only for an editor on a tty step.
func TestStreamOrigin(t *testing.T) {
	f := newFixture(t)
	path := "/v1/steps/" + stepOf(f) + "/stream?from=4"
	for _, tc := range []struct {
		name, cred, origin string
		want               int
	}{
		{"cookie without origin", "viewer", "", 403},
		{"cookie from elsewhere", "viewer", "http://evil.test", 403},
		{"cookie from the site", "viewer", testSite, 200},
		{"key without origin", "key-viewer", "", 200},
	} {
		r := f.request(f.creds[tc.cred], "GET", path, "")
		r.Header.Set("Upgrade", "websocket")
		r.Header.Set("Connection", "Upgrade")
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		if w := f.serve(r); w.Code != tc.want {
			t.Errorf("%s: stream = %d %s, want %d", tc.name, w.Code, w.Body, tc.want)
		} else if w.Code == 200 && !strings.Contains(w.Body.String(), `"from":4`) {
			t.Errorf("%s: relay got %s, want from 4", tc.name, w.Body)
		}
	}
}

func TestBootstrap(t *testing.T) {
	store := newTestScheduler(t).store
	ctx := t.Context()
	now := time.Now().UTC()
	var wg sync.WaitGroup
	results := make([]BootstrapResult, 4)
	for i := range results {
		wg.Go(func() {
			var err error
			results[i], err = Bootstrap(ctx, store, "Boss@Example.com", now)
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var created []BootstrapResult
	for _, r := range results {
		if r.Created {
			created = append(created, r)
		}
	}
	if len(created) != 1 || len(created[0].Password) < 20 {
		t.Fatalf("racing bootstraps created %d owners (%+v), want 1 with a long password", len(created), created)
	}
	var p personRecord
	getRecord(ctx, store, kindPerson, accountID("boss@example.com"), &p)
	if !checkPassword(p.PasswordHash, created[0].Password) || strings.Contains(p.PasswordHash, created[0].Password) {
		t.Errorf("person = %+v, want a person whose hash matches the password", p)
	}
	tenant := created[0].Tenant
	if tenant.Name != "default" || !validID(tenant.ID, prefixTenant) || !slices.Equal(p.Tenants, []string{tenant.ID}) {
		t.Errorf("account = %+v, person's accounts %v; want one account named default, the person's", tenant, p.Tenants)
	}
	var a accountRecord
	getRecord(withTenant(ctx, tenant.ID), newTenantStore(store), kindAccount, accountID("boss@example.com"), &a)
	if a.Role != api.RoleOwner || a.PasswordHash != "" {
		t.Errorf("owner = %+v, want an owner member without a password", a)
	}
	if tenants, err := ListTenants(ctx, store); err != nil || len(tenants) != 1 {
		t.Errorf("ListTenants() = %+v, %v; want the one account", tenants, err)
	}
	if r, err := Bootstrap(ctx, store, "other@example.com", now.Add(time.Hour)); err != nil || r.Created {
		t.Errorf("Bootstrap with an owner = %+v, %v; want nothing done", r, err)
	}
}

// TestServeBootstrapsAndStops: Serve creates the owner on first start,
// prints the password once, answers /healthz, and returns nil on cancel.
func TestServeBootstrapsAndStops(t *testing.T) {
	ts := newTestScheduler(t)
	store, sched := ts.store, ts.sched
	var out testenv.SyncBuffer
	cfg := DefaultConfig()
	cfg.Site, cfg.OwnerEmail, cfg.BootstrapOut, cfg.DataDir = testSite, "first@example.com", &out, t.TempDir()
	g, err := New(cfg, store, sched, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := serveLoopback(t, g)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "one-time password") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "first@example.com") {
		t.Fatalf("bootstrap output = %q, want the owner and its password", out.String())
	}
	res, err := http.Get("http://" + addr + "/healthz")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("GET /healthz = %v, %v", res, err)
	}
	if res.Header.Get("Content-Security-Policy") == "" || res.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("security headers missing: %v", res.Header)
	}
	res.Body.Close()
	page, err := http.Get("http://" + addr + "/")
	if err != nil || page.StatusCode != 200 {
		t.Fatalf("GET / = %v, %v", page, err)
	}
	page.Body.Close()
	if err := stop(); err != nil {
		t.Errorf("Serve() = %v, want nil", err)
	}
	// A second gateway prints nothing.
	var out2 testenv.SyncBuffer
	cfg.BootstrapOut = &out2
	g2, _ := New(cfg, store, sched, testLogger(t))
	g2.bootstrapLoop(t.Context())
	if out2.String() != "" {
		t.Errorf("second gateway printed %q, want nothing", out2.String())
	}
}
