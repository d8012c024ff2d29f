package gateway

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/gateway/agentfile"
)

// agentFixture is the fixture's agent runs: two live runs of ws-main,
// each with its grant (credentials "grant" and "grant-other").
type agentFixture struct {
	// run is the run of credential "grant", grant its grant's id.
	run, grant string
	// otherRun is the run of credential "grant-other".
	otherRun, otherGrant string
}

// newAgentFixture is newFixtureWith with the agent runs and their
// grants.
func newAgentFixture(t *testing.T, edit func(*Config)) *fixture {
	t.Helper()
	f := newFixtureWith(t, edit)
	f.addAgentRuns()
	return f
}

// addAgentRuns writes the fixture's agent runs and their grants.
func (f *fixture) addAgentRuns() {
	f.t.Helper()
	var c cred
	f.agent.run, f.agent.grant, c = f.agentRun(wsMain, time.Hour)
	f.creds["grant"] = c
	f.agent.otherRun, f.agent.otherGrant, c = f.agentRun(wsMain, time.Hour)
	f.creds["grant-other"] = c
}

// agentRun writes a live agent run of ws (as POST /v1/runs will) and
// issues its grant, valid for life; it returns the run, the grant's id
// and the grant as a credential.
func (f *fixture) agentRun(ws string, life time.Duration) (run, grant string, c cred) {
	f.t.Helper()
	now := f.g.now()
	run, grant = newID(prefixRun), newID("grant-")
	claims := testClaims(run, grant, ws, now, life)
	tok, err := f.g.grants.issue(f.t.Context(), claims)
	if err != nil {
		f.t.Fatalf("issue a grant: %v", err)
	}
	f.put(kindRun, run, runRecord{
		ID: run, Workspace: ws, State: api.RunRunning, CreatedBy: api.Actor{Kind: "account", ID: accountID("editor@example.com")},
		CreatedAt: now.Truncate(time.Second), Steps: []runStepRecord{},
		Agent: &agentRunRecord{RunAgent: api.RunAgent{
			Name: claims.Agent, Path: agentfile.Path(claims.Agent), Revision: f.rev, SHA256: claims.AgentSHA256,
			Tools: claims.Tools, Secrets: claims.Secrets, Network: claims.Network, Image: claims.Image,
			Limits: claims.Limits, Gates: claims.Gates, GrantExpires: claims.Expires.Truncate(time.Second),
		}, Grant: grant},
	})
	return run, grant, cred{bearer: tok}
}

func testClaims(run, grant, ws string, now time.Time, life time.Duration) grantClaims {
	return grantClaims{
		ID: grant, Run: run, Workspace: ws, Tenant: "acct-fixture", Agent: "analyst", AgentRevision: "rev-x", AgentSHA256: strings.Repeat("ab", 32),
		Tools: []string{api.ToolRead, api.ToolGrep, api.ToolBash}, Secrets: []string{}, Network: "none", Image: "base",
		Limits: api.AgentLimits{CPU: 1, Memory: "512MiB", Timeout: api.Duration(time.Minute), Pids: 64, Workspace: "1GiB", Run: api.Duration(life)},
		Gates:  []string{}, IssuedAt: now, Expires: now.Add(life),
	}
}

// testClock is a clock the tests move.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock { return &testClock{t: time.Now().UTC()} }

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// callRun calls GET /v1/runs/RUN with credential c and returns the answer.
func (f *fixture) callRun(c cred, run string) (int, string) {
	w := f.serve(f.request(c, "GET", "/v1/runs/"+run, ""))
	return w.Code, w.Body.String()
}

const badGrantMessage = "grant does not verify (expired, tampered, or not this cluster's)"

// wantRefused checks that c is refused on its run with status and a
// message holding msg.
func (f *fixture) wantRefused(what string, c cred, run string, status int, msg string) {
	f.t.Helper()
	code, body := f.callRun(c, run)
	if code != status || !strings.Contains(body, msg) {
		f.t.Errorf("%s: GET /v1/runs/%s = %d %s, want %d with %q", what, run, code, body, status, msg)
	}
}

// signer returns the gateway's signing key now (made by the fixture's
// grants) and its kid.
func (f *fixture) signer() (jose.Signer, string) {
	f.t.Helper()
	k := f.g.grants.(*jwsGrants)
	sk, err := k.current(f.t.Context(), f.g.now())
	if err != nil {
		f.t.Fatal(err)
	}
	return sk.signer, sk.kid
}

// sign signs claims and registered claims with signer.
func sign(t *testing.T, s jose.Signer, custom any, reg jwt.Claims) cred {
	t.Helper()
	tok, err := jwt.Signed(s).Claims(custom).Claims(reg).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return cred{bearer: grantPrefix + tok}
}

// TestGrantAcceptedOnItsRun: the fixture's grant reads its own run, acts
// as the run in the run's workspace, and is audited as the grant.
func TestGrantAcceptedOnItsRun(t *testing.T) {
	f := newAgentFixture(t, nil)
	var op api.Operation
	f.do("grant", "GET", "/v1/runs/"+f.agent.run, "", 200, &op)
	if op.ID != f.agent.run {
		t.Errorf("GET /v1/runs/%s = %s, want the run", f.agent.run, op.ID)
	}
	// A write: finish (its handler may answer anything but 401/403).
	before, _ := f.store.Audit(t.Context(), 0, 0)
	w := f.serve(f.request(f.creds["grant"], "POST", "/v1/runs/"+f.agent.run+"/finish", `{}`))
	if w.Code == 401 || w.Code == 403 {
		t.Fatalf("POST finish with the run's grant = %d %s, want it admitted", w.Code, w.Body)
	}
	after, _ := f.store.Audit(t.Context(), 0, 0)
	if len(after) != len(before)+1 {
		t.Fatalf("finish left %d audit entries, want 1", len(after)-len(before))
	}
	var e api.AuditDocument
	json.Unmarshal(after[len(after)-1].Entry, &e)
	if e.Who != f.agent.run || e.Credential == nil || *e.Credential != (api.CredentialRef{Kind: "grant", ID: f.agent.grant}) {
		t.Errorf("audit entry = %+v, want who %s and credential grant/%s", e, f.agent.run, f.agent.grant)
	}
	if strings.Contains(string(after[len(after)-1].Entry), grantPrefix) || strings.Contains(string(after[len(after)-1].Entry), f.creds["grant"].bearer[3:20]) {
		t.Errorf("audit entry carries the token: %s", after[len(after)-1].Entry)
	}
}

// TestGrantOtherRun: a grant of run A is refused on run B, naming both.
func TestGrantOtherRun(t *testing.T) {
	f := newAgentFixture(t, nil)
	for _, path := range []string{"/v1/runs/" + f.agent.otherRun, "/v1/runs/" + f.run, "/v1/runs/run-nosuchrun"} {
		w := f.serve(f.request(f.creds["grant"], "GET", path, ""))
		run := strings.TrimPrefix(path, "/v1/runs/")
		want := "the grant of run " + f.agent.run + " may not act on run " + run
		if w.Code != 403 || !strings.Contains(w.Body.String(), want) {
			t.Errorf("GET %s with the grant of %s = %d %s, want 403 %q", path, f.agent.run, w.Code, w.Body, want)
		}
	}
	w := f.serve(f.request(f.creds["grant"], "POST", "/v1/runs/"+f.agent.otherRun+"/steps", `{"tool":"Read","input":{"path":"a"}}`))
	if w.Code != 403 || !strings.Contains(w.Body.String(), "may not act on run "+f.agent.otherRun) {
		t.Errorf("a tool call on another run = %d %s, want 403", w.Code, w.Body)
	}
	w = f.serve(f.request(f.creds["grant"], "GET", "/v1/workspaces/ws-main/tree", ""))
	if w.Code != 403 || !strings.Contains(w.Body.String(), "accepted only on its own run's routes") {
		t.Errorf("a grant on the workspace's tree = %d %s, want 403", w.Code, w.Body)
	}
}

// TestGrantTampered: a token changed in any part, or signed otherwise than
// by this cluster's key of its kid, is 401 without more.
func TestGrantTampered(t *testing.T) {
	f := newAgentFixture(t, nil)
	tok := strings.TrimPrefix(f.creds["grant"].bearer, grantPrefix)
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("grant %q: want a compact JWS", tok)
	}
	enc := base64.RawURLEncoding
	header, _ := enc.DecodeString(parts[0])
	payload, _ := enc.DecodeString(parts[1])
	var hdr map[string]any
	json.Unmarshal(header, &hdr)
	kid, _ := hdr["kid"].(string)
	if hdr["alg"] != "EdDSA" || !strings.HasPrefix(kid, prefixGrantKey) {
		t.Fatalf("grant header = %s, want alg EdDSA and a kid", header)
	}
	join := func(h, p, s string) cred { return cred{bearer: grantPrefix + h + "." + p + "." + s} }
	headerOf := func(v map[string]any) string { b, _ := json.Marshal(v); return enc.EncodeToString(b) }

	// The payload with more tools, the same signature.
	var claims map[string]any
	json.Unmarshal(payload, &claims)
	claims["tools"] = api.Tools
	more, _ := json.Marshal(claims)
	// Another key under the same kid.
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	otherSigner, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: otherKey},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	var reg jwt.Claims
	var custom grantClaims
	json.Unmarshal(payload, &reg)
	json.Unmarshal(payload, &custom)
	// HS256 keyed with the public key's JWK (algorithm confusion).
	var rec grantKeyRecord
	getRecord(t.Context(), f.store, kindGrantKey, kid, &rec)
	hs, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: []byte(rec.Key)}, (&jose.SignerOptions{}).WithHeader("kid", kid))
	// The right key, other claims.
	s, _ := f.signer()
	at := func(edit func(*jwt.Claims)) jwt.Claims { r := reg; edit(&r); return r }
	now := f.g.now()

	for _, tc := range []struct {
		name string
		c    cred
	}{
		{"the payload changed", join(parts[0], enc.EncodeToString(more), parts[2])},
		{"the signature changed", join(parts[0], parts[1], flip(parts[2]))},
		{"no signature", join(parts[0], parts[1], "")},
		{"alg none", join(headerOf(map[string]any{"alg": "none", "kid": kid}), parts[1], "")},
		{"alg HS256 keyed with the public key", sign(t, hs, custom, reg)},
		{"another key with the same kid", sign(t, otherSigner, custom, reg)},
		{"an unknown kid", join(headerOf(map[string]any{"alg": "EdDSA", "kid": "gk-nosuchkey"}), parts[1], parts[2])},
		{"no kid", join(headerOf(map[string]any{"alg": "EdDSA"}), parts[1], parts[2])},
		{"a kid that is no id", join(headerOf(map[string]any{"alg": "EdDSA", "kid": "../x"}), parts[1], parts[2])},
		{"not a JWS", cred{bearer: grantPrefix + "hello"}},
		{"the JWS without rg_", cred{bearer: "rg-" + tok}},
		{"too long", cred{bearer: grantPrefix + strings.Repeat("a", maxGrantBytes+1)}},
		{"wrong audience", sign(t, s, custom, at(func(r *jwt.Claims) { r.Audience = jwt.Audience{"rodon-other"} }))},
		{"wrong issuer", sign(t, s, custom, at(func(r *jwt.Claims) { r.Issuer = "someone" }))},
		{"no expiry", sign(t, s, custom, at(func(r *jwt.Claims) { r.Expiry = nil }))},
		{"not valid before a minute from now", sign(t, s, custom, at(func(r *jwt.Claims) { r.NotBefore = jwt.NewNumericDate(now.Add(time.Minute)) }))},
		{"issued in an hour", sign(t, s, custom, at(func(r *jwt.Claims) { r.IssuedAt = jwt.NewNumericDate(now.Add(time.Hour)) }))},
		{"expired", sign(t, s, custom, at(func(r *jwt.Claims) { r.Expiry = jwt.NewNumericDate(now.Add(-time.Second)) }))},
		{"a subject other than its run", sign(t, s, custom, at(func(r *jwt.Claims) { r.Subject = f.agent.otherRun }))},
		{"no jti", sign(t, s, custom, at(func(r *jwt.Claims) { r.ID = "" }))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "the JWS without rg_" {
				// Not a grant at all: read as an API key.
				f.wantRefused(tc.name, tc.c, f.agent.run, 401, "API key")
				return
			}
			f.wantRefused(tc.name, tc.c, f.agent.run, 401, badGrantMessage)
		})
	}
	// A gateway whose clock is a few seconds ahead issued it: accepted.
	ahead := sign(t, s, custom, at(func(r *jwt.Claims) {
		r.NotBefore, r.IssuedAt = jwt.NewNumericDate(now.Add(3*time.Second)), jwt.NewNumericDate(now.Add(3*time.Second))
	}))
	if code, body := f.callRun(ahead, f.agent.run); code != 200 {
		t.Errorf("a grant from a clock %v ahead = %d %s, want 200", 3*time.Second, code, body)
	}
	// The right key's token of the same claims is accepted: the refusals
	// above are the change, not the harness.
	if code, body := f.callRun(sign(t, s, custom, reg), f.agent.run); code != 200 {
		t.Errorf("a re-signed copy of the grant = %d %s, want 200", code, body)
	}
	// A grant naming another jti than its run's record holds is refused:
	// the record names the grant, not just the run.
	if code, body := f.callRun(sign(t, s, custom, at(func(r *jwt.Claims) { r.ID = "grant-another" })), f.agent.run); code != 401 || !strings.Contains(body, "the grant ended with its run") {
		t.Errorf("a grant of the run with another id = %d %s, want 401", code, body)
	}
}

// flip changes the first character of a base64url string.
func flip(s string) string {
	c := byte('A')
	if s[0] == 'A' {
		c = 'B'
	}
	return string(c) + s[1:]
}

// TestGrantExpires: a grant is refused from its expiry on.
func TestGrantExpires(t *testing.T) {
	clock := newTestClock()
	f := newAgentFixture(t, func(c *Config) { c.Now = clock.now })
	run, _, c := f.agentRun(wsMain, 10*time.Minute)
	if code, body := f.callRun(c, run); code != 200 {
		t.Fatalf("a fresh grant = %d %s, want 200", code, body)
	}
	clock.advance(10*time.Minute - 2*time.Second)
	if code, body := f.callRun(c, run); code != 200 {
		t.Fatalf("a grant before its expiry = %d %s, want 200", code, body)
	}
	clock.advance(2 * time.Second)
	f.wantRefused("a grant at its expiry", c, run, 401, badGrantMessage)

	// The other grant's run (the fixture's, an hour) still works.
	if code, body := f.callRun(f.creds["grant"], f.agent.run); code != 200 {
		t.Errorf("another grant = %d %s, want 200", code, body)
	}
}

// TestGrantDiesWithItsRun: once the run is no longer live, or its record
// names another grant, or is gone, the grant is refused.
func TestGrantDiesWithItsRun(t *testing.T) {
	f := newAgentFixture(t, nil)
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		edit func(*runRecord)
		ok   bool
	}{
		{"awaiting approval", func(r *runRecord) { r.State = api.RunAwaitingApproval; r.Agent.Awaiting = "prop-x" }, true},
		{"succeeded", func(r *runRecord) { r.State = api.RunSucceeded }, false},
		{"failed", func(r *runRecord) { r.State = api.RunFailed }, false},
		{"cancelled", func(r *runRecord) { r.State = api.RunCancelled }, false},
		{"another grant", func(r *runRecord) { r.Agent.Grant = "grant-another" }, false},
		{"no longer an agent run", func(r *runRecord) { r.Agent = nil }, false},
		{"in another workspace", func(r *runRecord) { r.Workspace = wsOther }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run, _, c := f.agentRun(wsMain, time.Hour)
			var rec runRecord
			v, err := getRecord(ctx, f.store, kindRun, run, &rec)
			if err != nil {
				t.Fatal(err)
			}
			tc.edit(&rec)
			if _, err := putRecord(ctx, f.store, kindRun, run, v, &rec); err != nil {
				t.Fatal(err)
			}
			w := f.serve(f.request(c, "POST", "/v1/runs/"+run+"/steps", `{"tool":"Read","input":{"path":"a"}}`))
			switch {
			case tc.ok && (w.Code == 401 || w.Code == 403):
				t.Errorf("a tool call of a run %s = %d %s, want it admitted", tc.name, w.Code, w.Body)
			case !tc.ok && (w.Code != 401 || !strings.Contains(w.Body.String(), "the grant ended with its run")):
				t.Errorf("a tool call of a run %s = %d %s, want 401 the grant ended with its run", tc.name, w.Code, w.Body)
			}
		})
	}
	t.Run("deleted", func(t *testing.T) {
		run, _, c := f.agentRun(wsMain, time.Hour)
		if err := deleteAny(ctx, f.store, kindRun, run); err != nil {
			t.Fatal(err)
		}
		f.wantRefused("a grant of a deleted run", c, run, 401, "the grant ended with its run")
	})
}

// TestGrantKeyDeleted: a grant whose key record is gone is refused: by a
// gateway that never saw the key at once, by the one that cached it once
// it reads the record again (grantKeyRecheck).
func TestGrantKeyDeleted(t *testing.T) {
	clock := newTestClock()
	f := newAgentFixture(t, func(c *Config) { c.Now = clock.now })
	g2, err := New(f.g.cfg, f.raw, f.sched, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	c := f.creds["grant"]
	if _, err := g2.grants.verify(t.Context(), c.bearer); err != nil {
		t.Fatalf("another gateway's verify = %v, want the grant", err)
	}
	_, kid := f.signer()
	if err := deleteAny(t.Context(), f.store, kindGrantKey, kid); err != nil {
		t.Fatal(err)
	}
	g3, _ := New(f.g.cfg, f.raw, f.sched, testLogger(t))
	if _, err := g3.grants.verify(t.Context(), c.bearer); !errors.Is(err, errBadGrant) {
		t.Errorf("a fresh gateway's verify after the key was deleted = %v, want errBadGrant", err)
	}
	clock.advance(grantKeyRecheck)
	f.wantRefused("the issuing gateway, after the recheck", c, f.agent.run, 401, badGrantMessage)
	if _, err := g2.grants.verify(t.Context(), c.bearer); !errors.Is(err, errBadGrant) {
		t.Errorf("the other gateway's verify after the recheck = %v, want errBadGrant", err)
	}
	// The issuing gateway signs with a new key from then on.
	run, _, fresh := f.agentRun(wsMain, time.Hour)
	if k := kidOf(t, fresh); k == kid {
		t.Errorf("a grant after its key's record was deleted is signed by that key %s, want a new one", kid)
	}
	if code, body := f.callRun(fresh, run); code != 200 {
		t.Errorf("a grant of the new key = %d %s, want 200", code, body)
	}
}

// TestGrantKeyRotation: a gateway signs with a key for grantKeyEvery,
// then makes the next; grants of the old key verify until they expire;
// the old key's record goes once its last grant may have expired.
func TestGrantKeyRotation(t *testing.T) {
	clock := newTestClock()
	f := newAgentFixture(t, func(c *Config) { c.Now = clock.now })
	ctx := t.Context()
	_, k1 := f.signer()
	clock.advance(12 * time.Hour)
	oldRun, _, old := f.agentRun(wsMain, agentfile.MaxRun) // expires at 36h
	if kid := kidOf(t, old); kid != k1 {
		t.Fatalf("a grant at 12h is signed by %s, want %s", kid, k1)
	}
	clock.advance(13 * time.Hour) // 25h: the first key is past its 24h
	newRun, _, fresh := f.agentRun(wsMain, agentfile.MaxRun)
	k2 := kidOf(t, fresh)
	if k2 == k1 {
		t.Fatalf("a grant at 25h is signed by the first key %s, want a new one", k1)
	}
	var rec grantKeyRecord
	if _, err := getRecord(ctx, f.store, kindGrantKey, k2, &rec); err != nil {
		t.Fatalf("the new key's record: %v", err)
	}
	if code, body := f.callRun(old, oldRun); code != 200 {
		t.Errorf("the old key's grant after rotation = %d %s, want 200", code, body)
	}
	if code, body := f.callRun(fresh, newRun); code != 200 {
		t.Errorf("the new key's grant = %d %s, want 200", code, body)
	}
	// A gateway with an empty cache verifies both from the records.
	g2, _ := New(f.g.cfg, f.raw, f.sched, testLogger(t))
	for _, c := range []cred{old, fresh} {
		if _, err := g2.grants.verify(ctx, c.bearer); err != nil {
			t.Errorf("another gateway's verify = %v, want the grant", err)
		}
	}
	if res, err := f.g.Maintain(ctx); err != nil || res.GrantKeys != 0 {
		t.Errorf("Maintain at 25h = %+v, %v; want no grant key deleted", res, err)
	}
	clock.advance(11 * time.Hour) // 36h: the old grant expired
	f.wantRefused("the old grant at its expiry", old, oldRun, 401, badGrantMessage)
	clock.advance(12 * time.Hour) // 48h: the first key's last grant expired
	if res, err := f.g.Maintain(ctx); err != nil || res.GrantKeys != 1 {
		t.Errorf("Maintain at 48h = %+v, %v; want the first key deleted", res, err)
	}
	if _, err := f.store.GetRecord(ctx, kindGrantKey, k1); !IsNotFound(err) {
		t.Errorf("the first key's record after its expiry: %v, want not found", err)
	}
	if _, err := f.store.GetRecord(ctx, kindGrantKey, k2); err != nil {
		t.Errorf("the second key's record at 48h: %v, want it kept (until 73h)", err)
	}
}

func kidOf(t *testing.T, c cred) string {
	t.Helper()
	tok, err := jwt.ParseSigned(strings.TrimPrefix(c.bearer, grantPrefix), []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Headers[0].KeyID
}

// TestGrantKeyPublishedFirst: no grant is signed by a key whose record
// could not be written; the next issue tries again with a new key.
func TestGrantKeyPublishedFirst(t *testing.T) {
	f := newAgentFixture(t, nil)
	ctx := t.Context()
	g2, _ := New(f.g.cfg, f.raw, f.sched, testLogger(t))
	f.store.FailPuts(1)
	now := g2.now()
	if tok, err := g2.grants.issue(ctx, testClaims(f.agent.run, "grant-x", wsMain, now, time.Hour)); err == nil {
		t.Fatalf("issue while the key record cannot be written = %q, want an error", tok)
	}
	tok, err := g2.grants.issue(ctx, testClaims(f.agent.run, "grant-x", wsMain, now, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.GetRecord(ctx, kindGrantKey, kidOf(t, cred{bearer: tok})); err != nil {
		t.Errorf("the key record of a grant: %v", err)
	}
	for _, bad := range []grantClaims{
		testClaims(f.agent.run, "", wsMain, now, time.Hour),
		testClaims("", "grant-y", wsMain, now, time.Hour),
		testClaims(f.agent.run, "grant-y", wsMain, now, agentfile.MaxRun+time.Minute),
		testClaims(f.agent.run, "grant-y", wsMain, now, -time.Second),
	} {
		if tok, err := g2.grants.issue(ctx, bad); err == nil {
			t.Errorf("issue(%+v) = %q, want an error", bad, tok)
		}
	}
}

// TestGrantVerifyClaims: verify gives back what issue signed, times in
// whole seconds.
func TestGrantVerifyClaims(t *testing.T) {
	f := newAgentFixture(t, nil)
	now := f.g.now()
	want := testClaims("run-abc", "grant-abc", wsMain, now, time.Hour)
	tok, err := f.g.grants.issue(t.Context(), want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.g.grants.verify(t.Context(), tok)
	if err != nil {
		t.Fatal(err)
	}
	want.IssuedAt, want.Expires = want.IssuedAt.Truncate(time.Second), want.Expires.Truncate(time.Second)
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) || got.ID != want.ID || !got.IssuedAt.Equal(want.IssuedAt) || !got.Expires.Equal(want.Expires) {
		t.Errorf("verify = %+v\nwant %+v", got, want)
	}
}

// TestGrantNoPrivateKeyInRecords: the store holds public keys only.
func TestGrantNoPrivateKeyInRecords(t *testing.T) {
	clock := newTestClock()
	f := newAgentFixture(t, func(c *Config) { c.Now = clock.now })
	clock.advance(grantKeyEvery) // a second key
	f.agentRun(wsMain, time.Hour)
	ctx := t.Context()
	keys := 0
	for _, kind := range []string{kindAccount, kindKey, kindSignin, kindWorkspace, kindSession, kindRun, kindRunLive, kindRunWS,
		kindRunExpiry, kindQuota, kindBootstrap, kindGrantKey, kindProposal, kindRunEvent} {
		recs, _, err := f.store.ListRecordsPage(ctx, kind, "", 1000, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			if strings.Contains(string(rec.Value), `\"d\"`) || strings.Contains(string(rec.Value), `"d":`) || strings.Contains(string(rec.Value), "PRIVATE") {
				t.Errorf("record %s/%s holds private key material: %s", kind, rec.ID, rec.Value)
			}
			if kind != kindGrantKey {
				continue
			}
			keys++
			var r grantKeyRecord
			json.Unmarshal(rec.Value, &r)
			var jwk jose.JSONWebKey
			if err := jwk.UnmarshalJSON(r.Key); err != nil || !jwk.IsPublic() || jwk.KeyID != rec.ID || jwk.Algorithm != "EdDSA" {
				t.Errorf("grant key %s = %s (%v): want a public EdDSA JWK of its kid", rec.ID, r.Key, err)
			}
			if _, ok := jwk.Key.(ed25519.PublicKey); !ok {
				t.Errorf("grant key %s is a %T, want an Ed25519 public key", rec.ID, jwk.Key)
			}
		}
	}
	if keys != 2 {
		t.Errorf("%d grant key records, want 2", keys)
	}
}

// TestGrantHeader: a malformed Authorization header or a grant with
// spaces around it.
func TestGrantHeader(t *testing.T) {
	f := newAgentFixture(t, nil)
	r := f.request(cred{}, "GET", "/v1/runs/"+f.agent.run, "")
	r.Header.Set("Authorization", "Bearer  "+f.creds["grant"].bearer+" ")
	if w := f.serve(r); w.Code != http.StatusOK {
		t.Errorf("a grant with blanks around it = %d %s, want 200", w.Code, w.Body)
	}
	r.Header.Set("Authorization", "Bearer "+grantPrefix)
	if w := f.serve(r); w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), badGrantMessage) {
		t.Errorf("an empty grant = %d %s, want 401", w.Code, w.Body)
	}
}
