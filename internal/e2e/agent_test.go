package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// salesCSV is the dataset the agent tests plant at data/sales.csv.
const salesCSV = "month,region,revenue\n2026-01-01,north,12306\n2026-01-01,south,8477\n"

// hostMarker is in the host's /etc/passwd and in no file the tests plant.
const hostMarker = "root:x:0:0"

// validInputs is an input each tool takes.
var validInputs = map[string]any{
	api.ToolRead:          api.ReadInput{Path: "data/sales.csv"},
	api.ToolGlob:          api.GlobInput{Pattern: "**/*.csv"},
	api.ToolGrep:          api.GrepInput{Pattern: "north"},
	api.ToolWrite:         api.WriteInput{Path: "notes.txt", Content: "written\n"},
	api.ToolEdit:          api.EditInput{Path: "data/sales.csv", OldString: "north", NewString: "NORTH"},
	api.ToolBash:          api.BashInput{Command: "echo smuggled > /workspace/bash.txt"},
	api.ToolProposeChange: api.ProposeChangeInput{Files: []api.ProposedFile{{Path: "notes.txt", Content: "proposed\n"}}},
	api.ToolApplyChange:   api.ApplyChangeInput{Proposal: "prop-0000"},
}

// TestAgentGrantMatrix is issue 13's "Done means" 1 on the real stack:
// for each tool, an agent whose file lacks it is refused that tool
// whatever the body says (403 refused, the step refused, counted, a
// refusal event), and nothing changes; a Bash step of an agent with no
// writing tool cannot change the workspace (its Bash step fails: the
// workspace is mounted read-only); an Edit, Write or ProposeChange of the
// agent's own file (to grant itself more) or of any file under agents/ is
// refused read_only, and a new run of the agent holds what it held.
func TestAgentGrantMatrix(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	_, owner, ws := agentStack(t, "agent-grants", "grants")
	owner.plant(ws, [2]string{"data/sales.csv", salesCSV})

	// One agent per tool, holding every tool but that one; all planted
	// before the calls so that the head must stay where it is.
	without := func(tool string) (string, []string) {
		return "no-" + strings.ToLower(tool), slices.DeleteFunc(slices.Clone(api.Tools), func(s string) bool { return s == tool })
	}
	for _, tool := range api.Tools {
		name, tools := without(tool)
		owner.plant(ws, [2]string{"agents/" + name + ".md", string(agentFile(name, tools))})
	}
	head := owner.head(ws)
	tree := owner.tree(ws, "")

	for _, tool := range api.Tools {
		name, tools := without(tool)
		r := owner.newRun(ws, name)
		if got := r.run().Agent.Tools; !slices.Equal(got, tools) {
			t.Errorf("run of %s holds tools %v, want %v", name, got, tools)
		}
		granted := tools[0]
		valid := string(mustJSON(t, validInputs[tool]))
		q := func(s string) string { return string(mustJSON(t, s)) }
		bodies := []struct {
			what, body string
			// anyReason: the body names two tools; whichever the gateway
			// takes, the call is refused.
			anyReason bool
		}{
			{what: "a valid input", body: `{"tool":` + q(tool) + `,"input":` + valid + `}`},
			{what: "no input", body: `{"tool":` + q(tool) + `}`},
			{what: "a null input", body: `{"tool":` + q(tool) + `,"input":null}`},
			{what: "an empty input", body: `{"tool":` + q(tool) + `,"input":{}}`},
			{what: "a string input", body: `{"tool":` + q(tool) + `,"input":"cat /etc/passwd"}`},
			{what: "an input with a grant of its own", body: `{"tool":` + q(tool) + `,"input":{"path":"x","tools":["` + tool + `"],"grant":"all"}}`},
			{what: "the name in lower case", body: `{"tool":` + q(strings.ToLower(tool)) + `,"input":` + valid + `}`},
			{what: "the name in upper case", body: `{"tool":` + q(strings.ToUpper(tool)) + `,"input":` + valid + `}`},
			{what: "the name padded", body: `{"tool":` + q(" "+tool+" ") + `,"input":` + valid + `}`},
			{what: "the name with a NUL", body: `{"tool":` + q(tool+"\x00") + `,"input":` + valid + `}`},
			{what: "the name escaped", body: `{"tool":"\u00` + strconv.FormatInt(int64(tool[0]), 16) + tool[1:] + `","input":` + valid + `}`},
			{what: "a full-width first letter", body: `{"tool":` + q(string(rune(0xFF21+int(tool[0]-'A')))+tool[1:]) + `,"input":` + valid + `}`},
			{what: "a granted tool, then this one", body: `{"tool":` + q(granted) + `,"input":` + valid + `,"tool":` + q(tool) + `}`, anyReason: true},
			{what: "a granted tool, then this one as Tool", body: `{"tool":` + q(granted) + `,"input":` + valid + `,"Tool":` + q(tool) + `}`, anyReason: true},
		}
		for _, c := range bodies {
			what := name + ": " + tool + " with " + c.what
			code, b := r.post([]byte(c.body), "")
			if bytes.Contains(b, []byte(hostMarker)) {
				t.Errorf("%s answered a host file: %.200s", what, b)
			}
			e := r.refused(what, code, b)
			if e.Code == "" {
				continue
			}
			st := r.lastStep()
			if st.State != api.StepRefused || st.Tool == nil || st.Tool.Refusal == nil {
				t.Errorf("%s: last step %+v, want it refused", what, st)
				continue
			}
			if !c.anyReason && st.Tool.Refusal.Reason != api.RefusedTool {
				t.Errorf("%s: refusal %+v, want reason %s", what, st.Tool.Refusal, api.RefusedTool)
			}
		}
		events := r.checkRefusals()
		for _, e := range events {
			if e.Refusal == nil || e.Refusal.Reason == "" || e.Step == "" || e.Refusal.Message == "" {
				t.Errorf("%s: refusal event %+v, want its step, reason and message", name, e)
			}
		}
	}
	if got := owner.head(ws); got.ID != head.ID {
		t.Fatalf("head %s (%+v) after the refused calls, want %s: a refused call changed the workspace", got.ID, got.Changes, head.ID)
	}
	if got := owner.tree(ws, ""); !reflect.DeepEqual(got, tree) {
		t.Errorf("tree after the refused calls %+v, want %+v", got, tree)
	}

	// Bash without a writing tool: the workspace is mounted read-only.
	r := startAgent(t, owner, ws, "reader", []string{api.ToolRead, api.ToolGlob, api.ToolGrep, api.ToolBash})
	head, tree = owner.head(ws), owner.tree(ws, "")
	st, res := r.bash("echo x > /workspace/f; rm /workspace/data/sales.csv")
	if st.State != "exited" || st.ExitCode == nil || *st.ExitCode == 0 || st.Revision != "" {
		t.Errorf("the writing Bash step of a reader: %s, exit %s, revision %q, output %q; want exited non-zero (its workspace mounted read-only) without a revision",
			st.State, exitText(st.ExitCode), st.Revision, res.Output)
	}
	if got := owner.head(ws); got.ID != head.ID {
		t.Errorf("head %s (%+v) after a reader's writing Bash step, want %s", got.ID, got.Changes, head.ID)
	}
	if got := owner.tree(ws, ""); !reflect.DeepEqual(got, tree) {
		t.Errorf("tree after a reader's writing Bash step %+v, want %+v", got, tree)
	}
	if code, b, _ := owner.getFile(ws, "data/sales.csv", ""); code != http.StatusOK || string(b) != salesCSV {
		t.Errorf("data/sales.csv after the reader's rm = %d %q, want it unchanged", code, b)
	}
	if code, _, _ := owner.getFile(ws, "f", ""); code != http.StatusNotFound {
		t.Errorf("f after the reader's echo = %d, want 404", code)
	}
	r.finish()

	// An agent that edits its own file to grant itself Bash.
	self := "self-editor"
	tools := []string{api.ToolRead, api.ToolEdit, api.ToolWrite, api.ToolProposeChange, api.ToolApplyChange}
	r = startAgent(t, owner, ws, self, tools)
	own := "agents/" + self + ".md"
	_, before, _ := owner.getFile(ws, own, "")
	var read api.ReadResult
	r.ok(api.ToolRead, api.ReadInput{Path: own}, &read)
	if !strings.Contains(read.Content, "tools: [Read, Edit, Write, ProposeChange, ApplyChange]") {
		t.Errorf("Read %s = %q, want the file with its tools", own, read.Content)
	}
	more := string(agentFile(self, append(slices.Clone(tools), api.ToolBash)))
	for _, c := range []struct {
		tool   string
		input  any
		reason string // "" when either refusal will do
	}{
		{api.ToolEdit, api.EditInput{Path: own, OldString: "tools: [Read, Edit, Write,", NewString: "tools: [Read, Edit, Write, Bash,"}, api.RefusedReadOnly},
		{api.ToolEdit, api.EditInput{Path: "/workspace/" + own, OldString: "Edit, Write,", NewString: "Edit, Write, Bash,"}, api.RefusedReadOnly},
		{api.ToolProposeChange, api.ProposeChangeInput{Files: []api.ProposedFile{{Path: own, Content: more}}}, api.RefusedReadOnly},
		{api.ToolProposeChange, api.ProposeChangeInput{Files: []api.ProposedFile{{Path: "notes.txt", Content: "x\n"}, {Path: "agents/other.md", Content: more}}}, api.RefusedReadOnly},
		{api.ToolProposeChange, api.ProposeChangeInput{Patch: "--- a/" + own + "\n+++ b/" + own + "\n@@ -4 +4 @@\n-" + toolsLine(tools) + "\n+" + toolsLine(append(slices.Clone(tools), api.ToolBash)) + "\n"}, ""},
		{api.ToolWrite, api.WriteInput{Path: own, Content: more}, api.RefusedReadOnly},
		{api.ToolWrite, api.WriteInput{Path: "agents/other.md", Content: more}, api.RefusedReadOnly},
		{api.ToolWrite, api.WriteInput{Path: "agents/" + self + "/x.md", Content: more}, api.RefusedReadOnly},
		{api.ToolWrite, api.WriteInput{Path: "./agents/" + self + ".md", Content: more}, ""},
		{api.ToolWrite, api.WriteInput{Path: "data/../agents/" + self + ".md", Content: more}, ""},
		{api.ToolWrite, api.WriteInput{Path: "ａｇｅｎｔｓ/" + self + ".md", Content: more}, ""},
	} {
		what := c.tool + " " + string(mustJSON(t, c.input))
		code, b := r.call(c.tool, c.input)
		if e := r.refused(what, code, b); e.Code == "" {
			continue
		}
		if st := r.lastStep(); st.State != api.StepRefused || st.Tool == nil || st.Tool.Refusal == nil || c.reason != "" && st.Tool.Refusal.Reason != c.reason {
			t.Errorf("%s: step %+v, want refused %s", what, st, c.reason)
		}
	}
	r.checkRefusals()
	if _, after, _ := owner.getFile(ws, own, ""); !bytes.Equal(after, before) {
		t.Errorf("%s after the refused edits = %q, want it unchanged", own, after)
	}
	if code, _, _ := owner.getFile(ws, "agents/other.md", ""); code != http.StatusNotFound {
		t.Errorf("agents/other.md = %d, want 404: no tool writes under agents/", code)
	}
	if got := owner.newRun(ws, self).run().Agent.Tools; !slices.Equal(got, tools) {
		t.Errorf("a new run of %s holds %v, want %v", self, got, tools)
	}
}

// toolsLine is the tools line of agentFile.
func toolsLine(tools []string) string { return "tools: [" + strings.Join(tools, ", ") + "]" }

// exitText is an exit code for messages.
func exitText(code *int) string {
	if code == nil {
		return "none"
	}
	return strconv.Itoa(*code)
}

// noDYM is a want of no did_you_mean at all.
const noDYM = "\x00none"

// attack is one tool call the confinement must refuse.
type attack struct {
	tool string
	// input is the call's input; raw, when set, is sent instead as it is
	// (JSON escapes the Go encoder would not write).
	input any
	raw   string
	// path is the path the call gives; reason and dym what the refusal
	// must say ("" for either reason or any did_you_mean, noDYM for
	// none).
	path, reason, dym string
}

// TestAgentConfinement is issue 13's "Done means" 2 on the real stack:
// the attack table through POST /v1/runs/{id}/steps, every call refused
// with the path named and the probable one suggested, symlinks planted
// by a real Bash step included, and the run counting exactly the
// attempts.
func TestAgentConfinement(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	_, owner, ws := agentStack(t, "agent-confine", "confine")
	owner.plant(ws, [2]string{"data/sales.csv", salesCSV}, [2]string{"notes/todo.md", "chart the sales\n"})
	r := startAgent(t, owner, ws, "prober", []string{api.ToolRead, api.ToolGlob, api.ToolGrep, api.ToolWrite, api.ToolEdit, api.ToolBash})

	const sales = "/workspace/data/sales.csv"
	read := func(p, reason, dym string) attack {
		return attack{tool: api.ToolRead, input: api.ReadInput{Path: p}, path: p, reason: reason, dym: dym}
	}
	write := func(p, reason, dym string) attack {
		return attack{tool: api.ToolWrite, input: api.WriteInput{Path: p, Content: "x\n"}, path: p, reason: reason, dym: dym}
	}
	rawRead := func(jsonPath, p, reason, dym string) attack {
		return attack{tool: api.ToolRead, raw: `{"path":"` + jsonPath + `"}`, path: p, reason: reason, dym: dym}
	}
	out, ro, look := api.RefusedPath, api.RefusedReadOnly, api.RefusedLookalike
	attacks := []attack{
		// Traversal, relative and absolute.
		read("../../etc/passwd", out, noDYM),
		read("../data/sales.csv", out, sales),
		read("data/../../etc/passwd", out, noDYM),
		read("/data/sales.csv", out, sales),
		read("/etc/passwd", out, noDYM),
		read("/proc/self/environ", out, noDYM),
		read("/workspace/../etc/passwd", out, noDYM),
		read("/workspace/../data/sales.csv", out, sales),
		read("/workspace/data/../../../etc/passwd", out, noDYM),
		read("/library/../etc/passwd", out, noDYM),
		// Encoded forms: JSON escapes, percent-encoding, backslashes.
		rawRead(`\u002e\u002e/\u002e\u002e/etc/passwd`, "../../etc/passwd", out, noDYM),
		rawRead(`\u002fdata\u002fsales.csv`, "/data/sales.csv", out, sales),
		read("%2e%2e/%2e%2e/etc/passwd", out, noDYM),
		read("..%2f..%2fetc%2fpasswd", out, noDYM),
		read("%252e%252e/etc/passwd", out, noDYM),
		read("%2fdata%2fsales.csv", out, sales),
		read(`..\..\etc\passwd`, out, ""),
		read(`data\sales.csv`, out, ""),
		// NUL and control characters.
		read("data/sales.csv\x00../../etc/passwd", out, ""),
		read("\x00/etc/passwd", out, ""),
		read("data/\nsales.csv", out, ""),
		// Look-alikes that NFKC turns into path syntax.
		read("‥/‥/etc/passwd", look, ""),
		read("．．／．．／etc／passwd", look, ""),
		read("data／sales.csv", look, sales),
		read("／workspace／data／sales.csv", look, sales),
		read("ｄａｔａ/sales.csv", look, sales),
		read("data/sales\u2024csv", look, sales),
		// Very long paths and components.
		read(strings.Repeat("a/", 600)+"sales.csv", out, ""),
		read(strings.Repeat("x", 300), out, noDYM),
		read(strings.Repeat("../", 5000)+"etc/passwd", out, noDYM),
		read("data/"+strings.Repeat("s", 256)+".csv", out, ""),
		// Case tricks: paths are case-sensitive.
		read("/WORKSPACE/data/sales.csv", out, sales),
		read("/Workspace/data/sales.csv", out, sales),
		read("/WORKSPACE/../etc/passwd", out, noDYM),
		// Writes outside, and to the library.
		write("../escape.txt", out, ""),
		write("/tmp/escape.txt", out, noDYM),
		write("/etc/passwd", out, noDYM),
		write("/library/x.txt", ro, ""),
		write("/library/data/sales.csv", ro, ""),
		write("/LIBRARY/x.txt", out, ""),
		{tool: api.ToolEdit, input: api.EditInput{Path: "/library/data/sales.csv", OldString: "a", NewString: "b"}, path: "/library/data/sales.csv", reason: ro},
		{tool: api.ToolEdit, input: api.EditInput{Path: "/data/sales.csv", OldString: "north", NewString: "x"}, path: "/data/sales.csv", reason: out, dym: sales},
		// Glob and Grep roots outside.
		{tool: api.ToolGlob, input: api.GlobInput{Pattern: "*", Path: "/etc"}, path: "/etc", reason: out},
		{tool: api.ToolGlob, input: api.GlobInput{Pattern: "*", Path: "../.."}, path: "../..", reason: out},
		{tool: api.ToolGrep, input: api.GrepInput{Pattern: "root", Path: "/etc/passwd"}, path: "/etc/passwd", reason: out},
		{tool: api.ToolGrep, input: api.GrepInput{Pattern: "root", Path: "/workspace/../etc"}, path: "/workspace/../etc", reason: out},
	}
	tryAttacks(t, r, attacks)

	// Symlinks planted by a real Bash step (the agent writes, so its
	// workspace is writable): two out of the workspace, which the node
	// leaves out of the revision (saying so), and two inside, which stay.
	// Paths that climb out through either kind are refused; the paths of
	// the links left out name nothing, so reading them is a failed call
	// (no such file), not a refusal, and is not counted as one.
	st, res := r.bash("cd /workspace && ln -s /etc/passwd out && ln -s ../../.. up && ln -s data inlink && ln -s .. data/parent && ls -l")
	if st.State != "exited" || st.ExitCode == nil || *st.ExitCode != 0 || st.Revision == "" {
		t.Fatalf("the symlink step %+v (answer %+v), want exited 0 with a revision", st, res)
	}
	// The node says which it left out.
	var dropped []string
	for _, e := range st.Events {
		if e.Warning != nil && e.Warning.Cause == api.WarningWorkspacePathsDropped {
			dropped = append(dropped, e.Warning.Paths...)
		}
	}
	for _, p := range []string{"out -> /etc/passwd", "up -> ../../.."} {
		if !slices.Contains(dropped, p) {
			t.Errorf("the symlink step's dropped paths %q, want %q among them", dropped, p)
		}
	}
	links := map[string]string{}
	for _, e := range owner.tree(ws, "") {
		if e.Type == "symlink" {
			links[e.Path] = e.Target
		}
	}
	if want := map[string]string{"inlink": "data", "data/parent": ".."}; !reflect.DeepEqual(links, want) {
		t.Errorf("symlinks in the tree %v, want %v: the links out of the workspace left out", links, want)
	}
	tryAttacks(t, r, []attack{
		read("up/../etc/passwd", out, noDYM),
		read("up/../../etc/passwd", out, noDYM),
		read("inlink/../../etc/passwd", out, noDYM),
		read("data/parent/../etc/passwd", out, noDYM),
		read("data/parent/../data/sales.csv", out, sales),
		read("/workspace/inlink/../../etc/passwd", out, noDYM),
		write("up/../../etc/passwd", out, noDYM),
		write("data/parent/../../escape.txt", out, ""),
		write("inlink/../../escape.txt", out, ""),
		{tool: api.ToolGlob, input: api.GlobInput{Pattern: "*", Path: "data/parent/.."}, path: "data/parent/..", reason: out},
	})
	// The links out are not in the tree: reading their paths finds
	// nothing (a failed call, not a refusal), never the host's file.
	for _, p := range []string{"out", "/workspace/out", "up/etc/passwd", "/workspace/up/etc/passwd"} {
		code, b := r.call(api.ToolRead, api.ReadInput{Path: p})
		var ans api.ToolAnswer
		var rr api.ReadResult
		if bytes.Contains(b, []byte(hostMarker)) {
			t.Errorf("Read %s answered the host's file: %.200s", p, b)
		}
		if code == http.StatusForbidden {
			r.refused("Read "+p, code, b)
			continue
		}
		if code != http.StatusOK || json.Unmarshal(b, &ans) != nil || json.Unmarshal(ans.Result, &rr) != nil || rr.Error == "" || ans.Step.State != "failed" {
			t.Errorf("Read %s (a link out, left out of the tree) = %d %s, want a failed read or a refusal", p, code, b)
		}
	}
	// The links inside resolve inside.
	var rr api.ReadResult
	r.ok(api.ToolRead, api.ReadInput{Path: "inlink/sales.csv"}, &rr)
	if !strings.Contains(rr.Content, "north") {
		t.Errorf("Read inlink/sales.csv = %q, want data/sales.csv's lines", rr.Content)
	}

	rs := r.checkRefusals()
	for _, e := range rs {
		if e.Refusal == nil || e.Refusal.Path == "" || e.Refusal.Reason == "" {
			t.Errorf("refusal event %+v, want its path and reason", e)
		}
	}
	if code, b, _ := owner.getFile(ws, "data/sales.csv", ""); code != http.StatusOK || string(b) != salesCSV {
		t.Errorf("data/sales.csv after the attacks = %d %q, want it unchanged", code, b)
	}
	for _, p := range []string{"escape.txt", "x.txt"} {
		if code, _, _ := owner.getFile(ws, p, ""); code != http.StatusNotFound {
			t.Errorf("%s after the attacks = %d, want 404", p, code)
		}
	}
}

// tryAttacks makes each call of attacks and checks that it is refused as
// it says: 403 refused, the path and the suggestion in the error and in
// the step, the message naming the path, no host file in the answer.
func tryAttacks(t *testing.T, r *agentRun, attacks []attack) {
	t.Helper()
	for _, a := range attacks {
		var code int
		var b []byte
		if a.raw != "" {
			code, b = r.post([]byte(`{"tool":"`+a.tool+`","input":`+a.raw+`}`), "")
		} else {
			code, b = r.call(a.tool, a.input)
		}
		what := a.tool + " " + strconv.Quote(short(a.path))
		if bytes.Contains(b, []byte(hostMarker)) {
			t.Errorf("%s answered a host file: %.200s", what, b)
		}
		e := r.refused(what, code, b)
		if e.Code == "" {
			continue
		}
		if len(a.path) <= 256 && e.Path != a.path || len(a.path) > 256 && (e.Path == "" || !strings.HasPrefix(a.path, e.Path[:min(64, len(e.Path))])) {
			t.Errorf("%s: refusal names path %q, want %q", what, short(e.Path), short(a.path))
		}
		if !namesPath(e.Message, a.path) {
			t.Errorf("%s: message %q does not name the path", what, short(e.Message))
		}
		switch {
		case a.dym == noDYM && e.DidYouMean != "":
			t.Errorf("%s: did_you_mean %q, want none", what, e.DidYouMean)
		case a.dym != noDYM && a.dym != "" && e.DidYouMean != a.dym:
			t.Errorf("%s: did_you_mean %q, want %q", what, e.DidYouMean, a.dym)
		}
		if a.dym != noDYM && a.dym != "" && !strings.Contains(e.Message, a.dym) {
			t.Errorf("%s: message %q does not suggest %s", what, e.Message, a.dym)
		}
		st := r.lastStep()
		switch {
		case st.State != api.StepRefused || st.Tool == nil || st.Tool.Refusal == nil:
			t.Errorf("%s: step %+v, want refused", what, st)
		case a.reason != "" && st.Tool.Refusal.Reason != a.reason:
			t.Errorf("%s: refusal reason %q, want %q", what, st.Tool.Refusal.Reason, a.reason)
		case st.Tool.Refusal.DidYouMean != e.DidYouMean:
			t.Errorf("%s: step's did_you_mean %q, the error's %q", what, st.Tool.Refusal.DidYouMean, e.DidYouMean)
		}
	}
}

// namesPath reports whether msg names p, as it is or quoted (a path with
// control characters), or by its first 64 bytes (a long one, cut).
func namesPath(msg, p string) bool {
	quoted := strings.Trim(strconv.Quote(p), `"`)
	return strings.Contains(msg, p) || strings.Contains(msg, quoted) ||
		len(p) > 200 && (strings.Contains(msg, p[:64]) || strings.Contains(msg, quoted[:64]))
}

// short is s cut to 80 bytes, for messages.
func short(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
