package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rodon-compute/rodon/api"
)

func TestUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "usage: schedctl"},
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"node"}, "want a subcommand: drain, undrain"},
		{[]string{"node", "explode", "n1"}, `unknown command "node explode"`},
		{[]string{"node", "drain"}, "missing ID"},
		{[]string{"node", "drain", "n1", "--deadline", "soon"}, "-deadline"},
		{[]string{"node", "drain", "n1", "--deadline", "-1m"}, "--deadline"},
		{[]string{"step"}, "missing ID"},
		{[]string{"step", "a", "b"}, `unexpected argument "b"`},
		{[]string{"steps", "--state", "sleeping"}, "--state"},
		{[]string{"nodes", "--bogus"}, "-bogus"},
		{[]string{"-o", "yaml", "nodes"}, "-o"},
		{[]string{"nodes", "-o", "yaml"}, "-o"},
		{[]string{"--addr", "ftp://x", "nodes"}, "--addr"},
		{[]string{"run"}, "no command given"},
		{[]string{"run", "--memory", "lots", "--", "true"}, "--memory"},
		{[]string{"run", "--cpu", "0", "--", "true"}, "--cpu"},
		{[]string{"run", "--cpu", "many", "--", "true"}, "-cpu"},
		{[]string{"run", "--timeout", "soon", "--", "true"}, "-timeout"},
		{[]string{"run", "--env", "NOEQUALS", "--", "true"}, "-env"},
		{[]string{"run", "--image", "", "--", "true"}, "--image"},
		{[]string{"cancel", "s1", "--wait", "-1s"}, "--wait"},
		{[]string{"cancel", "s1", "--wait", "forever"}, "-wait"},
		{[]string{"logs", "-x", "s1"}, "-x"},
		{[]string{"snapshot", "save"}, "missing FILE"},
		{[]string{"raft", "remove-peer"}, "missing ID"},
	} {
		// No scheduler listens there: a usage error must come first.
		r := schedctl(t, "https://127.0.0.1:1", nil, tt.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("schedctl %q = %v; want exit 2 naming %q", tt.args, r, tt.want)
		}
	}
}

// TestRunFunc checks the entry point main calls.
func TestRunFunc(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"--help"}, nil, &out, &errOut, func(string) string { return "" }); code != 0 || !strings.Contains(out.String(), "node drain ID") {
		t.Errorf("run(--help) = %d, stdout %q; want 0 and the usage", code, out.String())
	}
	out.Reset()
	if code := run([]string{"step", "-h"}, nil, &out, &errOut, func(string) string { return "" }); code != 0 || !strings.Contains(out.String(), "usage: schedctl step ID") {
		t.Errorf("run(step -h) = %d, stdout %q; want 0 and the command's usage", code, out.String())
	}
	if code := run(nil, nil, &out, &errOut, func(string) string { return "" }); code != exitUsage {
		t.Errorf("run() = %d, want %d", code, exitUsage)
	}
}

func TestUnreachable(t *testing.T) {
	r := schedctl(t, "", nil, "--addr", "https://127.0.0.1:1", "nodes")
	if r.code != exitError || !strings.Contains(r.stderr, "127.0.0.1:1") {
		t.Errorf("nodes against a closed port = %v; want exit 1 naming the address", r)
	}
}

func fullStep() api.Step {
	code := 137
	at := testNow.Add(-time.Minute)
	return api.Step{
		ID: "s1", State: "cancelled", ExitCode: &code, TerminatedBy: "user", Node: "n1", Attempts: 1,
		Idempotent: true,
		Cancel:     &api.Cancel{RequestedAt: at, ConfirmedAt: at.Add(time.Second), Unverified: "shown for the shape"},
		Phases: api.Phases{Queued: at, Placed: at, Created: at, Started: at, FirstOutput: at,
			Exited: at, CleanedUp: at},
		Events: []api.Event{{Time: at, Kind: "cancel_requested", Message: "cancel requested"}},
		Spec: api.StepRequest{Image: "base", Args: []string{"sleep", "60"}, CPU: 1, MemoryBytes: 512 << 20,
			EnvNames: []string{"TOKEN", "MODE"}, Pids: 1024, Timeout: api.Duration(time.Hour), WorkspaceBytes: 1 << 30, OutputBytes: 64 << 20},
	}
}

// keys returns the keys of a JSON object.
func keys(t *testing.T, v any) []string {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%v is not a JSON object", v)
	}
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// hasKeys checks that obj has every key of want.
func hasKeys(t *testing.T, what string, obj any, want ...string) {
	t.Helper()
	got := keys(t, obj)
	for _, k := range want {
		if !slices.Contains(got, k) {
			t.Errorf("%s has keys %q, missing %q", what, got, k)
		}
	}
}

func TestJSONShapes(t *testing.T) {
	f := newFakeScheduler(t)
	f.members = []api.Member{{ID: "m1", Address: "127.0.0.1:7200", HTTPAddress: "http://127.0.0.1:7100", Leader: true, Voter: true, LastIndex: 42}}
	f.nodes = []api.Node{{ID: "n1", Address: "127.0.0.1:7300", State: "degraded", DegradedReasons: []string{"ebpf: cannot attach"},
		Capacity: api.Resources{CPU: 4, MemoryBytes: 8 << 30}, Running: 2}}
	f.addStep(fullStep())
	addr := f.srv.URL

	decode := func(args ...string) any {
		t.Helper()
		r := schedctl(t, addr, nil, args...)
		if r.code != 0 {
			t.Fatalf("schedctl %q = %v", args, r)
		}
		var v any
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
			t.Fatalf("schedctl %q printed %q: %v", args, r.stdout, err)
		}
		return v
	}
	stepKeys := []string{"id", "state", "exit_code", "terminated_by", "node", "attempts", "idempotent", "cancel", "phases", "events"}
	checkStep := func(what string, s any) {
		hasKeys(t, what, s, stepKeys...)
		m := s.(map[string]any)
		hasKeys(t, what+".cancel", m["cancel"], "requested_at", "confirmed_at", "unverified")
		hasKeys(t, what+".phases", m["phases"], "queued", "placed", "created", "started", "first_output", "exited", "cleaned_up")
		if m["exit_code"] != 137.0 || m["id"] != "s1" || m["idempotent"] != true {
			t.Errorf("%s = %v; want the step's values", what, m)
		}
		p := m["phases"].(map[string]any)
		if _, err := time.Parse(time.RFC3339, p["queued"].(string)); err != nil {
			t.Errorf("%s.phases.queued: %v", what, err)
		}
	}

	checkStep("step -o json", decode("step", "s1", "-o", "json"))
	checkStep("step (-o json before the command)", decode("-o", "json", "step", "s1"))

	steps, ok := decode("steps", "-o", "json").([]any)
	if !ok || len(steps) != 1 {
		t.Fatalf("steps -o json = %v; want an array of one step", steps)
	}
	checkStep("steps -o json [0]", steps[0])
	empty := decode("steps", "--state", "running", "-o", "json")
	if a, ok := empty.([]any); !ok || len(a) != 0 {
		t.Errorf("steps --state running -o json = %v; want []", empty)
	}

	nodes, ok := decode("nodes", "-o", "json").([]any)
	if !ok || len(nodes) != 1 {
		t.Fatalf("nodes -o json = %v; want an array of one node", nodes)
	}
	hasKeys(t, "nodes -o json [0]", nodes[0], "id", "address", "state", "degraded_reasons", "capacity", "running")

	members, ok := decode("members", "-o", "json").([]any)
	if !ok || len(members) != 1 {
		t.Fatalf("members -o json = %v; want an array of one member", members)
	}
	hasKeys(t, "members -o json [0]", members[0], "id", "address", "leader", "voter")
	if m := members[0].(map[string]any); m["leader"] != true || m["voter"] != true {
		t.Errorf("members -o json [0] = %v; want leader and voter true", m)
	}
}

func TestTables(t *testing.T) {
	f := newFakeScheduler(t)
	f.members = []api.Member{
		{ID: "m1", Address: "127.0.0.1:7200", Leader: true, Voter: true, LastIndex: 42},
		{ID: "m2", Address: "127.0.0.1:7201", Voter: true, Error: "connection refused"},
	}
	f.nodes = []api.Node{
		{ID: "n1", Address: "127.0.0.1:7300", State: "ready", Capacity: api.Resources{CPU: 4, MemoryBytes: 8 << 30}, Running: 2},
		{ID: "node-two", Address: "127.0.0.1:7301", State: "degraded", DegradedReasons: []string{"runsc: canary failed", "ebpf"},
			Capacity: api.Resources{CPU: 0.5, MemoryBytes: 1536 << 20}},
	}
	s := fullStep()
	f.addStep(s)
	s2 := api.Step{ID: "s2", State: "queued", Phases: api.Phases{Queued: testNow.Add(-90 * time.Second)},
		Spec: api.StepRequest{Args: []string{"sh", "-c", "echo hi"}}}
	f.addStep(s2)

	for _, tt := range []struct {
		args []string
		want []string // lines, with runs of spaces collapsed
	}{
		{[]string{"members"}, []string{
			"ID ADDRESS HTTP ADDRESS LEADER VOTER LAST INDEX ERROR",
			"m1 127.0.0.1:7200 - true true 42 -",
			"m2 127.0.0.1:7201 - false true - connection refused",
		}},
		{[]string{"nodes"}, []string{
			"ID ADDRESS STATE DEGRADED REASONS CPU MEMORY RUNNING DRAIN",
			"n1 127.0.0.1:7300 ready - 4 8Gi 2 -",
			"node-two 127.0.0.1:7301 degraded runsc: canary failed; ebpf 0.5 1.5Gi 0 -",
		}},
		{[]string{"steps"}, []string{
			"ID STATE EXIT TERMINATED BY NODE ATTEMPTS CANCEL AGE COMMAND",
			"s1 cancelled 137 user n1 1 confirmed 1m0s sleep 60",
			`s2 queued - - - 0 - 1m30s sh -c "echo hi"`,
		}},
		{[]string{"steps", "--state", "queued"}, []string{
			"ID STATE EXIT TERMINATED BY NODE ATTEMPTS CANCEL AGE COMMAND",
			`s2 queued - - - 0 - 1m30s sh -c "echo hi"`,
		}},
	} {
		r := schedctl(t, f.srv.URL, nil, tt.args...)
		if r.code != 0 {
			t.Errorf("schedctl %q = %v", tt.args, r)
			continue
		}
		var got []string
		for l := range strings.Lines(r.stdout) {
			got = append(got, strings.Join(strings.Fields(l), " "))
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("schedctl %q printed (-want +got):\n%s\nraw:\n%s", tt.args, diff, r.stdout)
		}
		// Columns are aligned: every line's second column starts at the
		// same offset.
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		col := strings.Index(lines[0], "  ") + 2
		for col < len(lines[0]) && lines[0][col] == ' ' {
			col++
		}
		for _, l := range lines[1:] {
			if len(l) <= col || l[col] == ' ' || l[col-1] != ' ' {
				t.Errorf("schedctl %q: line %q not aligned at column %d", tt.args, l, col)
			}
		}
	}

	// One page at a time: the next page's cursor is on stderr.
	r := schedctl(t, f.srv.URL, nil, "steps", "--limit", "1")
	if r.code != 0 || !strings.Contains(r.stdout, "s1") || strings.Contains(r.stdout, "s2") ||
		!strings.Contains(r.stderr, "more steps: schedctl steps --limit 1 --cursor 1") {
		t.Errorf("steps --limit 1 = %v; want s1 and the cursor of the next page", r)
	}
	r = schedctl(t, f.srv.URL, nil, "steps", "--limit", "1", "--cursor", "1")
	if r.code != 0 || !strings.Contains(r.stdout, "s2") || strings.Contains(r.stdout, "s1 ") || r.stderr != "" {
		t.Errorf("steps --limit 1 --cursor 1 = %v; want s2, the last page", r)
	}
	for _, bad := range [][]string{{"--limit", "-1"}, {"--limit", "1001"}, {"--cursor", "1"}} {
		if r := schedctl(t, f.srv.URL, nil, append([]string{"steps"}, bad...)...); r.code != exitUsage || !strings.Contains(r.stderr, bad[0]) {
			t.Errorf("steps %s %s = %v; want a usage error naming %s", bad[0], bad[1], r, bad[0])
		}
	}

	r = schedctl(t, f.srv.URL, nil, "step", "s1")
	for _, want := range []string{"state:", "cancelled", "exit code:", "137", "cancel:", "confirmed", "events:", "cancel_requested",
		"env:            TOKEN MODE", "limits:         pids 1024, timeout 1h0m0s, workspace 1Gi, output 64Mi"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("step s1 printed %q; want it to contain %q", r.stdout, want)
		}
	}
	if r := schedctl(t, f.srv.URL, nil, "step", "nope"); r.code != exitError || !strings.Contains(r.stderr, "not found") {
		t.Errorf("step nope = %v; want exit 1, not found", r)
	}
}

func TestNodeDrain(t *testing.T) {
	f := newFakeScheduler(t)
	f.nodes = []api.Node{{ID: "n1", Address: "127.0.0.1:7300", State: "ready", Running: 1}}
	r := schedctl(t, f.srv.URL, nil, "node", "drain", "n1", "--deadline", "10m", "--detach")
	if r.code != 0 || !strings.Contains(r.stdout, "node n1: draining") {
		t.Errorf("node drain n1 = %v; want the node shown draining", r)
	}
	if want := []string{`{"deadline":"10m0s"}`}; !cmp.Equal(trimAll(f.drains), want) {
		t.Errorf("drain bodies = %q, want %q", f.drains, want)
	}
	r = schedctl(t, f.srv.URL, nil, "node", "drain", "n1", "-o", "json", "--detach")
	var n api.Node
	if err := json.Unmarshal([]byte(r.stdout), &n); err != nil || n.State != "draining" {
		t.Errorf("node drain -o json = %v (%v); want the node, draining", r, err)
	}
	if r := schedctl(t, f.srv.URL, nil, "nodes"); !strings.Contains(r.stdout, "draining") {
		t.Errorf("nodes after drain = %v; want n1 draining", r)
	}
	if r := schedctl(t, f.srv.URL, nil, "node", "undrain", "n1"); r.code != 0 || !strings.Contains(r.stdout, "node n1: ready") {
		t.Errorf("node undrain n1 = %v; want the node ready", r)
	}
	if r := schedctl(t, f.srv.URL, nil, "node", "drain", "n9", "--detach"); r.code != exitError || !strings.Contains(r.stderr, "n9") {
		t.Errorf("node drain n9 = %v; want exit 1 naming n9", r)
	}
}

func trimAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.TrimSpace(s)
	}
	return out
}

func TestMembersRemovePeer(t *testing.T) {
	f := newFakeScheduler(t)
	r := schedctl(t, f.srv.URL, nil, "raft", "remove-peer", "m3")
	if r.code != 0 || r.stdout != "removed peer m3\n" || !cmp.Equal(f.removed, []string{"m3"}) {
		t.Errorf("raft remove-peer m3 = %v, removed %q; want m3 removed", r, f.removed)
	}
}

func TestSnapshot(t *testing.T) {
	f := newFakeScheduler(t)
	f.snap = []byte(`{"nodes":[{"id":"n1"}],"steps":[]}`)
	dir := t.TempDir()
	file := filepath.Join(dir, "snap.json")
	r := schedctl(t, f.srv.URL, nil, "snapshot", "save", file)
	if r.code != 0 {
		t.Fatalf("snapshot save = %v", r)
	}
	got, err := os.ReadFile(file)
	if err != nil || !bytes.Equal(got, f.snap) {
		t.Errorf("saved %q (%v), want %q", got, err, f.snap)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("directory holds %d files after save, want only the snapshot", len(ents))
	}

	r = schedctl(t, f.srv.URL, nil, "snapshot", "restore", file)
	if r.code != 0 || len(f.restored) != 1 || !bytes.Equal(f.restored[0], f.snap) {
		t.Errorf("snapshot restore = %v, posted %q; want the file posted", r, f.restored)
	}

	// A broken answer leaves an existing file untouched.
	f.snap = []byte(`{"nodes":[`)
	if r := schedctl(t, f.srv.URL, nil, "snapshot", "save", file); r.code != exitError {
		t.Errorf("snapshot save of a truncated document = %v; want exit 1", r)
	}
	if got, _ := os.ReadFile(file); string(got) != `{"nodes":[{"id":"n1"}],"steps":[]}` {
		t.Errorf("file after a failed save = %q; want the previous snapshot", got)
	}
	os.WriteFile(file, []byte("not json"), 0o600)
	if r := schedctl(t, f.srv.URL, nil, "snapshot", "restore", file); r.code != exitError || len(f.restored) != 1 {
		t.Errorf("snapshot restore of a non-snapshot = %v; want exit 1 and nothing posted", r)
	}
}

// TestNodeDrainWaits: without --detach, drain returns only once the
// scheduler reports the drain complete (no steps, sandboxes cleaned up).
func TestNodeDrainWaits(t *testing.T) {
	f := newFakeScheduler(t)
	f.nodes = []api.Node{{ID: "n1", Address: "127.0.0.1:7300", State: "ready", Running: 2}}
	r := schedctl(t, f.srv.URL, nil, "node", "drain", "n1")
	if r.code != 0 || !strings.Contains(r.stdout, "node n1 draining (2 steps running)") || !strings.Contains(r.stdout, "node n1 drained") {
		t.Errorf("node drain n1 = %v; want draining, then drained", r)
	}
	if f.nodeReads < 3 {
		t.Errorf("drain read the node %d times; want it to wait for the steps to go and the drain to complete", f.nodeReads)
	}
}
