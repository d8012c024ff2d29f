package gateway

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/gateway/relay"
)

// signIn signs email in through the API and keeps the credential as name.
func (f *fixture) signIn(name, email, password string) {
	f.t.Helper()
	w := f.serve(f.signinReq(`{"email":"`+email+`","password":"`+password+`"}`, "application/json", "", ""))
	if w.Code != 200 {
		f.t.Fatalf("sign in %s = %d %s", email, w.Code, w.Body)
	}
	var out api.SignInAnswer
	json.Unmarshal(w.Body.Bytes(), &out)
	for _, ck := range w.Result().Cookies() {
		if ck.Name == cookieName {
			f.creds[name] = cred{cookie: ck.Value, csrf: out.CSRFToken, person: true}
			return
		}
	}
	f.t.Fatal("no session cookie")
}

// TestMemberDeletedAndReinvited is issue 15's "a member deleted and
// re-invited: their old cookie gets 401": a sign-in is bound to the
// member's generation, not to the email (whose account id is the same).
func TestMemberDeletedAndReinvited(t *testing.T) {
	f := newFixture(t)
	const email, pw = "mallory@example.com", "mallory's long password"
	var a api.Account
	f.do("owner", "POST", "/v1/members", `{"email":"`+email+`","password":"`+pw+`","role":"viewer"}`, 201, &a)
	f.signIn("mallory", email, pw)
	f.do("mallory", "GET", "/v1/me", "", 200, nil)
	// An open stream of theirs.
	f.do("mallory", "GET", "/v1/steps/"+stepID(f.run, 0)+"/stream", "", 200, nil)
	st := f.stream.stream()
	if err := st.Check(t.Context()); err != nil {
		t.Fatalf("stream check before the delete = %v", err)
	}

	f.do("owner", "DELETE", "/v1/members/"+a.ID, "", 204, nil)
	f.do("owner", "POST", "/v1/members", `{"email":"`+email+`","password":"another long password","role":"admin"}`, 201, nil)
	w := f.do("mallory", "GET", "/v1/me", "", 401, nil)
	if !strings.Contains(w.Body.String(), "changed or removed") {
		t.Errorf("old cookie = %s, want it to say the member changed", w.Body)
	}
	f.do("mallory", "GET", "/v1/members", "", 401, nil)
	var rv *relay.Revoked
	if err := st.Check(t.Context()); !errors.As(err, &rv) || rv.Code != api.CloseUnauthorized {
		t.Errorf("stream check after the delete = %v, want Revoked 4401", err)
	}
	// The stale sign-in record is gone; a new sign-in has the new role.
	f.signIn("mallory2", email, "another long password")
	var me api.Me
	f.do("mallory2", "GET", "/v1/me", "", 200, &me)
	if me.Role != api.RoleAdmin {
		t.Errorf("new sign-in role = %s, want admin", me.Role)
	}
}

// TestMemberChangeEndsSessions: changing a member's role or workspaces
// ends their sign-ins (they sign in again with what they may do now).
func TestMemberChangeEndsSessions(t *testing.T) {
	f := newFixture(t)
	f.signIn("target", "target-editor@example.com", testPassword)
	f.do("target", "GET", "/v1/me", "", 200, nil)
	f.do("target", "GET", "/v1/steps/"+stepID(f.run, 0)+"/stream", "", 200, nil)
	st := f.stream.stream()
	f.do("admin", "PATCH", "/v1/members/"+f.editorID, `{"workspaces":["ws-other"]}`, 200, nil)
	f.do("target", "GET", "/v1/me", "", 401, nil)
	var rv *relay.Revoked
	if err := st.Check(t.Context()); !errors.As(err, &rv) || rv.Code != api.CloseUnauthorized {
		t.Errorf("stream check after the change = %v, want Revoked 4401", err)
	}
	if v := f.metric("rodon_gateway_streams_revoked_total"); v != 1 {
		t.Errorf("streams revoked = %v, want 1", v)
	}
}

// TestStreamRecheckKey: a deleted key's open stream is refused at its
// next check; a key that still may read goes on.
func TestStreamRecheckKey(t *testing.T) {
	f := newFixture(t)
	c, id := f.key(api.RoleViewer, nil)
	f.creds["k"] = c
	f.do("k", "GET", "/v1/steps/"+stepID(f.run, 0)+"/stream", "", 200, nil)
	st := f.stream.stream()
	if err := st.Check(t.Context()); err != nil {
		t.Fatalf("check = %v, want nil", err)
	}
	f.do("admin", "DELETE", "/v1/keys/"+id, "", 204, nil)
	var rv *relay.Revoked
	if err := st.Check(t.Context()); !errors.As(err, &rv) || rv.Code != api.CloseUnauthorized {
		t.Errorf("check after the key's delete = %v, want Revoked 4401", err)
	}
	// A store that does not answer is not a refusal.
	f.do("viewer", "GET", "/v1/steps/"+stepID(f.run, 0)+"/stream", "", 200, nil)
	st = f.stream.stream()
	f.store.FailGets(1)
	if err := st.Check(t.Context()); err == nil || errors.As(err, &rv) {
		t.Errorf("check without a store = %v, want an error that is not a refusal", err)
	}
}

// TestTerminalInputAudited: an interactive stream is audited when it
// opens and when it closes, with its principal and the bytes it sent; a
// stream that takes no input is not.
func TestTerminalInputAudited(t *testing.T) {
	f := newFixture(t)
	var op api.Operation
	f.do("editor", "POST", "/v1/runs", `{"workspace":"ws-main","steps":[{"args":["/bin/bash"],"tty":true}]}`, 201, &op)
	f.sched.Start(op.Steps[0].ID)
	before := f.store.AuditLen()
	var ans map[string]any
	f.do("editor", "GET", "/v1/steps/"+op.Steps[0].ID+"/stream", "", 200, &ans)
	st := f.stream.stream()
	if ans["interactive"] != true || st.Opened == nil || st.Closed == nil {
		t.Fatalf("stream %v: want interactive with audit hooks", ans)
	}
	st.Opened()
	st.Closed(relay.Input{Bytes: 1234, Messages: 56, Resizes: 2, Open: 3 * time.Second})
	entries := f.store.AuditAll()[before:]
	if len(entries) != 2 {
		t.Fatalf("%d audit entries, want open and close", len(entries))
	}
	var open, closed api.AuditDocument
	json.Unmarshal(entries[0].Entry, &open)
	json.Unmarshal(entries[1].Entry, &closed)
	who := accountID("editor@example.com")
	if open.Action != "terminal.open" || open.Who != who || open.Target != op.Steps[0].ID {
		t.Errorf("open entry = %+v, want terminal.open by %s on %s", open, who, op.Steps[0].ID)
	}
	if closed.Action != "terminal.close" || closed.Who != who || closed.Input == nil ||
		*closed.Input != (api.TerminalInput{Bytes: 1234, Messages: 56, Resizes: 2, Seconds: 3}) {
		t.Errorf("close entry = %+v (input %+v), want terminal.close by %s with 1234 bytes in 56 messages", closed, closed.Input, who)
	}
	// A viewer's stream of the same step takes no input: no entry.
	f.do("viewer", "GET", "/v1/steps/"+op.Steps[0].ID+"/stream", "", 200, nil)
	if st := f.stream.stream(); st.Interactive || st.Opened != nil {
		t.Errorf("viewer's stream: interactive %v, hooks set %v; want neither", st.Interactive, st.Opened != nil)
	}
}
