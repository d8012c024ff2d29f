package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/scheduler/schedulertest"
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

// fullStep is a step with every field set, which only a restore can make.
func fullStep() cluster.Step {
	at := testNow.Add(-time.Minute)
	return cluster.Step{
		ID: "s1", State: cluster.StateCancelled, ExitCode: intp(137), TerminatedBy: cluster.ByUser, Node: "n1", Attempts: 1,
		Cancel: &cluster.Cancel{RequestedAt: at, ConfirmedAt: at.Add(time.Second), Unverified: "shown for the shape"},
		Phases: cluster.Phases{Queued: at, Placed: at, Created: at, Started: at, FirstOutput: at,
			Exited: at, CleanedUp: at},
		EndedAt: at,
		Events:  []cluster.Event{{Time: at, Kind: "cancel_requested", Message: "cancel requested"}},
		Spec: cluster.StepSpec{Image: "base", Args: []string{"sleep", "60"}, CPU: 1, MemoryBytes: 512 << 20, Idempotent: true,
			SealedEnv: []cluster.EnvVar{{Name: "TOKEN", Sealed: []byte("sealed")}, {Name: "MODE", Sealed: []byte("sealed")}},
			Pids:      1024, Timeout: time.Hour, WorkspaceBytes: 1 << 30, OutputBytes: 64 << 20},
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
	f := newScheduler(t, 1, nil)
	n1 := node("n1", netip.MustParseAddrPort("127.0.0.1:7300"))
	n1.State, n1.Health = cluster.NodeDegraded, cluster.Health{State: cluster.NodeDegraded, Reasons: []string{"ebpf: cannot attach"}}
	f.Restore([]cluster.Node{n1}, []cluster.Step{fullStep()})
	addr := f.url

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
	f := newScheduler(t, 3, nil)
	// m2 stops: the others answer for it.
	f.Stop(f.Members[2])
	// The scheduler's clock is schedctl's: ages are as the table shows.
	f.SetNow(func() time.Time { return testNow })
	n1 := node("n1", netip.MustParseAddrPort("127.0.0.1:7300"))
	two := node("node-two", netip.MustParseAddrPort("127.0.0.1:7301"))
	two.State, two.Health = cluster.NodeDegraded, cluster.Health{State: cluster.NodeDegraded, Reasons: []string{"runsc: canary failed", "ebpf"}}
	two.Capacity = cluster.Resources{CPU: 0.5, MemoryBytes: 1536 << 20}
	s := fullStep()
	// s2 waits for node-two, which is degraded.
	s2 := cluster.Step{ID: "s2", State: cluster.StateQueued, Phases: cluster.Phases{Queued: testNow.Add(-90 * time.Second)},
		Spec: cluster.StepSpec{Image: "base", Args: []string{"sh", "-c", "echo hi"}, CPU: 0.5, MemoryBytes: 512 << 20, Node: "node-two"}}
	f.Restore([]cluster.Node{n1, two}, []cluster.Step{s, s2})
	ms, err := f.Client().Members(t.Context())
	if err != nil || len(ms) != 3 {
		t.Fatalf("Members() = %v, %v; want 3", ms, err)
	}
	var memberLines []string
	for _, m := range ms {
		switch {
		case m.Leader:
			memberLines = append(memberLines, fmt.Sprintf("%s %s %s true true %d -", m.ID, m.Address, m.HTTPAddress, m.LastIndex))
		case m.ID == "m2":
			if !strings.Contains(m.Error, "connection refused") {
				t.Errorf("member m2 (stopped) error %q, want connection refused", m.Error)
			}
			memberLines = append(memberLines, fmt.Sprintf("m2 %s %s false true - %s", m.Address, m.HTTPAddress, m.Error))
		default:
			memberLines = append(memberLines, fmt.Sprintf("%s %s %s false true %d -", m.ID, m.Address, m.HTTPAddress, m.LastIndex))
		}
	}
	_, next, err := f.Client().StepsPage(t.Context(), "", "", 1, "")
	if err != nil || next == "" {
		t.Fatalf("StepsPage(limit 1) = next %q, %v; want a next page", next, err)
	}

	for _, tt := range []struct {
		args []string
		want []string // lines, with runs of spaces collapsed
	}{
		{[]string{"members"}, append([]string{"ID ADDRESS HTTP ADDRESS LEADER VOTER LAST INDEX ERROR"}, memberLines...)},
		{[]string{"nodes"}, []string{
			"ID ADDRESS STATE DEGRADED REASONS CPU MEMORY RUNNING WARM DRAIN",
			"n1 127.0.0.1:7300 ready - 4 8Gi 0 - -",
			"node-two 127.0.0.1:7301 degraded runsc: canary failed; ebpf 0.5 1.5Gi 0 - -",
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
		r := schedctl(t, f.url, nil, tt.args...)
		if r.code != 0 {
			t.Errorf("schedctl %q = %v", tt.args, r)
			continue
		}
		var got []string
		for l := range strings.Lines(r.stdout) {
			got = append(got, strings.Join(strings.Fields(l), " "))
		}
		want := tt.want
		if tt.args[0] == "members" {
			// A real scheduler's last index moves (its leader loops
			// write): the column is compared as "a number".
			want, got = anyIndex(want), anyIndex(got)
		}
		if diff := cmp.Diff(want, got); diff != "" {
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
	r := schedctl(t, f.url, nil, "steps", "--limit", "1")
	if r.code != 0 || !strings.Contains(r.stdout, "s1") || strings.Contains(r.stdout, "s2") ||
		!strings.Contains(r.stderr, "more steps: schedctl steps --limit 1 --cursor "+next) {
		t.Errorf("steps --limit 1 = %v; want s1 and the cursor of the next page, %s", r, next)
	}
	r = schedctl(t, f.url, nil, "steps", "--limit", "1", "--cursor", next)
	if r.code != 0 || !strings.Contains(r.stdout, "s2") || strings.Contains(r.stdout, "s1 ") || r.stderr != "" {
		t.Errorf("steps --limit 1 --cursor 1 = %v; want s2, the last page", r)
	}
	for _, bad := range [][]string{{"--limit", "-1"}, {"--limit", "1001"}, {"--cursor", "1"}} {
		if r := schedctl(t, f.url, nil, append([]string{"steps"}, bad...)...); r.code != exitUsage || !strings.Contains(r.stderr, bad[0]) {
			t.Errorf("steps %s %s = %v; want a usage error naming %s", bad[0], bad[1], r, bad[0])
		}
	}

	r = schedctl(t, f.url, nil, "step", "s1")
	for _, want := range []string{"state:", "cancelled", "exit code:", "137", "cancel:", "confirmed", "events:", "cancel_requested",
		"env:            TOKEN MODE", "limits:         pids 1024, timeout 1h0m0s, workspace 1Gi, output 64Mi"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("step s1 printed %q; want it to contain %q", r.stdout, want)
		}
	}
	if r := schedctl(t, f.url, nil, "step", "nope"); r.code != exitError || !strings.Contains(r.stderr, "not found") {
		t.Errorf("step nope = %v; want exit 1, not found", r)
	}
}

func TestNodeDrain(t *testing.T) {
	f := newScheduler(t, 1, nil)
	f.Agent(t, "n1", schedulertest.AgentOptions{Address: netip.MustParseAddrPort("127.0.0.1:7300")})
	r := schedctl(t, f.url, nil, "node", "drain", "n1", "--deadline", "10m", "--detach")
	if r.code != 0 || !strings.Contains(r.stdout, "node n1: draining") {
		t.Errorf("node drain n1 = %v; want the node shown draining", r)
	}
	f.mu.Lock()
	drains := trimAll(f.drains)
	f.mu.Unlock()
	if want := []string{`{"deadline":"10m0s"}`}; !cmp.Equal(drains, want) {
		t.Errorf("drain bodies = %q, want %q", drains, want)
	}
	r = schedctl(t, f.url, nil, "node", "drain", "n1", "-o", "json", "--detach")
	var n api.Node
	if err := json.Unmarshal([]byte(r.stdout), &n); err != nil || n.State != "draining" {
		t.Errorf("node drain -o json = %v (%v); want the node, draining", r, err)
	}
	if r := schedctl(t, f.url, nil, "nodes"); !strings.Contains(r.stdout, "draining") {
		t.Errorf("nodes after drain = %v; want n1 draining", r)
	}
	if r := schedctl(t, f.url, nil, "node", "undrain", "n1"); r.code != 0 || !strings.Contains(r.stdout, "node n1: ready") {
		t.Errorf("node undrain n1 = %v; want the node ready", r)
	}
	if r := schedctl(t, f.url, nil, "node", "drain", "n9", "--detach"); r.code != exitError || !strings.Contains(r.stderr, "n9") {
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
	f := newScheduler(t, 3, nil)
	f.Stop(f.Members[2])
	r := schedctl(t, f.url, nil, "raft", "remove-peer", "m2")
	ms, err := f.Client(f.Members[0]).Members(t.Context())
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.ID)
	}
	if r.code != 0 || r.stdout != "removed peer m2\n" || err != nil || slices.Contains(ids, "m2") {
		t.Errorf("raft remove-peer m2 = %v, members then %q (%v); want m2 removed", r, ids, err)
	}
}

func TestSnapshot(t *testing.T) {
	f := newScheduler(t, 1, nil)
	f.Restore([]cluster.Node{node("n1", netip.MustParseAddrPort("127.0.0.1:7300"))}, nil)
	dir := t.TempDir()
	file := filepath.Join(dir, "snap.json")
	r := schedctl(t, f.url, nil, "snapshot", "save", file)
	if r.code != 0 {
		t.Fatalf("snapshot save = %v", r)
	}
	f.mu.Lock()
	snap := f.snapshot
	f.mu.Unlock()
	got, err := os.ReadFile(file)
	if err != nil || !bytes.Equal(got, snap) || !bytes.Contains(got, []byte(`"id":"n1"`)) {
		t.Errorf("saved %q (%v), want %q, with node n1", got, err, snap)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("directory holds %d files after save, want only the snapshot", len(ents))
	}

	r = schedctl(t, f.url, nil, "snapshot", "restore", file)
	f.mu.Lock()
	restored := slices.Clone(f.restored)
	f.mu.Unlock()
	if r.code != 0 || len(restored) != 1 || !bytes.Equal(restored[0], snap) {
		t.Errorf("snapshot restore = %v, posted %q; want the file posted", r, restored)
	}

	// A broken answer leaves an existing file untouched.
	stop := f.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/snapshot" {
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"nodes":[`))
		})
	})
	if r := schedctl(t, f.url, nil, "snapshot", "save", file); r.code != exitError {
		t.Errorf("snapshot save of a truncated document = %v; want exit 1", r)
	}
	stop()
	if got, _ := os.ReadFile(file); !bytes.Equal(got, snap) {
		t.Errorf("file after a failed save = %q; want the previous snapshot", got)
	}
	os.WriteFile(file, []byte("not json"), 0o600)
	r = schedctl(t, f.url, nil, "snapshot", "restore", file)
	f.mu.Lock()
	n := len(f.restored)
	f.mu.Unlock()
	if r.code != exitError || n != 1 {
		t.Errorf("snapshot restore of a non-snapshot = %v; want exit 1 and nothing posted", r)
	}
}

// TestNodeDrainWaits: without --detach, drain returns only once the
// scheduler reports the drain complete (no steps, sandboxes cleaned up).
func TestNodeDrainWaits(t *testing.T) {
	f := newScheduler(t, 1, nil)
	a := f.Agent(t, "n1", schedulertest.AgentOptions{Address: netip.MustParseAddrPort("127.0.0.1:7300")})
	for _, id := range []string{"d1", "d2"} {
		if _, err := f.Client().SubmitStep(t.Context(), api.StepRequest{ID: id, Image: "base", Args: []string{"sleep", "60"}, CPU: 1, MemoryBytes: 512 << 20}); err != nil {
			t.Fatal(err)
		}
		a.Start(id)
	}
	// The node's steps end one after the other once the drain began.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if n, _ := f.State().Node("n1"); n.Drain != nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		for _, id := range []string{"d1", "d2"} {
			time.Sleep(600 * time.Millisecond) // past drainPoll
			a.Exit(id, 0)
		}
	}()
	r := schedctl(t, f.url, nil, "node", "drain", "n1")
	<-done
	if r.code != 0 || !strings.Contains(r.stdout, "node n1 draining (2 steps running)") || !strings.Contains(r.stdout, "node n1 drained") {
		t.Errorf("node drain n1 = %v; want draining, then drained", r)
	}
	f.mu.Lock()
	reads := f.nodeReads
	f.mu.Unlock()
	if reads < 3 {
		t.Errorf("drain read the node %d times; want it to wait for the steps to go and the drain to complete", reads)
	}
}

// anyIndex replaces the LAST INDEX column of members table lines (the
// sixth field) with "N" where it is a number.
func anyIndex(lines []string) []string {
	var out []string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) > 5 && f[0] != "ID" {
			if _, err := strconv.ParseUint(f[5], 10, 64); err == nil {
				f[5] = "N"
			}
		}
		out = append(out, strings.Join(f, " "))
	}
	return out
}

// TestWarmColumn: the WARM column shows a node's warm pool as ready out of
// ready and being made, "-" without one (the leader's memory of its
// heartbeats; scheduler.TestHeartbeatsInMemory covers the server side).
func TestWarmColumn(t *testing.T) {
	var b strings.Builder
	err := printNodes(&b, []api.Node{
		{ID: "n1", Address: "127.0.0.1:7300", State: "ready", Capacity: api.Resources{CPU: 4, MemoryBytes: 8 << 30},
			Pool: &api.WarmPool{Ready: 2, Creating: 1, Classes: 1, MemoryBytes: 200 << 20, BudgetBytes: 1 << 30}},
		{ID: "n2", Address: "127.0.0.1:7301", State: "ready", Capacity: api.Resources{CPU: 4, MemoryBytes: 8 << 30}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for l := range strings.Lines(b.String()) {
		got = append(got, strings.Join(strings.Fields(l), " "))
	}
	want := []string{
		"ID ADDRESS STATE DEGRADED REASONS CPU MEMORY RUNNING WARM DRAIN",
		"n1 127.0.0.1:7300 ready - 4 8Gi 0 2/3 -",
		"n2 127.0.0.1:7301 ready - 4 8Gi 0 - -",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("printNodes() (-want +got):\n%s", diff)
	}
}
