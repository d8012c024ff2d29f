package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/secretbox"
)

// testTenant is the tenant every fixture call acts in (request).
const testTenant = "acct-fixture"

// The fixture's secret (newFixtureWith).
const (
	fixtureSecret      = "FIXTURE_SECRET"
	fixtureSecretValue = "fixture secret value"
)

// testRootKey makes a root key file in a temporary directory.
func testRootKey(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "root-key.json")
	if err := secretbox.CreateRoot(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// tenantCtx is the test's context acting in testTenant.
func (f *fixture) tenantCtx() context.Context { return withTenant(f.t.Context(), testTenant) }

// setSecret sets secret name of testTenant as an admin would.
func (f *fixture) setSecret(name, value string) {
	f.t.Helper()
	body, _ := json.Marshal(api.PutSecretRequest{Value: value})
	w := f.serve(f.request(f.creds["admin"], "PUT", "/v1/secrets/"+name, string(body)))
	if w.Code != http.StatusCreated && w.Code != http.StatusOK {
		f.t.Fatalf("PUT secret %s = %d %s", name, w.Code, w.Body)
	}
}

// valueForms are value and its base64 and hex forms.
func valueForms(value string) []string {
	return []string{value, base64.StdEncoding.EncodeToString([]byte(value)), base64.RawURLEncoding.EncodeToString([]byte(value)), hex.EncodeToString([]byte(value))}
}

// checkNoValue fails if b holds any form of a value.
func checkNoValue(t *testing.T, what string, b []byte, values ...string) {
	t.Helper()
	for _, v := range values {
		for _, form := range valueForms(v) {
			if bytes.Contains(b, []byte(form)) {
				t.Errorf("%s holds a secret value (%q): %s", what, v, truncateText(string(b), 300))
			}
		}
	}
}

func TestSecretsAPI(t *testing.T) {
	f := newFixture(t)
	v1, v2, other := "first value "+randomString(20), "second value "+randomString(20), "other "+randomString(20)
	var got api.Secret
	w := f.do("admin", "PUT", "/v1/secrets/API_TOKEN", `{"value":"`+v1+`"}`, 201, &got)
	checkNoValue(t, "PUT answer", w.Body.Bytes(), v1)
	admin := accountID("admin@example.com")
	if got.Name != "API_TOKEN" || got.Version != 1 || got.UpdatedBy != (api.Actor{Kind: "account", ID: admin}) || got.CreatedAt.IsZero() {
		t.Errorf("PUT = %+v, want API_TOKEN version 1 by %s", got, admin)
	}
	created := got.CreatedAt
	w = f.do("owner", "PUT", "/v1/secrets/API_TOKEN", `{"value":"`+v2+`"}`, 200, &got)
	checkNoValue(t, "PUT answer", w.Body.Bytes(), v1, v2)
	owner := accountID("owner@example.com")
	if got.Version != 2 || got.UpdatedBy.ID != owner || !got.CreatedAt.Equal(created) {
		t.Errorf("replace = %+v, want version 2 by %s, created at %v", got, owner, created)
	}
	f.do("key-admin", "PUT", "/v1/secrets/OTHER", `{"value":"`+other+`"}`, 201, nil)

	for _, who := range []string{"viewer", "key-viewer", "editor"} {
		for _, req := range [][3]string{{"PUT", "/v1/secrets/API_TOKEN", `{"value":"x"}`}, {"DELETE", "/v1/secrets/API_TOKEN", ""}} {
			f.do(who, req[0], req[1], req[2], 403, nil)
		}
	}
	var list []api.Secret
	w = f.do("viewer", "GET", "/v1/secrets", "", 200, &list)
	checkNoValue(t, "GET /v1/secrets", w.Body.Bytes(), v1, v2, other, fixtureSecretValue)
	if strings.Contains(w.Body.String(), "sealed") || strings.Contains(w.Body.String(), "wrapped") {
		t.Errorf("GET /v1/secrets shows ciphertext: %s", w.Body)
	}
	var names []string
	for _, s := range list {
		names = append(names, s.Name)
		if s.Name == "API_TOKEN" && (s.Version != 2 || s.UpdatedBy.ID != owner || s.UpdatedAt.IsZero()) {
			t.Errorf("listed %+v, want version 2 by %s, with a time", s, owner)
		}
	}
	if want := []string{"API_TOKEN", fixtureSecret, "OTHER"}; !cmp.Equal(names, want) {
		t.Errorf("GET /v1/secrets names = %v, want %v", names, want)
	}
	// Paged like every list.
	w = f.do("viewer", "GET", "/v1/secrets?limit=2", "", 200, &list)
	cur := w.Header().Get(nextCursorHeader)
	if len(list) != 2 || cur == "" {
		t.Fatalf("first page = %d secrets, cursor %q; want 2 and a cursor", len(list), cur)
	}
	f.do("viewer", "GET", "/v1/secrets?limit=2&cursor="+cur, "", 200, &list)
	if len(list) != 1 || list[0].Name != "OTHER" {
		t.Errorf("second page = %+v, want OTHER", list)
	}

	vals, err := f.g.secretValues(f.tenantCtx(), []string{"API_TOKEN", "OTHER"})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"API_TOKEN": v2, "OTHER": other}; !cmp.Equal(vals, want) {
		t.Errorf("secretValues = %v, want %v", vals, want)
	}

	f.do("admin", "DELETE", "/v1/secrets/API_TOKEN", "", 204, nil)
	w = f.do("admin", "DELETE", "/v1/secrets/API_TOKEN", "", 404, nil)
	if !strings.Contains(w.Body.String(), "API_TOKEN") {
		t.Errorf("DELETE of an absent secret = %s, want it named", w.Body)
	}
	if _, err := f.g.secretValues(f.tenantCtx(), []string{"OTHER", "API_TOKEN"}); !errors.Is(err, errNoSecret) || !strings.Contains(err.Error(), "API_TOKEN") {
		t.Errorf("secretValues of a deleted secret = %v, want errNoSecret naming API_TOKEN", err)
	}

	// The audit names each write's secret and version, never a value.
	entries, err := f.store.Audit(t.Context(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, e := range entries {
		checkNoValue(t, "audit entry", e.Entry, v1, v2, other, fixtureSecretValue)
		var d api.AuditDocument
		json.Unmarshal(e.Entry, &d)
		if strings.HasPrefix(d.Action, "secret.") && d.Result == "ok" {
			seen = append(seen, fmt.Sprintf("%s %s %d %s", d.Action, d.Secret, d.Version, d.Who))
			if d.Target != d.Secret {
				t.Errorf("audit entry %+v: target is not the secret", d)
			}
		}
	}
	keyAdmin := ""
	for _, e := range seen {
		if strings.HasPrefix(e, "secret.put OTHER 1 ") {
			keyAdmin = strings.TrimPrefix(e, "secret.put OTHER 1 ")
		}
	}
	want := []string{"secret.put " + fixtureSecret + " 1 " + admin, "secret.put API_TOKEN 1 " + admin, "secret.put API_TOKEN 2 " + owner,
		"secret.put OTHER 1 " + keyAdmin, "secret.delete API_TOKEN 2 " + admin}
	if !strings.HasPrefix(keyAdmin, prefixKey) || !cmp.Equal(seen, want) {
		t.Errorf("secret audit entries:\n%s", cmp.Diff(want, seen))
	}
	// The store holds sealed values only.
	for _, kind := range []string{kindSecret, kindDataKey} {
		recs, _, err := f.store.ListRecordsPage(t.Context(), kind, "", 100, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			checkNoValue(t, kind+" record", r.Value, v1, v2, other, fixtureSecretValue)
		}
	}
}

func TestSecretsBadInput(t *testing.T) {
	f := newFixture(t)
	big := strings.Repeat("x", maxSecretValue+1)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		field                    string
	}{
		{"lower-case name", "PUT", "/v1/secrets/api_token", `{"value":"v"}`, 400, "secret name"},
		{"leading digit", "PUT", "/v1/secrets/1TOKEN", `{"value":"v"}`, 400, "secret name"},
		{"dash", "PUT", "/v1/secrets/A-B", `{"value":"v"}`, 400, "secret name"},
		{"long name", "PUT", "/v1/secrets/" + strings.Repeat("A", 65), `{"value":"v"}`, 400, "secret name"},
		{"empty value", "PUT", "/v1/secrets/TOKEN", `{"value":""}`, 400, `field \"value\"`},
		{"no value", "PUT", "/v1/secrets/TOKEN", `{}`, 400, `field \"value\"`},
		{"NUL", "PUT", "/v1/secrets/TOKEN", `{"value":"a\u0000b"}`, 400, `field \"value\"`},
		{"too long", "PUT", "/v1/secrets/TOKEN", `{"value":"` + big + `"}`, 400, `field \"value\"`},
		{"unknown field", "PUT", "/v1/secrets/TOKEN", `{"value":"v","name":"X"}`, 400, "name"},
		{"not JSON", "PUT", "/v1/secrets/TOKEN", `value=v`, 400, ""},
		{"delete bad name", "DELETE", "/v1/secrets/a.b", "", 400, "secret name"},
		{"delete absent", "DELETE", "/v1/secrets/ABSENT", "", 404, "ABSENT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := f.do("admin", tc.method, tc.path, tc.body, tc.status, nil)
			if !strings.Contains(w.Body.String(), tc.field) {
				t.Errorf("%s %s = %s, want %s named", tc.method, tc.path, w.Body, tc.field)
			}
			if strings.Contains(w.Body.String(), "xxxxxxxx") {
				t.Errorf("%s %s quotes the value: %.200s", tc.method, tc.path, w.Body)
			}
		})
	}
	var list []api.Secret
	f.do("viewer", "GET", "/v1/secrets", "", 200, &list)
	if len(list) != 1 {
		t.Errorf("after bad input the secrets are %+v, want the fixture's only", list)
	}
}

// TestSecretsRootKeyFile: without a usable root key file the secrets
// routes answer 503 saying why and the rest works; a file put back (or
// changed) is read without a restart.
func TestSecretsRootKeyFile(t *testing.T) {
	f := newFixture(t)
	path := f.g.cfg.RootKeyFile
	aside := path + ".aside"
	if err := os.Rename(path, aside); err != nil {
		t.Fatal(err)
	}
	for _, req := range [][3]string{{"PUT", "/v1/secrets/TOKEN", `{"value":"v"}`}, {"GET", "/v1/secrets", ""}, {"DELETE", "/v1/secrets/" + fixtureSecret, ""}} {
		w := f.do("admin", req[0], req[1], req[2], 503, nil)
		if !strings.Contains(w.Body.String(), path) || !strings.Contains(w.Body.String(), "init-root") {
			t.Errorf("%s %s without a root key file = %s, want the file and init-root named", req[0], req[1], w.Body)
		}
	}
	if _, err := f.g.secretValues(f.tenantCtx(), []string{fixtureSecret}); err == nil {
		t.Error("secretValues without a root key file succeeded")
	}
	f.do("viewer", "GET", "/v1/workspaces", "", 200, nil)

	os.Rename(aside, path)
	os.Chmod(path, 0o644)
	if w := f.do("admin", "GET", "/v1/secrets", "", 503, nil); !strings.Contains(w.Body.String(), "chmod 600") {
		t.Errorf("GET /v1/secrets with a root key file readable by others = %s, want chmod 600 asked", w.Body)
	}
	os.Chmod(path, 0o600)
	f.do("admin", "PUT", "/v1/secrets/TOKEN", `{"value":"v"}`, 201, nil)

	// Another root key: the data key does not open, and the answer says so.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := secretbox.CreateRoot(path); err != nil {
		t.Fatal(err)
	}
	if w := f.do("admin", "PUT", "/v1/secrets/TOKEN", `{"value":"v"}`, 503, nil); !strings.Contains(w.Body.String(), "does not open") {
		t.Errorf("PUT with another root key = %s, want 503 saying it does not open the data key", w.Body)
	}
}

// TestDataKeyRace: gateways creating a tenant's data key at once end with
// one key: each loser of the compare-and-set reads the winner's, so a
// value sealed through one gateway opens through every other.
func TestDataKeyRace(t *testing.T) {
	f := newFixture(t)
	// Start without the fixture's data key (its secret no longer opens).
	rec, err := f.store.GetRecord(t.Context(), kindDataKey, dataKeyID)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.DeleteRecord(t.Context(), kindDataKey, dataKeyID, rec.Version); err != nil {
		t.Fatal(err)
	}
	gws := []*Gateway{f.g}
	for range 3 {
		g, err := New(f.g.cfg, f.raw, f.sched, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		gws = append(gws, g)
	}
	keys := make([]*secretbox.DataKey, len(gws))
	errs := make(chan error, len(gws))
	for i, g := range gws {
		go func() {
			var err error
			keys[i], err = g.dataKey(f.tenantCtx(), true)
			errs <- err
		}()
	}
	for range gws {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	sealed, err := keys[0].Seal(testTenant, "RACE", 1, "raced")
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if got, err := k.Open(testTenant, "RACE", 1, sealed); err != nil || got != "raced" {
			t.Errorf("gateway %d's data key: Open = %q, %v; want one key for all", i, got, err)
		}
	}
}

// TestSecretsLimit: an account holds at most maxSecrets; past it a new
// secret is refused with 429 naming the bound, and replacing one still
// works.
func TestSecretsLimit(t *testing.T) {
	old := maxSecrets
	maxSecrets = 2
	t.Cleanup(func() { maxSecrets = old })
	f := newFixture(t) // holds FIXTURE_SECRET
	f.do("admin", "PUT", "/v1/secrets/SECOND", `{"value":"v2"}`, http.StatusCreated, nil)
	w := f.do("admin", "PUT", "/v1/secrets/THIRD", `{"value":"v3"}`, http.StatusTooManyRequests, nil)
	if !strings.Contains(w.Body.String(), "at most 2") {
		t.Errorf("PUT past the bound = %s, want it named", w.Body)
	}
	f.do("admin", "PUT", "/v1/secrets/SECOND", `{"value":"v2b"}`, http.StatusOK, nil)
}
