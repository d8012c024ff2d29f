package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/gateway/relay"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/scheduler/client"
)

const (
	testSite     = "http://gw.test"
	testPassword = "correct horse battery"
	wsMain       = "ws-main"
	wsOther      = "ws-other"
)

// testHash is testPassword's hash, computed once: argon2id is slow on
// purpose.
var testHash = sync.OnceValue(func() string { return hashPassword(testPassword) })

func testLogger(t testing.TB) *slog.Logger { return testenv.Logger(t) }

// serveLoopback runs g.Serve on a loopback port until the returned stop
// is called; stop returns what Serve returned.
func serveLoopback(t *testing.T, g *Gateway) (addr string, stop func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()
	return ln.Addr().String(), func() error {
		cancel()
		return <-done
	}
}

// fakeStream stands in for the relay: it answers what it was given, and
// keeps the stream for a test to drive its hooks.
type fakeStream struct {
	mu   sync.Mutex
	last *relay.Stream
}

func (fs *fakeStream) ServeStream(w http.ResponseWriter, r *http.Request, st relay.Stream) {
	fs.mu.Lock()
	fs.last = &st
	fs.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"step": st.StepID, "from": st.From, "interactive": st.Interactive})
}

// stream returns the last stream served.
func (fs *fakeStream) stream() *relay.Stream {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.last
}

// fixture is a gateway on the real scheduler (schedulertest) with two workspaces and one credential of
// each kind.
type fixture struct {
	t *testing.T
	// store is the fixture's tenant's view of the records (what the
	// gateway's handlers see); raw is the scheduler's store itself.
	store  *boundStore
	raw    *testStore
	tenant string
	sched  *testSteps
	g      *Gateway
	stream *fakeStream
	h      http.Handler
	// creds by name: "none", "viewer".."owner" (people), "key-viewer"..
	// "key-owner", "other" (an admin limited to ws-other).
	creds map[string]cred
	// run is a run in ws-main whose first step is running.
	run string
	// member ids: an editor and a viewer, targets of member writes;
	// keyViewer a viewer key to delete.
	editorID, viewerID, targetKey string
	// rev is ws-main's first revision, holding data/a.txt (aText).
	rev string
	// agent is the live agent runs of credentials "grant" and
	// "grant-other", once addAgentRuns wrote them (grant_test.go).
	agent agentFixture
}

// aText is data/a.txt of ws-main's first revision.
const aText = "hello, workspace\n"

// cred is how a test request authenticates.
type cred struct {
	cookie, csrf, bearer string
	person               bool
}

var personRoles = []api.Role{api.RoleViewer, api.RoleEditor, api.RoleAdmin, api.RoleOwner}

func newFixture(t *testing.T) *fixture {
	return newFixtureWith(t, nil)
}

// newFixtureWith is newFixture with edit applied to the configuration.
func newFixtureWith(t *testing.T, edit func(*Config)) *fixture {
	t.Helper()
	ts := newTestScheduler(t)
	f := &fixture{t: t, raw: ts.store, sched: ts.sched, creds: map[string]cred{"none": {}},
		stream: &fakeStream{}, tenant: "acct-fixture"}
	f.store = bindTenant(ts.store, f.tenant)
	cfg := DefaultConfig()
	cfg.Site, cfg.OwnerEmail, cfg.Stream = testSite, "", f.stream
	cfg.RootKeyFile = testRootKey(t)
	if edit != nil {
		edit(&cfg)
	}
	g, err := New(cfg, f.raw, f.sched, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	f.g, f.h = g, g.Handler()
	now := time.Now().UTC().Truncate(time.Second)
	f.put(kindTenant, f.tenant, tenantRecord{ID: f.tenant, Name: "fixture", CreatedAt: now})
	for _, ws := range []string{wsMain, wsOther} {
		f.put(kindWorkspace, ws, api.Workspace{ID: ws, Name: ws, CreatedAt: now})
	}
	for _, r := range personRoles {
		id := f.account(r.String()+"@example.com", r, nil)
		f.creds[r.String()] = f.session(id)
		f.creds["key-"+r.String()], _ = f.key(r, nil)
	}
	f.creds["other"] = f.session(f.account("other@example.com", api.RoleAdmin, []string{wsOther}))
	f.editorID = f.account("target-editor@example.com", api.RoleEditor, nil)
	f.viewerID = f.account("target-viewer@example.com", api.RoleViewer, nil)
	_, f.targetKey = f.key(api.RoleViewer, nil)
	// The first revision, written straight to the scheduler.
	rev, err := f.sched.PutFile(t.Context(), wsMain, "data/a.txt", strings.NewReader(aText), int64(len(aText)),
		client.WriteOptions{Author: api.Author{Kind: api.AuthorAccount, ID: "seed"}, Message: "seed"})
	if err != nil {
		t.Fatal(err)
	}
	f.rev = rev.ID
	f.put(kindSession, "sess-main", api.Session{ID: "sess-main", Workspace: wsMain, Title: "t", CreatedAt: now})
	f.setSecret(fixtureSecret, fixtureSecretValue)

	var op api.Operation
	f.do("key-editor", "POST", "/v1/runs", `{"workspace":"ws-main","session":"sess-main","steps":[{"args":["true"]},{"args":["false"]}]}`, 201, &op)
	f.run = op.ID
	f.sched.Start(op.Steps[0].ID)
	return f
}

func (f *fixture) put(kind, id string, v any) {
	f.t.Helper()
	if _, err := putRecord(f.t.Context(), f.store, kind, id, 0, v); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) account(email string, role api.Role, ws []string) string {
	now := time.Now().UTC().Truncate(time.Second)
	a := accountRecord{ID: accountID(email), Email: email, Role: role, Workspaces: ws, CreatedAt: now,
		Generation: "gen-" + email}
	f.put(kindPerson, a.ID, personRecord{ID: a.ID, Email: email, PasswordHash: testHash(), CreatedAt: now, Tenants: []string{f.tenant}})
	f.put(kindAccount, a.ID, a)
	return a.ID
}

func (f *fixture) session(account string) cred {
	f.t.Helper()
	tok := randomString(40)
	now := time.Now().UTC().Truncate(time.Second) // JSON of one length
	var a accountRecord
	if _, err := getRecord(f.t.Context(), f.store, kindAccount, account, &a); err != nil {
		f.t.Fatal(err)
	}
	f.put(kindSignin, digest(tok), signinRecord{Account: account, Tenant: f.tenant, Generation: a.Generation, CreatedAt: now, ExpiresAt: now.Add(time.Hour)})
	return cred{cookie: tok, csrf: csrfToken(tok), person: true}
}

func (f *fixture) key(role api.Role, ws []string) (cred, string) {
	id, secret := newID(prefixKey), randomString(52)
	f.put(kindKeyTenant, id, keyTenantRecord{Tenant: f.tenant})
	f.put(kindKey, id, keyRecord{ID: id, Name: "k", Role: role, Workspaces: ws, SecretHash: digest(secret), CreatedAt: time.Now().UTC()})
	return cred{bearer: keyPrefix + strings.TrimPrefix(id, prefixKey) + "_" + secret}, id
}

// boundStore is the records of one tenant, as the gateway's handlers see
// them in that tenant (through tenantStore), with the test store's counts
// and failure injection.
type boundStore struct {
	*testStore
	ts     *tenantStore
	tenant string
}

func bindTenant(raw *testStore, tenant string) *boundStore {
	return &boundStore{testStore: raw, ts: newTenantStore(raw), tenant: tenant}
}

func (b *boundStore) ctx(ctx context.Context) context.Context {
	if tenantFrom(ctx) != "" {
		return ctx
	}
	return withTenant(ctx, b.tenant)
}

func (b *boundStore) GetRecord(ctx context.Context, kind, id string) (api.Record, error) {
	return b.ts.GetRecord(b.ctx(ctx), kind, id)
}

func (b *boundStore) ListRecordsPage(ctx context.Context, kind, prefix string, limit int, cursor string) ([]api.Record, string, error) {
	return b.ts.ListRecordsPage(b.ctx(ctx), kind, prefix, limit, cursor)
}

func (b *boundStore) PutRecord(ctx context.Context, kind, id string, version uint64, value json.RawMessage) (api.Record, error) {
	return b.ts.PutRecord(b.ctx(ctx), kind, id, version, value)
}

func (b *boundStore) DeleteRecord(ctx context.Context, kind, id string, version uint64) error {
	return b.ts.DeleteRecord(b.ctx(ctx), kind, id, version)
}

// ListRecords lists every record of kind whose id starts with prefix.
func (b *boundStore) ListRecords(ctx context.Context, kind, prefix string) ([]api.Record, error) {
	var out []api.Record
	cursor := ""
	for {
		recs, next, err := b.ListRecordsPage(ctx, kind, prefix, storePage, cursor)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
		if next == "" {
			return out, nil
		}
		cursor = next
	}
}

// request builds a request with credential c (CSRF included for cookie
// writes).
func (f *fixture) request(c cred, method, path, body string) *http.Request {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, path, rd)
	r.RemoteAddr = "192.0.2.1:5555"
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	if c.cookie != "" {
		r.AddCookie(&http.Cookie{Name: cookieName, Value: c.cookie})
		if method != "GET" {
			r.Header.Set(csrfHeader, c.csrf)
		}
	}
	if c.bearer != "" {
		r.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	return r
}

func (f *fixture) serve(r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w
}

// do sends a request as credential name and checks the status; out (if
// not nil) receives the decoded answer.
func (f *fixture) do(name, method, path, body string, want int, out any) *httptest.ResponseRecorder {
	f.t.Helper()
	c, ok := f.creds[name]
	if !ok {
		f.t.Fatalf("no credential %q", name)
	}
	w := f.serve(f.request(c, method, path, body))
	if w.Code != want {
		f.t.Fatalf("%s %s as %s = %d %s, want %d", method, path, name, w.Code, w.Body, want)
	}
	if out != nil {
		if err := json.Unmarshal(w.Body.Bytes(), out); err != nil {
			f.t.Fatalf("%s %s: decode %s: %v", method, path, w.Body, err)
		}
	}
	return w
}

// errorCode returns the code of an error answer.
func errorCode(b *bytes.Buffer) string {
	var e struct {
		Error struct{ Code, Message string }
	}
	json.Unmarshal(b.Bytes(), &e)
	return e.Error.Code
}

// in returns ctx acting in the fixture's tenant, for calls of the
// gateway's methods that a route would make with it.
func (f *fixture) in(ctx context.Context) context.Context { return withTenant(ctx, f.tenant) }
