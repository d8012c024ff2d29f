package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// TestMigrate: the records of a cluster from before tenants (bare ids,
// members holding their password) move to one tenant named default, by
// two gateways at once, and a second pass changes nothing; the old
// sign-in, key and password work after it.
func TestMigrate(t *testing.T) {
	ts := newTestScheduler(t)
	raw := ts.store
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Second)
	put := func(kind, id string, v any) {
		t.Helper()
		if _, err := putRecord(ctx, raw, kind, id, 0, v); err != nil {
			t.Fatal(err)
		}
	}
	// The old layout.
	owner := accountID("old@example.com")
	put(kindAccount, owner, accountRecord{ID: owner, Email: "old@example.com", Role: api.RoleOwner, PasswordHash: testHash(), CreatedAt: now, Generation: "g1"})
	keyID, secret := newID(prefixKey), randomString(52)
	put(kindKey, keyID, keyRecord{ID: keyID, Name: "ci", Role: api.RoleViewer, SecretHash: digest(secret), CreatedAt: now})
	put(kindWorkspace, wsMain, api.Workspace{ID: wsMain, Name: "main", CreatedAt: now})
	run := newTimeID(prefixRun, now)
	put(kindRun, run, runRecord{ID: run, Workspace: wsMain, State: api.RunSucceeded, CreatedAt: now, Steps: []runStepRecord{}})
	put(kindRunWS, wsIndexID(wsMain, run), runIndexRecord{Workspace: wsMain, CreatedAt: now})
	put(kindRunExpiry, expiryID(run, now), runIndexRecord{Workspace: wsMain, CreatedAt: now})
	put(kindLibrary, libraryRec, libraryRecord{Workspace: "ws-lib", CreatedAt: now})
	tok := randomString(40)
	put(kindSignin, digest(tok), signinRecord{Account: owner, Generation: "g1", CreatedAt: now, ExpiresAt: now.Add(time.Hour)})

	if _, err := migratedTenant(ctx, raw); err == nil {
		t.Error("migratedTenant before the migration succeeded, want an error")
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if err := migrate(ctx, raw, now); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := migrate(ctx, raw, now); err != nil {
		t.Fatalf("second migrate = %v", err)
	}

	tenants, err := ListTenants(ctx, raw)
	if err != nil || len(tenants) != 1 || tenants[0].Name != "default" {
		t.Fatalf("tenants after migrate = %+v, %v; want one named default", tenants, err)
	}
	tenant := tenants[0].ID
	if got, err := migratedTenant(ctx, raw); err != nil || got != tenant {
		t.Errorf("migratedTenant() = %q, %v; want %s (an old grant's)", got, err, tenant)
	}
	for _, kind := range []string{kindAccount, kindKey, kindWorkspace, kindRun, kindRunWS, kindRunExpiry, kindLibrary} {
		recs, err := raw.ListRecords(ctx, kind, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 || !strings.HasPrefix(recs[0].ID, tenant+".") {
			t.Errorf("%s records after migrate = %v, want one, under %s", kind, recs, tenant)
		}
	}
	s := newTenantStore(raw)
	var a accountRecord
	if _, err := getRecord(withTenant(ctx, tenant), s, kindAccount, owner, &a); err != nil || a.PasswordHash != "" || a.Role != api.RoleOwner || a.Generation != "g1" {
		t.Errorf("member after migrate = %+v, %v; want the owner, generation kept, without a password", a, err)
	}
	var p personRecord
	if _, err := getRecord(ctx, s, kindPerson, owner, &p); err != nil || p.PasswordHash != testHash() || len(p.Tenants) != 1 || p.Tenants[0] != tenant {
		t.Errorf("person after migrate = %+v, %v; want the password, member of %s", p, err, tenant)
	}

	// The old sign-in, key and password still work, in the default tenant.
	cfg := DefaultConfig()
	cfg.Site, cfg.OwnerEmail = testSite, ""
	g, err := New(cfg, raw, ts.sched, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, g: g, h: g.Handler()}
	for _, c := range []cred{{cookie: tok}, {bearer: keyPrefix + strings.TrimPrefix(keyID, prefixKey) + "_" + secret}} {
		w := f.serve(f.request(c, "GET", "/v1/runs/"+run, ""))
		if w.Code != http.StatusOK {
			t.Errorf("GET the old run with %+v = %d %s, want 200", c, w.Code, w.Body)
		}
	}
	r := httptest.NewRequest("POST", "/v1/auth/signin", strings.NewReader(`{"email":"old@example.com","password":"`+testPassword+`"}`))
	r.Header.Set("Content-Type", "application/json")
	r.RemoteAddr = "192.0.2.1:5555"
	if w := f.serve(r); w.Code != http.StatusOK {
		t.Errorf("sign in with the old password = %d %s, want 200", w.Code, w.Body)
	}
}
