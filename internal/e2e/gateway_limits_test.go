package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// Issue 15's attacks on the gateway, against the real stack: a sign-in
// flood, quotas, a member deleted and invited again.

// startGatewayWith is startGateway with extra flags of `gateway serve`.
func startGatewayWith(t *testing.T, f *fleet, ownerEmail string, extra ...string) *gatewayProc {
	t.Helper()
	addr := freePort(t)
	g := &gatewayProc{addr: addr, site: "http://" + addr, dataDir: t.TempDir()}
	args := append([]string{bin + "/gateway", "serve", "--scheduler", f.urls(), "--listen", addr,
		"--data-dir", g.dataDir, "--site", g.site, "--owner-email", ownerEmail, "--log-level", "info",
		"--name", "gateway", "--tls-dir", tlsArgs(t, pki.RoleGateway, "gateway")[1]}, append(gatewaySecretArgs(t), extra...)...)
	g.proc = start(t, "gateway "+addr, args...)
	waitFor(t, 30*time.Second, "gateway /healthz", func() bool {
		resp, err := http.Get(g.site + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return g
}

// stateSize is the size of the records and the audit log in the
// scheduler's replicated state (as its snapshot has them, in JSON), and
// the number of audit entries.
func stateSize(t *testing.T, f *fleet) (size int, audit int) {
	t.Helper()
	doc, err := newClient(t, f.urls()).Snapshot(t.Context())
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	var s struct {
		Records []json.RawMessage `json:"records"`
		Audit   []json.RawMessage `json:"audit"`
	}
	if err := json.Unmarshal(doc, &s); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	for _, r := range append(s.Records, s.Audit...) {
		size += len(r)
	}
	return size, len(s.Audit)
}

// TestGatewaySigninFlood: 10,000 anonymous sign-in requests (malformed,
// oversized, cross-site, not JSON, wrong passwords, unknown emails, most
// of them rate limited), from 50 client addresses, grow the replicated
// state by less than 64 KiB; a 60 KB email and a cross-site text/plain
// form post are refused before any record.
func TestGatewaySigninFlood(t *testing.T) {
	f := &fleet{}
	startSchedulers(t, f, 1)
	const ownerEmail = "owner@example.com"
	g := startGateway(t, f, ownerEmail)
	password := g.ownerPassword(t, ownerEmail)
	owner := newGWClient(t, g, &recorder{})
	owner.signIn(ownerEmail, password)

	// One 60 KB email, one cross-site text/plain form: nothing recorded.
	before, auditBefore := stateSize(t, f)
	for _, tc := range []struct {
		body, ctype, origin string
		want                int
	}{
		{`{"email":"` + strings.Repeat("x", 60<<10) + `@example.com","password":"whatever it is"}`, "application/json", "", 413},
		{`{"email":"owner@example.com","password":"` + password + `"}`, "text/plain", "http://evil.example", 403},
		{`{"email":"owner@example.com","password":"` + password + `"}`, "text/plain", "", 415},
	} {
		req, _ := http.NewRequest(http.MethodPost, g.site+"/v1/auth/signin", strings.NewReader(tc.body))
		req.Header.Set("Content-Type", tc.ctype)
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || len(resp.Cookies()) != 0 {
			t.Errorf("sign-in %.60s (%s, origin %q) = %d %s, want %d and no cookie", tc.body, tc.ctype, tc.origin, resp.StatusCode, b, tc.want)
		}
	}
	if after, auditAfter := stateSize(t, f); after != before || auditAfter != auditBefore {
		t.Errorf("refused sign-ins changed the state: %d -> %d bytes, %d -> %d audit entries", before, after, auditBefore, auditAfter)
	}

	kinds := []struct{ body, ctype, origin string }{
		{`{"email":`, "application/json", ""},
		{`{"email":"a@b.c","password":"x","remember":true}`, "application/json", ""},
		{`{"email":"` + strings.Repeat("y", 60<<10) + `@example.com","password":"x"}`, "application/json", ""},
		{`{"email":"nobody","password":"x"}`, "application/json", ""},
		{`{"email":"owner@example.com","password":"x"}`, "text/plain", "http://evil.example"},
		{`{"email":"owner@example.com","password":"x"}`, "application/json", "http://evil.example"},
		{`email=owner@example.com&password=x`, "application/x-www-form-urlencoded", ""},
		{`{"email":"owner@example.com","password":"wrong password!"}`, "application/json", ""},
		{`{"email":"nobody-%d@example.com","password":"whatever it is"}`, "application/json", ""},
		{`{"email":"nobody-%d@example.com","password":"` + strings.Repeat("p", 2000) + `"}`, "application/json", ""},
	}
	// 50 clients: loopback addresses 127.0.0.1-50, each its own limit.
	clients := make([]*http.Client, 50)
	for i := range clients {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(i+1))}, Timeout: 10 * time.Second}
		tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4}
		t.Cleanup(tr.CloseIdleConnections)
		clients[i] = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	before, auditBefore = stateSize(t, f)
	const n = 10000
	var mu sync.Mutex
	statuses := map[int]int{}
	work := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range 8 {
		wg.Go(func() {
			for i := range work {
				k := kinds[i%len(kinds)]
				body := k.body
				if strings.Contains(body, "%d") {
					body = fmt.Sprintf(body, i)
				}
				req, _ := http.NewRequest(http.MethodPost, g.site+"/v1/auth/signin", strings.NewReader(body))
				req.Header.Set("Content-Type", k.ctype)
				if k.origin != "" {
					req.Header.Set("Origin", k.origin)
				}
				resp, err := clients[i%len(clients)].Do(req)
				code := 0
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				mu.Lock()
				statuses[code]++
				mu.Unlock()
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	after, auditAfter := stateSize(t, f)
	t.Logf("%d anonymous sign-ins in %v: statuses %v; replicated state %d -> %d bytes (%+d), audit entries %d -> %d",
		n, time.Since(start).Round(time.Millisecond), statuses, before, after, after-before, auditBefore, auditAfter)
	if statuses[0] != 0 || statuses[http.StatusOK] != 0 {
		t.Errorf("statuses %v: want no failed request and no sign-in", statuses)
	}
	if after-before >= 64<<10 {
		t.Errorf("the replicated state grew by %d bytes, want less than 64 KiB", after-before)
	}
	// The metrics count what was refused.
	resp, err := http.Get(g.site + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range strings.Split(string(m), "\n") {
		if strings.HasPrefix(line, "rodon_gateway_signins_total") {
			t.Log(line)
		}
	}
	if !bytes.Contains(m, []byte(`rodon_gateway_signins_total{result="rate_limited"}`)) ||
		!bytes.Contains(m, []byte(`rodon_gateway_signins_total{result="too_large"}`)) {
		t.Errorf("metrics do not count the refused sign-ins")
	}
	// The owner signs in again once the email's budget, which the flood
	// used up, has a token again (one every 30 s), from another address;
	// refused attempts take no token.
	later := newGWClient(t, g, &recorder{})
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 200)}}
	later.http.Transport = &http.Transport{DialContext: d.DialContext}
	waitFor(t, 45*time.Second, "the owner's sign-in after the flood", func() bool {
		code, _ := later.do(http.MethodPost, "/v1/auth/signin", map[string]string{"email": ownerEmail, "password": password}, nil)
		if code != http.StatusOK {
			time.Sleep(2 * time.Second)
		}
		return code == http.StatusOK
	})
}

// TestGatewayQuotas: live runs per workspace and queued steps per
// principal answer 429 quota_exceeded with Retry-After, naming the quota;
// a run that ends frees its place. No node runs the steps: they stay
// queued.
func TestGatewayQuotas(t *testing.T) {
	f := &fleet{}
	startSchedulers(t, f, 1)
	const ownerEmail = "owner@example.com"
	g := startGatewayWith(t, f, ownerEmail, "--quota-live-runs-per-workspace", "3", "--quota-queued-steps-per-principal", "2")
	owner := newGWClient(t, g, &recorder{})
	me := owner.signIn(ownerEmail, g.ownerPassword(t, ownerEmail))
	var ws struct {
		ID string `json:"id"`
	}
	owner.must(http.StatusCreated, http.MethodPost, "/v1/workspaces", map[string]string{"name": "quota"}, &ws)
	step := map[string]any{"args": []string{"sleep", "600"}, "cpu": 0.5, "memory": "64Mi"}
	r1 := owner.startRun(ws.ID, step)
	owner.startRun(ws.ID, step)
	quota := func(c *gwClient, want string) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"workspace": ws.ID, "steps": []any{step}})
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, g.site+"/v1/runs", bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		if c.csrf != "" {
			req.Header.Set("X-CSRF-Token", c.csrf)
		}
		if c.bearer != "" {
			req.Header.Set("Authorization", "Bearer "+c.bearer)
		}
		resp, err := c.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e api.Error
		json.NewDecoder(resp.Body).Decode(&e)
		if resp.StatusCode != http.StatusTooManyRequests || e.Detail.Code != "quota_exceeded" || resp.Header.Get("Retry-After") == "" ||
			!strings.Contains(e.Detail.Message, want) {
			t.Fatalf("run over the quota = %d %+v (Retry-After %q), want 429 quota_exceeded naming %q", resp.StatusCode, e.Detail, resp.Header.Get("Retry-After"), want)
		}
		t.Logf("refused: %d %s (Retry-After %s)", resp.StatusCode, e.Detail.Message, resp.Header.Get("Retry-After"))
	}
	quota(owner, fmt.Sprintf("account %s has 2 queued steps, its quota", me.ID))

	var key struct {
		Key struct {
			ID string `json:"id"`
		} `json:"key"`
		Secret string `json:"secret"`
	}
	owner.must(http.StatusCreated, http.MethodPost, "/v1/keys", map[string]any{"name": "ci", "role": "editor"}, &key)
	ci := owner.withKey(key.Secret)
	ci.startRun(ws.ID, step)
	quota(ci, fmt.Sprintf("workspace %s has 3 live runs, its quota", ws.ID))

	// Cancel one: its place frees once the driver settled it.
	owner.must(http.StatusOK, http.MethodPost, "/v1/runs/"+r1.ID+"/cancel", nil, nil)
	owner.waitRun(r1.ID, 30*time.Second)
	waitFor(t, 30*time.Second, "a place in the workspace's quota", func() bool {
		code, _ := ci.do(http.MethodPost, "/v1/runs", map[string]any{"workspace": ws.ID, "steps": []any{step}}, nil)
		return code == http.StatusCreated
	})
}

// TestGatewayReinvitedMember: a member deleted and invited again with the
// same email gets 401 on the old cookie, and their open stream is closed
// within 30 s (the default --stream-recheck) with 4401; a normal step
// still runs afterwards.
func TestGatewayReinvitedMember(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	f := &fleet{}
	startSchedulers(t, f, 1)
	startNamedAgent(t, f, "reinvite-node-a1")
	g, owner, wsID := ownerWithWorkspace(t, f, "reinvite")
	const email, pw = "mallory@example.com", "mallory's long password"
	var m gwAccount
	owner.must(http.StatusCreated, http.MethodPost, "/v1/members", map[string]any{"email": email, "password": pw, "role": "viewer"}, &m)
	mallory := newGWClient(t, g, &recorder{})
	mallory.signIn(email, pw)

	op := owner.startRun(wsID, map[string]any{"image": "base", "cpu": 0.5, "memory": "64Mi",
		"args": []string{"sh", "-c", "i=0; while [ $i -lt 300 ]; do echo tick $i; i=$((i+1)); sleep 1; done"}})
	s := mallory.openStream(op.Steps[0].ID, 0)
	s.conn.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := s.next(); err != nil {
		t.Fatalf("first frame: %v", err)
	}

	owner.must(http.StatusNoContent, http.MethodDelete, "/v1/members/"+m.ID, nil, nil)
	revoked := time.Now()
	owner.must(http.StatusCreated, http.MethodPost, "/v1/members", map[string]any{"email": email, "password": "another long password", "role": "admin"}, nil)
	code, b := mallory.do(http.MethodGet, "/v1/me", nil, nil)
	if code != http.StatusUnauthorized {
		t.Errorf("old cookie after the member was deleted and invited again = %d %s, want 401", code, b)
	}
	if code, b := mallory.do(http.MethodGet, "/v1/members", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("old cookie on an admin route = %d %s, want 401", code, b)
	}

	// The stream goes on until the re-check, then closes with 4401.
	s.conn.SetReadDeadline(time.Now().Add(45 * time.Second))
	frames := 0
	var closeErr error
	for {
		if _, err := s.next(); err != nil {
			closeErr = err
			break
		}
		frames++
	}
	took := time.Since(revoked)
	t.Logf("stream closed %v after the delete, %d frames after it: %v", took.Round(time.Millisecond), frames, closeErr)
	var ce *websocket.CloseError
	if !asCloseError(closeErr, &ce) || ce.Code != 4401 {
		t.Errorf("stream ended with %v, want a close 4401", closeErr)
	}
	if took > 31*time.Second {
		t.Errorf("stream closed %v after the member was deleted, want within 30 s", took)
	}

	// A normal step still runs.
	owner.must(http.StatusOK, http.MethodPost, "/v1/runs/"+op.ID+"/cancel", nil, nil)
	owner.waitRun(op.ID, 2*time.Minute)
	normal := owner.startRun(wsID, map[string]any{"args": []string{"echo", "still fine"}, "cpu": 0.5, "memory": "64Mi"})
	if done := owner.waitRun(normal.ID, 2*time.Minute); done.State != "succeeded" {
		t.Errorf("a normal run afterwards: %+v, want succeeded", done)
	}
	for _, p := range append(f.agents, f.schedulers...) {
		p.stop(30 * time.Second)
	}
}

func asCloseError(err error, ce **websocket.CloseError) bool {
	e, ok := err.(*websocket.CloseError)
	if ok {
		*ce = e
	}
	return ok
}

// TestGatewayTerminalAudit: a shell's terminal input is audited once per
// stream, when it opens and when it closes, with the principal and the
// bytes it sent, not once per keystroke.
func TestGatewayTerminalAudit(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	f := &fleet{}
	startSchedulers(t, f, 1)
	startNamedAgent(t, f, "audit-node-a1")
	const ownerEmail = "owner@example.com"
	g := startGateway(t, f, ownerEmail)
	c := newGWClient(t, g, &recorder{})
	me := c.signIn(ownerEmail, g.ownerPassword(t, ownerEmail))
	var ws struct {
		ID string `json:"id"`
	}
	c.must(http.StatusCreated, http.MethodPost, "/v1/workspaces", map[string]string{"name": "shell"}, &ws)
	op := c.startRun(ws.ID, map[string]any{"image": "base", "cpu": 0.5, "memory": "128Mi", "tty": true,
		"args": []string{"/bin/bash", "--norc", "--noprofile"}})
	id := op.Steps[0].ID
	s := c.openStream(id, 0)
	// Type one character at a time: one message per keystroke.
	typed := "echo typed-one-key-at-a-time; exit 0\r"
	for _, r := range typed {
		if err := s.conn.WriteJSON(map[string]any{"type": "stdin", "data": string(r)}); err != nil {
			t.Fatal(err)
		}
	}
	s.conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
	for {
		fr, err := s.next()
		if err != nil || fr.Kind == api.KindExit {
			break
		}
	}
	s.conn.Close()
	c.waitRun(op.ID, time.Minute)

	var open, closed []auditDoc
	waitFor(t, 10*time.Second, "the terminal's audit entries", func() bool {
		entries, _ := c.audit()
		open, closed = nil, nil
		for _, e := range entries {
			switch {
			case e.Action == "terminal.open" && e.Target == id:
				open = append(open, e)
			case e.Action == "terminal.close" && e.Target == id:
				closed = append(closed, e)
			}
		}
		return len(closed) == 1
	})
	if len(open) != 1 || open[0].Who != me.ID {
		t.Errorf("terminal.open entries %+v, want one by %s", open, me.ID)
	}
	_, raw := c.audit()
	var entries []api.AuditEntry
	json.Unmarshal(raw, &entries)
	for _, e := range entries {
		var d struct {
			Action string `json:"action"`
			Input  *struct {
				Bytes    int64 `json:"bytes"`
				Messages int64 `json:"messages"`
			} `json:"input"`
		}
		json.Unmarshal(e.Entry, &d)
		if d.Action == "terminal.close" {
			t.Logf("terminal.close: %s", e.Entry)
			if d.Input == nil || d.Input.Bytes != int64(len(typed)) || d.Input.Messages != int64(len(typed)) {
				t.Errorf("terminal.close input %+v, want %d bytes in %d messages", d.Input, len(typed), len(typed))
			}
		}
	}
}
