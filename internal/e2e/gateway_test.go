package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/internal/testenv"
)

// TestGatewayRun runs a two-step run through `gateway serve` against a
// real scheduler and agent: the second step reads the file the first wrote
// into /workspace. Every answer the test receives, websocket frames
// included, is scanned for provider identifiers. API keys, the audit log
// and a second, stateless gateway are checked on the same fleet.
func TestGatewayRun(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	f := &fleet{}
	startSchedulers(t, f, 1)
	agent := startNamedAgent(t, f, "provider-node-q7x3")
	const ownerEmail = "owner@example.com"
	g := startGateway(t, f, ownerEmail)
	password := g.ownerPassword(t, ownerEmail)

	rec := &recorder{}
	owner := newGWClient(t, g, rec)
	owner.must(http.StatusUnauthorized, http.MethodPost, "/v1/auth/signin", map[string]string{"email": ownerEmail, "password": "not-the-password"}, nil)
	ownerAcct := owner.signIn(ownerEmail, password)
	if ownerAcct.Role != "owner" {
		t.Fatalf("signed-in account %+v, want the owner", ownerAcct)
	}
	// A write without the CSRF header is refused.
	csrf := owner.csrf
	owner.csrf = ""
	owner.must(http.StatusForbidden, http.MethodPost, "/v1/workspaces", map[string]string{"name": "no-csrf"}, nil)
	owner.csrf = csrf

	var ws struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	}
	owner.must(http.StatusCreated, http.MethodPost, "/v1/workspaces", map[string]string{"name": "analysis"}, &ws)

	// The run: step 0 writes a file into the workspace, step 1 reads it.
	op := owner.startRun(ws.ID,
		map[string]any{"image": "base", "args": []string{"sh", "-c", "echo 'written by step one' > /workspace/note.txt && echo step one wrote the note"},
			"cpu": 0.5, "memory": "256Mi"},
		map[string]any{"image": "python", "args": []string{"python3", "-c", "print('step two read:', open('/workspace/note.txt').read().strip())"},
			"cpu": 0.5, "memory": "256Mi"},
	)
	if len(op.Steps) != 2 || op.State != "running" {
		t.Fatalf("new run %+v, want 2 steps, running", op)
	}
	// Follow step 0's stream to its exit frame.
	frames := owner.openStream(op.Steps[0].ID, 0).untilExit()
	if got := string(stdout(t, frames, 1)); got != "step one wrote the note\n" {
		t.Errorf("step 0 stdout = %q, want %q", got, "step one wrote the note\n")
	}
	x, err := frames[len(frames)-1].Exit()
	if err != nil || x.ExitCode == nil || *x.ExitCode != 0 {
		t.Errorf("step 0 exit frame %+v (%v), want exit code 0", x, err)
	}
	done := owner.waitRun(op.ID, 3*time.Minute)
	if done.State != "succeeded" || len(done.Steps) != 2 {
		t.Fatalf("run %+v, want succeeded with 2 steps", done)
	}
	for _, s := range done.Steps {
		if s.State != "exited" || s.ExitCode == nil || *s.ExitCode != 0 || s.Node != "" {
			t.Errorf("step %+v, want exited 0 without a node", s)
		}
	}
	frames1 := owner.openStream(op.Steps[1].ID, 0).untilExit()
	if got, want := string(stdout(t, frames1, 1)), "step two read: written by step one\n"; got != want {
		t.Errorf("step 1 stdout = %q, want %q", got, want)
	}

	// A step that cannot start: its reason, events and exit frame are
	// scanned with the rest.
	bad := owner.startRun(ws.ID, map[string]any{"args": []string{"/no/such/program", "--flag"}, "cpu": 0.5, "memory": "64Mi"})
	badFrames := owner.openStream(bad.Steps[0].ID, 0).untilExit()
	badDone := owner.waitRun(bad.ID, 2*time.Minute)
	if badDone.State != "failed" || len(badDone.Errors) == 0 {
		t.Errorf("run of a missing program %+v, want failed with an error", badDone)
	}
	t.Logf("missing program: run errors %q, exit frame %s", badDone.Errors, badFrames[len(badFrames)-1].Data)

	// API keys: the owner adds an admin, who creates an editor and a viewer
	// key; the editor key starts a run, the viewer key may not.
	var admin gwAccount
	owner.must(http.StatusCreated, http.MethodPost, "/v1/members",
		map[string]any{"email": "admin@example.com", "password": "admin-password-0123", "role": "admin"}, &admin)
	adminC := newGWClient(t, g, rec)
	adminC.signIn("admin@example.com", "admin-password-0123")
	type newKey struct {
		Key struct {
			ID   string `json:"id"`
			Role string `json:"role"`
		} `json:"key"`
		Secret string `json:"secret"`
	}
	var editorKey, viewerKey newKey
	adminC.must(http.StatusCreated, http.MethodPost, "/v1/keys", map[string]any{"name": "ci", "role": "editor"}, &editorKey)
	adminC.must(http.StatusCreated, http.MethodPost, "/v1/keys", map[string]any{"name": "dashboard", "role": "viewer"}, &viewerKey)
	if !strings.HasPrefix(editorKey.Secret, "rk_") || editorKey.Key.Role != "editor" {
		t.Fatalf("editor key %+v, want an rk_ secret and the editor role", editorKey)
	}
	editor := owner.withKey(editorKey.Secret)
	keyRun := editor.startRun(ws.ID, map[string]any{"args": []string{"cat", "/workspace/note.txt"}, "cpu": 0.5, "memory": "128Mi"})
	if keyRun.CreatedBy.Kind != "key" || keyRun.CreatedBy.ID != editorKey.Key.ID {
		t.Errorf("run created by %+v, want key %s", keyRun.CreatedBy, editorKey.Key.ID)
	}
	keyFrames := editor.openStream(keyRun.Steps[0].ID, 0).untilExit()
	if got := string(stdout(t, keyFrames, 1)); got != "written by step one\n" {
		t.Errorf("key run stdout = %q, want the note", got)
	}
	if keyDone := editor.waitRun(keyRun.ID, 2*time.Minute); keyDone.State != "succeeded" {
		t.Errorf("key run %+v, want succeeded", keyDone)
	}
	viewer := owner.withKey(viewerKey.Secret)
	viewer.must(http.StatusForbidden, http.MethodPost, "/v1/runs",
		map[string]any{"workspace": ws.ID, "steps": []map[string]any{{"args": []string{"true"}}}}, nil)
	viewer.must(http.StatusOK, http.MethodGet, "/v1/runs/"+keyRun.ID, nil, nil)

	// The audit log has every write of this test.
	entries, auditRaw := owner.audit()
	for _, e := range entries {
		t.Logf("audit %d: %s %s by %s (%s, %+v) -> %s from %s", e.Seq, e.Action, e.Target, e.Who, e.Role, e.Credential, e.Result, e.Client)
	}
	type want struct {
		action, target, who, role, credKind, result string
	}
	wants := []want{
		{"auth.signin", ownerEmail, ownerAcct.ID, "owner", "password", "unauthorized"},
		{"auth.signin", ownerEmail, ownerAcct.ID, "owner", "session", "ok"},
		{"workspace.create", "", ownerAcct.ID, "owner", "session", "forbidden"}, // no CSRF header
		{"workspace.create", ws.ID, ownerAcct.ID, "owner", "session", "ok"},
		{"run.create", op.ID, ownerAcct.ID, "owner", "session", "ok"},
		{"run.create", bad.ID, ownerAcct.ID, "owner", "session", "ok"},
		{"member.create", admin.ID, ownerAcct.ID, "owner", "session", "ok"},
		{"auth.signin", "admin@example.com", admin.ID, "admin", "session", "ok"},
		{"key.create", editorKey.Key.ID, admin.ID, "admin", "session", "ok"},
		{"key.create", viewerKey.Key.ID, admin.ID, "admin", "session", "ok"},
		{"run.create", keyRun.ID, editorKey.Key.ID, "editor", "key", "ok"},
		{"run.create", "", viewerKey.Key.ID, "viewer", "key", "forbidden"},
	}
	// A successful sign-in is recorded with the session it opened: the
	// writes made with that session name the same credential id.
	next := 0
	var sessionOf = map[string]string{}
	for _, w := range wants {
		found := false
		for i := next; i < len(entries); i++ {
			e := entries[i]
			if e.Action != w.action || (w.target != "" && e.Target != w.target) || e.Who != w.who || e.Role != w.role ||
				e.Credential == nil || e.Credential.Kind != w.credKind || e.Result != w.result || e.Client != "127.0.0.1" {
				continue
			}
			switch {
			case w.credKind == "key" && e.Credential.ID != w.who:
				continue
			case w.credKind == "session" && e.Action == "auth.signin":
				sessionOf[w.who] = e.Credential.ID
			case w.credKind == "session" && (e.Credential.ID == "" || e.Credential.ID != sessionOf[w.who]):
				continue
			}
			found, next = true, i+1
			break
		}
		if !found {
			t.Errorf("no audit entry %+v after entry %d", w, next)
		}
	}
	// No route changes or deletes an entry.
	for _, m := range []string{http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodPost} {
		for _, p := range []string{"/v1/audit", "/v1/audit/1"} {
			code, b := owner.do(m, p, map[string]string{"entry": "forged"}, nil)
			if code/100 == 2 || (code != http.StatusMethodNotAllowed && code != http.StatusNotFound) {
				t.Errorf("%s %s = %d %s, want 405 or 404", m, p, code, b)
			}
		}
	}
	if _, again := owner.audit(); !bytes.Equal(again, auditRaw) {
		t.Errorf("audit log changed after PUT/PATCH/DELETE:\nbefore %s\nafter  %s", auditRaw, again)
	}

	// A second gateway on the same scheduler serves the same runs, audit
	// log and sign-in session: the gateway keeps no state of its own.
	g2 := startGateway(t, f, "")
	owner2 := newGWClient(t, g2, rec)
	ck := owner.sessionCookie()
	owner2.jar.SetCookies(mustURL(t, g2.site), []*http.Cookie{{Name: ck.Name, Value: ck.Value, Path: "/"}})
	owner2.csrf = owner.csrf
	if _, raw2 := owner2.audit(); !bytes.Equal(raw2, auditRaw) {
		t.Errorf("second gateway's audit log differs:\n%s\nfirst gateway's:\n%s", raw2, auditRaw)
	}
	var list1, list2 []gwOperation
	editor.must(http.StatusOK, http.MethodGet, "/v1/runs", nil, &list1)
	editor2 := owner2.withKey(editorKey.Secret)
	editor2.must(http.StatusOK, http.MethodGet, "/v1/runs", nil, &list2)
	if sig(t, list1) != sig(t, list2) || len(list1) != 3 {
		t.Errorf("runs via the second gateway:\n%s\nvia the first:\n%s\nwant the same 3 runs", sig(t, list2), sig(t, list1))
	}
	var op2 gwOperation
	owner2.must(http.StatusOK, http.MethodGet, "/v1/runs/"+op.ID, nil, &op2)
	if sig(t, op2) != sig(t, done) {
		t.Errorf("run via the second gateway %s, via the first %s", sig(t, op2), sig(t, done))
	}
	frames2 := editor2.openStream(op.Steps[1].ID, 0).untilExit()
	if !bytes.Equal(stdout(t, frames2, 1), stdout(t, frames1, 1)) {
		t.Errorf("step 1 via the second gateway printed %q, via the first %q", stdout(t, frames2, 1), stdout(t, frames1, 1))
	}
	// The second gateway's write is audited in the same log.
	owner2.startRun(ws.ID, map[string]any{"args": []string{"true"}, "cpu": 0.5, "memory": "64Mi"})
	entries2, _ := owner.audit()
	if len(entries2) != len(entries)+1 || entries2[len(entries2)-1].Action != "run.create" {
		t.Errorf("audit after a run via the second gateway has %d entries (last %+v), want %d ending with run.create",
			len(entries2), entries2[len(entries2)-1], len(entries)+1)
	}
	owner.waitRun(entries2[len(entries2)-1].Target, 2*time.Minute)

	// Nothing any client received names the provider.
	scanProviderIDs(t, rec, agent)
	for _, p := range append(f.agents, f.schedulers...) {
		p.stop(30 * time.Second)
	}
}

// scanProviderIDs fails t for each provider identifier found in what rec
// recorded.
func scanProviderIDs(t *testing.T, rec *recorder, agent agentInfo) {
	t.Helper()
	all := rec.String()
	lower := strings.ToLower(all)
	needles := []string{agent.id, agent.listen, agent.dataDir, "runsc", "gvisor", "containerd", "shim", "/run/", "/var/lib/rodon"}
	if _, port, ok := strings.Cut(agent.listen, ":"); ok {
		needles = append(needles, "127.0.0.1:"+port, ":"+port+"/")
	}
	hits := 0
	for _, n := range needles {
		if i := strings.Index(lower, strings.ToLower(n)); i >= 0 {
			hits++
			t.Errorf("a gateway answer names the provider (%q): ...%s...", n, all[max(0, i-300):min(len(all), i+200)])
		}
	}
	// Sandbox ids are the step id with the attempt: s-<run>-<i>.<n>.
	if loc := regexp.MustCompile(`s-[a-z0-9]{6,}-[0-9]+\.[0-9]+`).FindStringIndex(all); loc != nil {
		hits++
		t.Errorf("a gateway answer names a sandbox id %q: ...%s...", all[loc[0]:loc[1]], all[max(0, loc[0]-300):min(len(all), loc[1]+200)])
	}
	t.Logf("scanned %d answers (%d bytes) for %d provider identifiers and sandbox ids: %d found", rec.n, len(all), len(needles), hits)
}

// sig is a comparable summary of runs: ids, states, steps and their exits.
func sig[T gwOperation | []gwOperation](t *testing.T, v T) string {
	t.Helper()
	var ops []gwOperation
	switch v := any(v).(type) {
	case gwOperation:
		ops = []gwOperation{v}
	case []gwOperation:
		ops = v
	}
	var b strings.Builder
	for _, op := range ops {
		fmt.Fprintf(&b, "%s %s %s by %s:", op.ID, op.Workspace, op.State, op.CreatedBy.ID)
		for _, s := range op.Steps {
			code := -1
			if s.ExitCode != nil {
				code = *s.ExitCode
			}
			fmt.Fprintf(&b, " %s=%s/%d", s.ID, s.State, code)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
