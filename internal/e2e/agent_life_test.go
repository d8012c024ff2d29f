package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// TestAgentReconstruct is issue 13's "Done means" 4 on the real stack: a
// run that writes with Write and Edit, a Bash step and an (ungated)
// ProposeChange and ApplyChange; its events, read page by page, are
// replayed into a fresh workspace through the public API (files by the
// files routes, links by a run's step, as the files API makes none), and
// the replay's tree is the run's last one, path by path, digest, mode and
// link target.
func TestAgentReconstruct(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	_, owner, ws := agentStack(t, "agent-replay", "original")
	owner.plant(ws, [2]string{"data/sales.csv", salesCSV}, [2]string{"keep.txt", "kept until the Bash step\n"})
	r := startAgent(t, owner, ws, "builder", []string{api.ToolRead, api.ToolWrite, api.ToolEdit, api.ToolBash, api.ToolProposeChange, api.ToolApplyChange})
	start := r.run()

	var made []string // the revisions the run made, in order
	write := func(p, content string) {
		var res api.WriteResult
		r.ok(api.ToolWrite, api.WriteInput{Path: p, Content: content}, &res)
		made = append(made, res.Revision)
	}
	write("a.txt", "one\ntwo\n")
	write("data/b.csv", "b,1\n")
	write("run.sh", "#!/bin/sh\necho hi\n")
	var edit api.EditResult
	r.ok(api.ToolEdit, api.EditInput{Path: "a.txt", OldString: "two", NewString: "three"}, &edit)
	made = append(made, edit.Revision)
	st, res := r.bash("cd /workspace && echo bash > bash.txt && chmod 755 run.sh && rm keep.txt && mkdir -p deep/er && echo x > deep/er/f.txt && sed -i s/one/uno/ a.txt && ln -s a.txt link-to-a && ln -s ../../data deep/er/data")
	if st.State != "exited" || st.ExitCode == nil || *st.ExitCode != 0 || st.Revision == "" {
		t.Fatalf("the Bash step %+v (answer %+v), want exited 0 with a revision", st, res)
	}
	made = append(made, st.Revision)
	// The Driver records a Bash step's revision when it settles the step.
	waitFor(t, time.Minute, "the Bash step's revision event", func() bool {
		for _, e := range r.events(owner) {
			if e.Kind == api.RunEventRevision && e.Revision == st.Revision {
				return true
			}
		}
		return false
	})
	// Two proposals, each applied: two files, then a deletion with a new
	// file (one revision).
	for _, files := range [][]api.ProposedFile{
		{{Path: "proposed.txt", Content: "proposed\n"}, {Path: "bash.txt", Content: "changed by the proposal\n"}},
		{{Path: "data/b.csv", Delete: true}, {Path: "data/c.csv", Content: "c\n1\n"}},
	} {
		before := owner.head(ws).ID
		var prop api.ProposeChangeResult
		r.ok(api.ToolProposeChange, api.ProposeChangeInput{Message: "tidy", Files: files}, &prop)
		if h := owner.head(ws); h.ID != before {
			t.Errorf("head %s after ProposeChange, want %s: a proposal changes nothing", h.ID, before)
		}
		var apply api.ApplyChangeResult
		r.ok(api.ToolApplyChange, api.ApplyChangeInput{Proposal: prop.Proposal}, &apply)
		made = append(made, apply.Revision)
	}
	write("final.txt", "the end\n")
	end := r.finish()
	if end.State != api.RunSucceeded {
		t.Errorf("finished run %s, want %s", end.State, api.RunSucceeded)
	}
	head := owner.head(ws)
	if head.ID != made[len(made)-1] {
		t.Fatalf("head %s, want the run's last revision %s", head.ID, made[len(made)-1])
	}

	events := r.events(owner)
	var revs []api.RunEvent
	kinds := map[string]int{}
	for _, e := range events {
		kinds[e.Kind]++
		if e.Kind == api.RunEventRevision {
			revs = append(revs, e)
		}
	}
	for kind, n := range map[string]int{api.RunEventCreated: 1, api.RunEventToolCall: 7, api.RunEventScript: 1, api.RunEventProposal: 2, api.RunEventEnded: 1} {
		if kinds[kind] < n {
			t.Errorf("events hold %d of kind %s, want at least %d (kinds %v)", kinds[kind], kind, n, kinds)
		}
	}
	// A revision of many changes is in several events in a row.
	var got []string
	for _, e := range revs {
		if len(got) > 0 && got[len(got)-1] == e.Revision {
			continue
		}
		parent := start.Agent.Revision
		if len(got) > 0 {
			parent = got[len(got)-1]
		}
		if e.Parent != parent || len(e.Changes) == 0 {
			t.Errorf("revision event %d %+v, want a change of %s", e.Seq, e, parent)
		}
		got = append(got, e.Revision)
	}
	if !slices.Equal(got, made) {
		t.Fatalf("revision events %v, want the run's revisions %v", got, made)
	}

	// The replay: the run's first tree, then each revision event's
	// changes, the contents read by revision from the original.
	var fresh struct {
		ID string `json:"id"`
	}
	owner.must(http.StatusCreated, http.MethodPost, "/v1/workspaces", map[string]string{"name": "replay"}, &fresh)
	for _, e := range owner.tree(ws, start.Agent.Revision) {
		if e.Type == "file" {
			copyFile(t, owner, ws, start.Agent.Revision, fresh.ID, api.EventChange{Path: e.Path, Type: e.Type, SHA256: e.SHA256, Size: e.Size, Mode: e.Mode})
		}
	}
	for _, e := range revs {
		// The files API makes no symlink: a run's step in the replay
		// makes an event's links (ln -s, nothing else).
		var links []string
		for _, ch := range e.Changes {
			switch {
			case ch.Deleted:
				owner.must(http.StatusOK, http.MethodDelete, "/v1/workspaces/"+fresh.ID+"/files/"+ch.Path, nil, nil)
			case ch.Type == "symlink":
				links = append(links, "mkdir -p \"$(dirname '"+ch.Path+"')\" && ln -sfn '"+ch.Target+"' '"+ch.Path+"'")
			default:
				copyFile(t, owner, ws, e.Revision, fresh.ID, ch)
			}
		}
		if len(links) > 0 {
			op := owner.startRun(fresh.ID, map[string]any{"image": "base", "cpu": 0.5, "memory": "128Mi",
				"args": []string{"sh", "-c", "cd /workspace && " + strings.Join(links, " && ")}})
			if done := owner.waitRun(op.ID, 2*time.Minute); done.State != api.RunSucceeded {
				t.Fatalf("the replay's symlink step %+v, want succeeded", done)
			}
		}
	}
	want, replayed := owner.tree(ws, ""), owner.tree(fresh.ID, "")
	links := map[string]string{}
	for _, e := range want {
		if e.Type == "symlink" {
			links[e.Path] = e.Target
		}
	}
	if w := map[string]string{"link-to-a": "a.txt", "deep/er/data": "../../data"}; !reflect.DeepEqual(links, w) {
		t.Errorf("the run's last tree has links %v, want the Bash step's %v", links, w)
	}
	if !slices.EqualFunc(want, replayed, sameEntry) {
		t.Errorf("replayed tree:\n%s\nwant the run's last tree:\n%s", treeText(replayed), treeText(want))
	}
	if h := owner.head(fresh.ID); h.Manifest != head.Manifest {
		t.Errorf("replayed manifest %s, want %s", h.Manifest, head.Manifest)
	}
}

// copyFile reads ch.Path of workspace from at rev and writes it to
// workspace to with its mode, checking its digest is the change's.
func copyFile(t *testing.T, c *gwClient, from, rev, to string, ch api.EventChange) {
	t.Helper()
	code, b, _ := c.getFile(from, ch.Path, rev)
	sum := sha256.Sum256(b)
	if code != http.StatusOK || hex.EncodeToString(sum[:]) != ch.SHA256 || int64(len(b)) != ch.Size {
		t.Fatalf("GET %s at %s = %d, %d bytes of digest %x; want %d bytes of digest %s", ch.Path, rev, code, len(b), sum, ch.Size, ch.SHA256)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, c.g.site+"/v1/workspaces/"+to+"/files/"+ch.Path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("X-Rodon-Mode", strconv.FormatUint(uint64(ch.Mode&0o777), 8))
	c.auth(req)
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT %s (mode %o) into the replay = %d", ch.Path, ch.Mode, resp.StatusCode)
	}
}

func sameEntry(a, b api.TreeEntry) bool {
	return a.Path == b.Path && a.Type == b.Type && a.SHA256 == b.SHA256 && a.Mode == b.Mode && a.Size == b.Size && a.Target == b.Target
}

func treeText(es []api.TreeEntry) string {
	var b strings.Builder
	for _, e := range es {
		b.WriteString("  " + e.Type + " " + e.Path + " " + strconv.FormatUint(uint64(e.Mode), 8) + " " + e.SHA256 + e.Target + "\n")
	}
	return b.String()
}

// routeRE finds a route in docs/GATEWAY.md's table: its method, path and
// least role.
var routeRE = regexp.MustCompile("(?m)^\\| `(GET|POST|PUT|PATCH|DELETE) (/v1/[^`? ]*)[^`]*` \\| ([^|]*)\\|")

// agentRoutes are the agent-run routes (docs/design/agents.md, §3).
var agentRoutes = [][2]string{
	{"POST", "/v1/runs/{id}/steps"}, {"GET", "/v1/runs/{id}/events"}, {"POST", "/v1/runs/{id}/finish"},
	{"GET", "/v1/runs/{id}/proposals/{proposal}"}, {"POST", "/v1/runs/{id}/approve"}, {"POST", "/v1/runs/{id}/reject"},
}

// grantRoutes are the routes that take the grant of the run in their
// path (and no other credential's role check admits a grant).
var grantRoutes = []string{"GET /v1/runs/{id}", "POST /v1/runs/{id}/steps", "GET /v1/runs/{id}/events", "POST /v1/runs/{id}/finish", "GET /v1/runs/{id}/proposals/{proposal}"}

// TestAgentGrantLife is issue 13's "Done means" 5 on the real stack: a
// grant of run A is refused on run B's routes and on every other route
// of the gateway's public list; a tampered grant is refused; a grant is
// refused once its run is finished or cancelled; a grant expires with its agent's
// limits.run, and the Driver fails that run, cancelling its Bash step.
func TestAgentGrantLife(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	_, owner, ws := agentStack(t, "agent-life", "life")
	owner.plant(ws, [2]string{"data/sales.csv", salesCSV})
	a := startAgent(t, owner, ws, "life", []string{api.ToolRead, api.ToolBash})
	b := owner.newRun(ws, "life")
	a.ok(api.ToolRead, api.ReadInput{Path: "data/sales.csv"}, nil)
	stepA := a.lastStep().ID
	var me struct {
		Account gwAccount `json:"account"`
	}
	owner.must(http.StatusOK, http.MethodGet, "/v1/me", nil, &me)
	var key struct {
		Key struct {
			ID string `json:"id"`
		} `json:"key"`
	}
	owner.must(http.StatusCreated, http.MethodPost, "/v1/keys", map[string]any{"name": "bystander", "role": "viewer"}, &key)
	head := owner.head(ws)

	doc, err := os.ReadFile("../../docs/GATEWAY.md")
	if err != nil {
		t.Fatal(err)
	}
	routes := slices.Clone(agentRoutes)
	for _, m := range routeRE.FindAllStringSubmatch(string(doc), -1) {
		if strings.TrimSpace(m[3]) == "none" {
			continue // sign-in, the presigned blob URLs: no credential is looked at
		}
		if rt := [2]string{m[1], m[2]}; !slices.Contains(routes, rt) {
			routes = append(routes, rt)
		}
	}
	if len(routes) < 30 {
		t.Fatalf("found %d routes in docs/GATEWAY.md, want its whole table", len(routes))
	}
	fill := strings.NewReplacer("{path...}", "data/sales.csv", "{rev}", head.ID, "{proposal}", "prop-none", "{sha256}", strings.Repeat("0", 64))
	tried := 0
	for _, rt := range routes {
		var paths []string
		switch p := rt[1]; {
		case strings.HasPrefix(p, "/v1/runs/{id}"):
			// Run B's routes, and those of run A that take no grant.
			paths = append(paths, strings.Replace(p, "{id}", b.id, 1))
			if !slices.Contains(grantRoutes, rt[0]+" "+p) {
				paths = append(paths, strings.Replace(p, "{id}", a.id, 1))
			}
		case strings.HasPrefix(p, "/v1/steps/{id}"):
			paths = append(paths, strings.Replace(p, "{id}", stepA, 1))
		case strings.HasPrefix(p, "/v1/workspaces/{id}"):
			paths = append(paths, strings.Replace(p, "{id}", ws, 1))
		case strings.HasPrefix(p, "/v1/members/{id}"):
			paths = append(paths, strings.Replace(p, "{id}", me.Account.ID, 1))
		case strings.HasPrefix(p, "/v1/keys/{id}"):
			paths = append(paths, strings.Replace(p, "{id}", key.Key.ID, 1))
		default:
			paths = append(paths, p)
		}
		for _, p := range paths {
			var body any
			if rt[0] != http.MethodGet {
				body = map[string]any{}
			}
			if rt[0] == http.MethodPost && strings.HasSuffix(p, "/steps") {
				body = api.ToolCall{Tool: api.ToolRead, Input: mustJSON(t, api.ReadInput{Path: "data/sales.csv"})}
			}
			code, ans := a.grant.do(rt[0], fill.Replace(p), body, nil)
			tried++
			if code != http.StatusForbidden {
				t.Errorf("%s %s with run %s's grant = %d %.200s, want 403", rt[0], fill.Replace(p), a.id, code, ans)
			}
		}
	}
	t.Logf("run %s's grant refused on %d routes", a.id, tried)
	if op := b.run(); len(op.Steps) != 0 || op.State != api.RunRunning {
		t.Errorf("run B after A's grant tried it: %d steps, %s; want none, running", len(op.Steps), op.State)
	}
	if h := owner.head(ws); h.ID != head.ID {
		t.Errorf("head %s after the grant tried every route, want %s", h.ID, head.ID)
	}

	// Tampered grants: 401, and nothing done.
	tok := strings.TrimPrefix(a.token, "rg_")
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("grant %s...: %d parts, want a compact JWS of 3", short(a.token), len(parts))
	}
	partsB := strings.Split(strings.TrimPrefix(b.token, "rg_"), ".")
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`))
	steps := len(a.run().Steps)
	for what, bad := range map[string]string{
		"a byte of the payload flipped":       "rg_" + parts[0] + "." + flip(parts[1]) + "." + parts[2],
		"a byte of the signature flipped":     "rg_" + parts[0] + "." + parts[1] + "." + flip(parts[2]),
		"the payload and signature flipped":   "rg_" + parts[0] + "." + flip(parts[1]) + "." + flip(parts[2]),
		"run B's payload with A's signature":  "rg_" + parts[0] + "." + partsB[1] + "." + parts[2],
		"alg none, no signature":              "rg_" + none + "." + parts[1] + ".",
		"no signature":                        "rg_" + parts[0] + "." + parts[1] + ".",
		"without its prefix":                  tok,
		"cut short":                           a.token[:len(a.token)-8],
		"with an API key's prefix":            "rk_" + tok,
		"the header of another kind of token": "rg_" + base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256"}`)) + "." + parts[1] + "." + parts[2],
	} {
		c := owner.withKey(bad)
		if code, ans := c.do(http.MethodGet, "/v1/runs/"+a.id, nil, nil); code != http.StatusUnauthorized {
			t.Errorf("GET the run with a grant %s = %d %.200s, want 401", what, code, ans)
		}
		if code, ans := c.do(http.MethodPost, "/v1/runs/"+a.id+"/steps", api.ToolCall{Tool: api.ToolRead, Input: mustJSON(t, api.ReadInput{Path: "data/sales.csv"})}, nil); code != http.StatusUnauthorized {
			t.Errorf("a tool call with a grant %s = %d %.200s, want 401", what, code, ans)
		}
	}
	if got := len(a.run().Steps); got != steps {
		t.Errorf("run A has %d steps after the tampered grants, want %d", got, steps)
	}
	a.ok(api.ToolRead, api.ReadInput{Path: "data/sales.csv"}, nil) // the real one still works

	// A grant dies with its run.
	if op := b.finish(); op.State != api.RunSucceeded {
		t.Errorf("finished run B %s, want %s", op.State, api.RunSucceeded)
	}
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{http.MethodGet, "/v1/runs/" + b.id, nil},
		{http.MethodGet, "/v1/runs/" + b.id + "/events", nil},
		{http.MethodPost, "/v1/runs/" + b.id + "/steps", api.ToolCall{Tool: api.ToolRead, Input: mustJSON(t, api.ReadInput{Path: "data/sales.csv"})}},
		{http.MethodPost, "/v1/runs/" + b.id + "/finish", api.FinishRequest{}},
	} {
		if code, ans := b.grant.do(c.method, c.path, c.body, nil); code != http.StatusUnauthorized && code != http.StatusForbidden {
			t.Errorf("%s %s with the grant of the finished run = %d %.200s, want 401 or 403", c.method, c.path, code, ans)
		}
	}
	if op := b.run(); len(op.Steps) != 0 || op.State != api.RunSucceeded {
		t.Errorf("run B after its grant was used once finished: %d steps, %s", len(op.Steps), op.State)
	}

	// And when a person cancels the run.
	d := owner.newRun(ws, "life")
	d.ok(api.ToolRead, api.ReadInput{Path: "data/sales.csv"}, nil)
	owner.must(http.StatusOK, http.MethodPost, "/v1/runs/"+d.id+"/cancel", map[string]any{}, nil)
	waitFor(t, time.Minute, "run "+d.id+" cancelled", func() bool { return d.run().State == api.RunCancelled })
	if code, ans := d.call(api.ToolRead, api.ReadInput{Path: "data/sales.csv"}); code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Errorf("a tool call with the grant of a cancelled run = %d %.200s, want 401 or 403", code, ans)
	}

	// A grant expires with limits.run; the Driver fails the run and
	// cancels its Bash step.
	c := startAgent(t, owner, ws, "brief", []string{api.ToolRead, api.ToolBash}, "limits: {run: 5s}")
	op := c.run()
	if op.Agent.Limits.Run != api.Duration(5*time.Second) || op.Agent.GrantExpires.Sub(op.CreatedAt) > 6*time.Second {
		t.Errorf("run of brief: limits %+v, grant expires %v (created %v), want 5s", op.Agent.Limits, op.Agent.GrantExpires, op.CreatedAt)
	}
	c.ok(api.ToolRead, api.ReadInput{Path: "data/sales.csv"}, nil)
	code, ans := c.call(api.ToolBash, api.BashInput{Command: "sleep 300"})
	if code != http.StatusOK {
		t.Fatalf("Bash sleep 300 = %d %s, want 200 at once", code, ans)
	}
	bash := c.lastStep().ID
	waitFor(t, 2*time.Minute, "the Driver to fail run "+c.id+" when its time ran out", func() bool {
		op = c.run()
		return op.State != api.RunRunning
	})
	if op.State != api.RunFailed || !strings.Contains(strings.Join(op.Errors, "; "), "ran out") {
		t.Errorf("run after its grant expired: %s %q, want failed: its time ran out", op.State, op.Errors)
	}
	if code, ans := c.grant.do(http.MethodGet, "/v1/runs/"+c.id, nil, nil); code != http.StatusUnauthorized {
		t.Errorf("GET the run with its expired grant = %d %.200s, want 401", code, ans)
	}
	if code, ans := c.call(api.ToolRead, api.ReadInput{Path: "data/sales.csv"}); code != http.StatusUnauthorized {
		t.Errorf("a tool call with an expired grant = %d %.200s, want 401", code, ans)
	}
	var st api.RunStep
	waitFor(t, 2*time.Minute, "the Bash step of the expired run to end", func() bool {
		for _, s := range c.run().Steps {
			if s.ID == bash {
				st = s
			}
		}
		return isTerminal(st.State)
	})
	if st.State != "cancelled" {
		t.Errorf("the Bash step of the expired run ended %s (%s), want cancelled", st.State, st.Reason)
	}
	ended := false
	for _, e := range c.events(owner) {
		ended = ended || e.Kind == api.RunEventEnded && e.State == api.RunFailed
	}
	if !ended {
		t.Errorf("run %s's events hold no run_ended event of state failed", c.id)
	}
}

// flip changes one character in the middle of a base64url string to
// another, so that its bytes change.
func flip(s string) string {
	if s == "" {
		return "A"
	}
	i := len(s) / 2
	c := byte('A')
	if s[i] == 'A' {
		c = 'B'
	}
	return s[:i] + string(c) + s[i+1:]
}
