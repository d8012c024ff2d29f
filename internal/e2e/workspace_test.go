package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/blob/blobtest"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// putFile uploads b to path in workspace ws through the gateway and
// returns the revision it made; ifMatch, if set, is the parent it must
// have.
func (c *gwClient) putFile(ws, path string, b []byte, ifMatch string) (int, api.Revision, []byte) {
	c.t.Helper()
	req, err := http.NewRequestWithContext(c.t.Context(), http.MethodPut, c.g.site+"/v1/workspaces/"+ws+"/files/"+path, bytes.NewReader(b))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if ifMatch != "" {
		req.Header.Set("If-Match", ifMatch)
	}
	c.auth(req)
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("PUT %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var rev api.Revision
	if resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(body, &rev); err != nil {
			c.t.Fatalf("PUT %s: decode %s: %v", path, body, err)
		}
	}
	return resp.StatusCode, rev, body
}

// getFile downloads path of workspace ws at rev ("" for the head).
func (c *gwClient) getFile(ws, path, rev string) (int, []byte, http.Header) {
	c.t.Helper()
	u := c.g.site + "/v1/workspaces/" + ws + "/files/" + path
	if rev != "" {
		u += "?rev=" + rev
	}
	req, err := http.NewRequestWithContext(c.t.Context(), http.MethodGet, u, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	c.auth(req)
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, b, resp.Header
}

// auth adds the client's credential to a request it builds itself.
func (c *gwClient) auth(req *http.Request) {
	if req.Method != http.MethodGet && c.csrf != "" {
		req.Header.Set("X-CSRF-Token", c.csrf)
	}
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
}

// revisions is the workspace's history, newest first.
func (c *gwClient) revisions(ws string) []api.Revision {
	c.t.Helper()
	var revs []api.Revision
	c.must(http.StatusOK, http.MethodGet, "/v1/workspaces/"+ws+"/revisions", nil, &revs)
	return revs
}

// chartScript is the demo's analysis: it reads sales.csv and writes
// chart.png, and prints the chart's digest so that the test can compare
// what the step wrote with what the gateway serves.
const chartScript = `cd /workspace && MPLCONFIGDIR=/tmp/mpl python3 analyse.py && python3 -c "import hashlib;print('chart', hashlib.sha256(open('chart.png','rb').read()).hexdigest())"`

// TestWorkspaceRun is issue 12's end-to-end test through the gateway: a
// real scheduler, two agents, gVisor and the local blob store. A person
// uploads sales.csv and the analysis; a run of two steps charts it on one
// node and reads the chart on the other; the history has the right
// authors and changes; the chart downloads byte-equal; diff and restore
// work; then the node that ran the first step is killed and a later
// step, and an idempotent step caught on it, run on the other node from
// the revisions they started from.
func TestWorkspaceRun(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	f := &fleet{}
	startSchedulers(t, f, 1)
	startNamedAgent(t, f, "ws-node-a")
	startNamedAgent(t, f, "ws-node-b")
	sched := newClient(t, f.urls())
	_, owner, ws := ownerWithWorkspace(t, f, "sales")

	up1, up2, op, s0, s1, wrote := chartRun(t, sched, owner, ws)
	// Three revisions after the uploads' two: the chart's (by step 0) and
	// none by step 1, which changed nothing.
	revs := owner.revisions(ws)
	if len(revs) != 3 {
		t.Fatalf("history %+v, want 3 revisions", revs)
	}
	chartRev := revs[0]
	if chartRev.Author.Kind != api.AuthorStep || chartRev.Author.ID != op.Steps[0].ID || chartRev.Parent != up2.ID || s0.Revision != chartRev.ID {
		t.Errorf("revision %+v (step 0 made %q), want by step %s on %s", chartRev, s0.Revision, op.Steps[0].ID, up2.ID)
	}
	for _, p := range []string{"chart.png", "summary.csv"} {
		if !slices.Contains(chartRev.Changes.Added, p) {
			t.Errorf("revision %s added %v, want %s among them", chartRev.ID, chartRev.Changes.Added, p)
		}
	}
	if s1.Revision != "" {
		t.Errorf("step 1 made revision %s, want none: it changed nothing", s1.Revision)
	}
	if revs[1].ID != up2.ID || revs[2].ID != up1.ID {
		t.Errorf("history %v, want the chart's, then %s, %s", revs, up2.ID, up1.ID)
	}

	code, png, h := owner.getFile(ws, "chart.png", "")
	sum := sha256.Sum256(png)
	if code != http.StatusOK || hex.EncodeToString(sum[:]) != wrote || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("GET chart.png = %d, %d bytes of digest %x, want the PNG of digest %s", code, len(png), sum, wrote)
	}
	if etag := h.Get("ETag"); !strings.Contains(etag, wrote) {
		t.Errorf("ETag %q, want the digest %s", etag, wrote)
	}
	if code, _, _ := owner.getFile(ws, "chart.png", up2.ID); code != http.StatusNotFound {
		t.Errorf("GET chart.png at %s = %d, want 404: it did not exist then", up2.ID, code)
	}

	var diff api.WorkspaceDiff
	owner.must(http.StatusOK, http.MethodGet, "/v1/workspaces/"+ws+"/diff?from="+up2.ID+"&to="+chartRev.ID, nil, &diff)
	if !slices.Contains(diff.Changes.Added, "chart.png") || len(diff.Changes.Removed) != 0 {
		t.Errorf("diff %+v, want chart.png added", diff.Changes)
	}
	var restored api.Revision
	owner.must(http.StatusCreated, http.MethodPost, "/v1/workspaces/"+ws+"/restore", api.RestoreRequest{Rev: up2.ID}, &restored)
	if restored.Number != 4 || !slices.Contains(restored.Changes.Removed, "chart.png") || restored.Author.Kind != api.AuthorAccount {
		t.Errorf("restore %+v, want revision 4 by the account removing chart.png", restored)
	}
	if code, _, _ := owner.getFile(ws, "chart.png", ""); code != http.StatusNotFound {
		t.Errorf("GET chart.png after restoring %s = %d, want 404", up2.ID, code)
	}
	if code, b, _ := owner.getFile(ws, "chart.png", chartRev.ID); code != http.StatusOK || !bytes.Equal(b, png) {
		t.Errorf("GET chart.png at %s after the restore = %d, %d bytes; want the chart", chartRev.ID, code, len(b))
	}

	confinementAttacks(t, owner, ws)
	afterAttacks := owner.revisions(ws)[0]

	// Node loss: the node that ran step 0 (drained) takes an idempotent
	// step from the head, then is killed; the step is re-placed on the
	// other node from the same revision and ends once.
	nodeA := s0.Node
	if _, err := sched.UndrainNode(t.Context(), nodeA); err != nil {
		t.Fatal(err)
	}
	if _, err := sched.DrainNode(t.Context(), s1.Node, 0); err != nil {
		t.Fatal(err)
	}
	lost, err := sched.SubmitStep(t.Context(), api.StepRequest{Image: "base", Workspace: ws, Idempotent: true, CPU: 0.5, MemoryBytes: 128 << 20,
		Args: []string{"sh", "-c", "test -f /workspace/sales.csv && test ! -e /workspace/chart.png && sleep 3 && echo again >> /workspace/attempts.txt"}})
	if err != nil {
		t.Fatal(err)
	}
	if lost.Spec.BaseRevision != afterAttacks.ID {
		t.Errorf("submitted step's base revision %q, want the head %s", lost.Spec.BaseRevision, afterAttacks.ID)
	}
	waitFor(t, 2*time.Minute, "the idempotent step running on "+nodeA, func() bool {
		lost, err = sched.Step(t.Context(), lost.ID)
		return err == nil && lost.State == "running" && lost.Node == nodeA
	})
	if _, err := sched.UndrainNode(t.Context(), s1.Node); err != nil {
		t.Fatal(err)
	}
	killed := killAgent(t, f, nodeA)
	var final api.Step
	waitFor(t, 3*time.Minute, "the idempotent step to end on the other node", func() bool {
		final, err = sched.Step(t.Context(), lost.ID)
		return err == nil && final.State == "exited"
	})
	if final.Node == nodeA || final.Attempts != 2 || final.ExitCode == nil || *final.ExitCode != 0 || final.Revision == "" {
		t.Fatalf("re-placed step %+v, want exited 0 on the other node after 2 attempts, with a revision", final)
	}
	code, att, _ := owner.getFile(ws, "attempts.txt", "")
	if code != http.StatusOK || string(att) != "again\n" {
		t.Errorf("attempts.txt = %d %q, want the one line of the attempt that ended", code, att)
	}
	revs = owner.revisions(ws)
	if revs[0].ID != final.Revision || revs[0].Parent != afterAttacks.ID || revs[0].Author.ID != lost.ID {
		t.Errorf("head %+v, want the revision of %s on %s", revs[0], lost.ID, afterAttacks.ID)
	}
	checkNoStoreCredential(t, sched, final.ID)

	// The killed node comes back with its data and destroys what it left.
	restarted := start(t, "agentd "+nodeA+" (restarted)", append([]string{bin + "/agentd"}, killed.cmd.Args[1:]...)...)
	waitFor(t, 60*time.Second, nodeA+" back and its orphans destroyed", func() bool {
		return strings.Contains(restarted.out.String(), "destroying the sandbox of a step no longer assigned here")
	})

	// A run whose first step ran on a node that is SIGKILLed before its
	// second step is placed: the second runs on the other node and sees
	// the first one's revision. (Both nodes are drained while the first
	// step runs, so that the second waits until the first's node is dead.)
	nodeB := s1.Node
	waitFor(t, time.Minute, nodeA+" ready again", func() bool {
		n, err := sched.Node(t.Context(), nodeA)
		return err == nil && n.State == "ready"
	})
	if _, err := sched.DrainNode(t.Context(), nodeB, 0); err != nil {
		t.Fatal(err)
	}
	op2 := owner.startRun(ws,
		map[string]any{"image": "base", "args": []string{"sh", "-c", "echo written-before-the-loss > /workspace/loss.txt && sleep 2"}, "cpu": 0.5, "memory": "128Mi"},
		map[string]any{"image": "base", "args": []string{"cat", "/workspace/loss.txt"}, "cpu": 0.5, "memory": "128Mi"},
	)
	waitFor(t, 2*time.Minute, "the run's first step running on "+nodeA, func() bool {
		st, err := sched.Step(t.Context(), op2.Steps[0].ID)
		return err == nil && st.State == "running" && st.Node == nodeA
	})
	if _, err := sched.DrainNode(t.Context(), nodeA, 0); err != nil {
		t.Fatal(err)
	}
	var first2, second2 api.Step
	waitFor(t, 2*time.Minute, "the first step's revision and the second step queued", func() bool {
		first2, err = sched.Step(t.Context(), op2.Steps[0].ID)
		if err != nil || first2.State != "exited" {
			return false
		}
		second2, err = sched.Step(t.Context(), op2.Steps[1].ID)
		return err == nil && second2.State == "queued"
	})
	restarted.kill()
	if _, err := sched.UndrainNode(t.Context(), nodeB); err != nil {
		t.Fatal(err)
	}
	done2 := owner.waitRun(op2.ID, 3*time.Minute)
	second2, err = sched.Step(t.Context(), op2.Steps[1].ID)
	if err != nil {
		t.Fatal(err)
	}
	if done2.State != "succeeded" || second2.Node != nodeB || first2.Revision == "" || second2.Spec.BaseRevision != first2.Revision {
		t.Fatalf("run %s %s; its second step on %s from %q, want succeeded on %s from the first step's revision %q",
			op2.ID, done2.State, second2.Node, second2.Spec.BaseRevision, nodeB, first2.Revision)
	}
	if got := string(stdout(t, owner.openStream(op2.Steps[1].ID, 0).untilExit(), 1)); got != "written-before-the-loss\n" {
		t.Errorf("the second step read %q, want the first step's file", got)
	}
	again := start(t, "agentd "+nodeA+" (restarted again)", append([]string{bin + "/agentd"}, killed.cmd.Args[1:]...)...)
	// Back once more, it has swept what the kill left before it
	// registers.
	waitFor(t, time.Minute, nodeA+" registered once more", func() bool {
		return strings.Contains(again.out.String(), `"msg":"registered"`)
	})
	for _, p := range append(f.agents, restarted, again) {
		p.stop(30 * time.Second)
	}
}

// chartRun uploads the demo's dataset and analysis into ws (revisions 1
// and 2, by the owner) and runs them as a run of two steps: step 0 charts
// on one node (drained while it runs), step 1 reads the chart on the
// other. It returns the uploads' revisions, the run, its steps as the
// scheduler has them, and the digest of the chart step 0 wrote.
func chartRun(t *testing.T, sched *client.Client, owner *gwClient, ws string) (up1, up2 api.Revision, op gwOperation, s0, s1 api.Step, wrote string) {
	t.Helper()
	csv, err := os.ReadFile("../../scripts/demo/sales.csv")
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile("../../scripts/demo/analyse.py")
	if err != nil {
		t.Fatal(err)
	}
	code, up1, body := owner.putFile(ws, "sales.csv", csv, "")
	if code != http.StatusCreated || up1.Number != 1 || up1.Author.Kind != api.AuthorAccount {
		t.Fatalf("upload sales.csv = %d %s, want 201 with revision 1 by the account", code, body)
	}
	code, up2, body = owner.putFile(ws, "analyse.py", script, up1.ID)
	if code != http.StatusCreated || up2.Number != 2 || up2.Parent != up1.ID || !slices.Equal(up2.Changes.Added, []string{"analyse.py"}) {
		t.Fatalf("upload analyse.py = %d %s, want 201, revision 2 adding analyse.py on %s", code, body, up1.ID)
	}

	// Step 0 charts on one node; while it runs its node is drained so
	// that step 1 must run on the other.
	op = owner.startRun(ws,
		map[string]any{"image": "python", "args": []string{"sh", "-c", chartScript + " && sleep 2"}, "cpu": 1, "memory": "1Gi"},
		map[string]any{"image": "python", "args": []string{"python3", "-c", "import hashlib;print('read', hashlib.sha256(open('/workspace/chart.png','rb').read()).hexdigest())"}, "cpu": 0.5, "memory": "256Mi"},
	)
	var first api.Step
	waitFor(t, 2*time.Minute, "step 0 on a node", func() bool {
		first, err = sched.Step(t.Context(), op.Steps[0].ID)
		return err == nil && first.Node != "" && first.State == "running"
	})
	if _, err := sched.DrainNode(t.Context(), first.Node, 0); err != nil {
		t.Fatal(err)
	}
	done := owner.waitRun(op.ID, 4*time.Minute)
	if done.State != "succeeded" {
		t.Fatalf("run %+v, want succeeded", done)
	}
	s0, err = sched.Step(t.Context(), op.Steps[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	s1, err = sched.Step(t.Context(), op.Steps[1].ID)
	if err != nil {
		t.Fatal(err)
	}
	if s0.Node == s1.Node {
		t.Fatalf("both steps ran on %s, want step 1 on the other node", s0.Node)
	}
	out0 := string(stdout(t, owner.openStream(op.Steps[0].ID, 0).untilExit(), 1))
	out1 := string(stdout(t, owner.openStream(op.Steps[1].ID, 0).untilExit(), 1))
	wrote = field(t, out0, "chart")
	if read := field(t, out1, "read"); read != wrote {
		t.Fatalf("step 1 read a chart of digest %s, step 0 wrote %s", read, wrote)
	}

	return up1, up2, op, s0, s1, wrote
}

// field returns the word after "name " in out.
func field(t *testing.T, out, name string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %q line in %q", name, out)
	return ""
}

// killAgent SIGKILLs the agent of node id and returns its process.
func killAgent(t *testing.T, f *fleet, id string) *proc {
	t.Helper()
	for _, a := range f.agents {
		if strings.HasSuffix(a.name, " "+id) {
			a.kill()
			return a
		}
	}
	t.Fatalf("no agent %s", id)
	return nil
}

// checkNoStoreCredential checks that the scheduler's record of a step
// holds no presigned URL or store credential: those are in assignments
// only.
func checkNoStoreCredential(t *testing.T, c *client.Client, id string) {
	t.Helper()
	st, err := c.Step(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(st)
	for _, s := range []string{"sig=", "X-Amz-Signature", "workspace_access", "urls"} {
		if bytes.Contains(b, []byte(s)) {
			t.Errorf("step record holds %q: %s", s, b)
		}
	}
}

// TestWorkspaceConflict: two writers change one path from one parent.
// Exactly one commit wins; the other is refused with the path named; both
// contents stay retrievable. Once with two steps on two nodes, once with
// two people's uploads.
func TestWorkspaceConflict(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	f := &fleet{}
	startSchedulers(t, f, 1)
	startNamedAgent(t, f, "ws-node-c")
	startNamedAgent(t, f, "ws-node-d")
	sched := newClient(t, f.urls())
	_, owner, ws := ownerWithWorkspace(t, f, "conflicts")
	_, base, body := owner.putFile(ws, "out.txt", []byte("base\n"), "")
	if base.ID == "" {
		t.Fatalf("upload: %s", body)
	}

	// Two steps from the same base write out.txt and other.txt-N; they
	// start together and end within a second of each other.
	var ids []string
	for _, word := range []string{"left", "right"} {
		st, err := sched.SubmitStep(t.Context(), api.StepRequest{Image: "base", Workspace: ws, BaseRevision: base.ID, CPU: 0.5, MemoryBytes: 128 << 20,
			Args: []string{"sh", "-c", "echo " + word + " > /workspace/out.txt && echo " + word + " > /workspace/" + word + ".txt"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, st.ID)
	}
	var steps []api.Step
	waitFor(t, 3*time.Minute, "both steps to end", func() bool {
		steps = steps[:0]
		for _, id := range ids {
			st, err := sched.Step(t.Context(), id)
			if err != nil || !isTerminal(st.State) {
				return false
			}
			steps = append(steps, st)
		}
		return true
	})
	var won, lost *api.Step
	for i := range steps {
		switch {
		case steps[i].State == "exited" && steps[i].Cause == "":
			won = &steps[i]
		case steps[i].State == "failed" && steps[i].Cause == api.CauseWorkspaceConflict:
			lost = &steps[i]
		}
	}
	if won == nil || lost == nil {
		t.Fatalf("steps %+v, want one exited and one failed with cause %s", steps, api.CauseWorkspaceConflict)
	}
	if !strings.Contains(lost.Reason, "workspace conflict") || !strings.Contains(lost.Reason, "out.txt") {
		t.Errorf("losing step's reason %q, want the conflict on out.txt named", lost.Reason)
	}
	revs := owner.revisions(ws)
	if len(revs) != 2 || revs[0].ID != won.Revision || revs[0].Parent != base.ID {
		t.Fatalf("history %+v, want the winner's %s on %s", revs, won.Revision, base.ID)
	}
	var detached api.Revision
	owner.must(http.StatusOK, http.MethodGet, "/v1/workspaces/"+ws+"/revisions/"+lost.Revision, nil, &detached)
	if !detached.Detached || detached.Number != 0 || !slices.Equal(detached.Conflict, []string{"out.txt"}) || detached.Parent != base.ID {
		t.Errorf("losing step's revision %+v, want detached from %s with the conflict on out.txt", detached, base.ID)
	}
	wonWord, lostWord := "left", "right"
	if won.ID == ids[1] {
		wonWord, lostWord = "right", "left"
	}
	for _, c := range []struct{ rev, word string }{{won.Revision, wonWord}, {lost.Revision, lostWord}, {"", wonWord}} {
		if code, b, _ := owner.getFile(ws, "out.txt", c.rev); code != http.StatusOK || string(b) != c.word+"\n" {
			t.Errorf("out.txt at %q = %d %q, want %q", c.rev, code, b, c.word)
		}
	}

	// People: two uploads of out.txt on the same parent.
	head := revs[0].ID
	code, r1, body := owner.putFile(ws, "out.txt", []byte("one\n"), head)
	if code != http.StatusCreated {
		t.Fatalf("first upload on %s = %d %s", head, code, body)
	}
	code, _, body = owner.putFile(ws, "out.txt", []byte("two\n"), head)
	var refused api.Error
	if code != http.StatusConflict || json.Unmarshal(body, &refused) != nil || refused.Detail.Revision == nil ||
		!slices.Equal(refused.Detail.Revision.Conflict, []string{"out.txt"}) || !refused.Detail.Revision.Detached {
		t.Fatalf("second upload on %s = %d %s, want 409 with its detached revision naming out.txt", head, code, body)
	}
	if code, b, _ := owner.getFile(ws, "out.txt", refused.Detail.Revision.ID); code != http.StatusOK || string(b) != "two\n" {
		t.Errorf("out.txt at the refused upload's revision %s = %d %q, want it kept", refused.Detail.Revision.ID, code, b)
	}
	if code, b, _ := owner.getFile(ws, "out.txt", ""); code != http.StatusOK || string(b) != "one\n" {
		t.Errorf("head out.txt = %d %q, want the first upload's", code, b)
	}
	// A path the other did not change commits on the newer head.
	code, r2, body := owner.putFile(ws, "notes/other.txt", []byte("x\n"), head)
	if code != http.StatusCreated || r2.Parent != r1.ID {
		t.Errorf("upload of another path on %s = %d %s, want 201 rebased on %s", head, code, body, r1.ID)
	}
}

// TestWorkspaceS3 is TestWorkspaceRun's run on the S3 store: SeaweedFS on
// loopback, the scheduler its only client. The run charts on one node and
// reads the chart on the other through presigned URLs, the chart
// downloads byte-equal, and the store's secret key is nowhere a node or a
// sandbox can see: not in an assignment, the agents' flags, environment
// or data, the sandbox's environment or files. (The access key's id is in
// every presigned URL, by S3's design: it names the key, it is no
// credential; it must still not be anywhere else.)
func TestWorkspaceS3(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	s3 := blobtest.StartS3(t)
	creds := filepath.Join(t.TempDir(), "s3-credentials")
	if err := os.WriteFile(creds, []byte(s3.AccessKey+"\n"+s3.SecretKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := &fleet{schedArgs: []string{"--blob-store", "s3://" + s3.Bucket + "/" + s3.Prefix + "?endpoint=" + s3.Endpoint + "&secure=false&credentials-file=" + creds}}
	startSchedulers(t, f, 1)
	a := startNamedAgent(t, f, "ws-s3-a")
	b := startNamedAgent(t, f, "ws-s3-b")
	sched := newClient(t, f.urls())
	_, owner, ws := ownerWithWorkspace(t, f, "s3")
	_, _, _, _, _, wrote := chartRun(t, sched, owner, ws)
	code, png, _ := owner.getFile(ws, "chart.png", "")
	if sum := sha256.Sum256(png); code != http.StatusOK || hex.EncodeToString(sum[:]) != wrote {
		t.Fatalf("GET chart.png = %d, %d bytes of digest %x; want digest %s", code, len(png), sum, wrote)
	}

	// A step that looks for the keys inside its sandbox (each spelled in
	// two halves, so that its own arguments do not hold them), while the
	// test reads its assignment as its node.
	half := func(s string) (string, string) { return s[:len(s)/2], s[len(s)/2:] }
	sk1, sk2 := half(s3.SecretKey)
	ak1, ak2 := half(s3.AccessKey)
	probe := `s="` + sk1 + `"; s="${s}` + sk2 + `"; k="` + ak1 + `"; k="${k}` + ak2 + `"; ` +
		`env | grep -F -e "$s" -e "$k" && echo FOUND-ENV; ` +
		`grep -rlsF -e "$s" -e "$k" / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev && echo FOUND-FILE; ` +
		`sleep 4; echo probed`
	probeRun := owner.startRun(ws, map[string]any{"image": "base", "args": []string{"sh", "-c", probe}, "cpu": 0.5, "memory": "128Mi"})
	st := probeRun.Steps[0]
	var running api.Step
	var err error
	waitFor(t, 2*time.Minute, "the probe running", func() bool {
		running, err = sched.Step(t.Context(), st.ID)
		return err == nil && running.State == "running"
	})
	agentClient := newClientAs(t, f.urls(), pki.RoleAgent, running.Node)
	as, err := agentClient.Assignments(t.Context(), cluster.NodeID(running.Node), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	assignment, _ := json.Marshal(as)
	if !bytes.Contains(assignment, []byte(st.ID)) || !bytes.Contains(assignment, []byte("X-Amz-Signature")) {
		t.Fatalf("assignments of %s %s: want the probe's, with presigned URLs", running.Node, assignment)
	}
	if bytes.Contains(assignment, []byte(s3.SecretKey)) {
		t.Errorf("an assignment holds the store's secret key")
	}
	var final api.Step
	waitFor(t, 2*time.Minute, "the probe to end", func() bool {
		final, err = sched.Step(t.Context(), st.ID)
		return err == nil && isTerminal(final.State)
	})
	out := string(stdout(t, owner.openStream(st.ID, 0).untilExit(), 1))
	if final.State != "exited" || !strings.Contains(out, "probed") || strings.Contains(out, "FOUND") {
		t.Errorf("probe %s %+v printed %q: want it to find neither key in its environment or files", final.State, final.ExitCode, out)
	}
	for _, ag := range []agentInfo{a, b} {
		pid := agentPID(t, f, ag.id)
		for _, file := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + file)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(b, []byte(s3.SecretKey)) || bytes.Contains(b, []byte(s3.AccessKey)) {
				t.Errorf("agent %s's %s holds a store key", ag.id, file)
			}
		}
		if hits := grepTree(t, ag.dataDir, s3.SecretKey, s3.AccessKey); len(hits) > 0 {
			t.Errorf("agent %s's data holds a store key in %v", ag.id, hits)
		}
	}
}

// newClientAs is a scheduler client with the identity role/name.
func newClientAs(t *testing.T, urls string, role pki.Role, name string) *client.Client {
	t.Helper()
	c, err := client.New(urls, client.Options{RetryFor: 20 * time.Second, TLS: source(t, role, name)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// agentPID is the pid of node id's agentd.
func agentPID(t *testing.T, f *fleet, id string) int {
	t.Helper()
	for _, a := range f.agents {
		if strings.HasSuffix(a.name, " "+id) {
			return a.cmd.Process.Pid
		}
	}
	t.Fatalf("no agent %s", id)
	return 0
}

// grepTree returns the files under dir that hold any of needles (files
// it cannot read, such as sockets, are skipped).
func grepTree(t *testing.T, dir string, needles ...string) []string {
	t.Helper()
	var hits []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		for _, n := range needles {
			if bytes.Contains(b, []byte(n)) {
				hits = append(hits, p)
				break
			}
		}
		return nil
	})
	return hits
}

// confinementAttacks tries to read host files through the files API of
// the real stack: paths that climb out, encoded and double-encoded, NUL,
// control characters, overlong ones, and symlinks a step plants that
// point at host files. Every one is refused or served as the link
// itself, never a host file.
func confinementAttacks(t *testing.T, owner *gwClient, ws string) {
	t.Helper()
	hostFile, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	op := owner.startRun(ws, map[string]any{"image": "base", "cpu": 0.5, "memory": "128Mi", "args": []string{"sh", "-c",
		"cd /workspace && ln -s /etc/passwd abs-link && ln -s ../../../../etc/passwd up-link && ln -s sales.csv inside-link && mkdir -p d && ln -s .. d/parent"}})
	done := owner.waitRun(op.ID, 2*time.Minute)
	if done.State != "succeeded" {
		t.Fatalf("the symlink step's run %+v, want succeeded", done)
	}
	var tree []api.TreeEntry
	owner.must(http.StatusOK, http.MethodGet, "/v1/workspaces/"+ws+"/tree", nil, &tree)
	for _, e := range tree {
		if e.Type == "symlink" && (strings.HasPrefix(e.Target, "/") || strings.HasPrefix(e.Target, "../../")) {
			t.Errorf("the stored tree holds %+v, a symlink out of the workspace", e)
		}
	}
	long := strings.Repeat("a", 300)
	attacks := []string{
		"../../../../etc/passwd", "%2e%2e/%2e%2e/%2e%2e/etc/passwd", "%252e%252e/%252e%252e/etc/passwd",
		"..%2f..%2f..%2fetc%2fpasswd", "%2fetc%2fpasswd", "/etc/passwd", "a%00b", "a%0ab", "a%5c..%5cb",
		long, strings.Repeat("d/", 600) + "x",
		"abs-link", "up-link", "d/parent/../../etc/passwd", "d/parent/abs-link", "inside-link/../../etc/passwd",
	}
	for _, a := range attacks {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, owner.g.site+"/v1/workspaces/"+ws+"/files/"+a, nil)
		if err != nil {
			continue // a URL Go refuses to build never reaches the gateway
		}
		owner.auth(req)
		resp, err := owner.http.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", a, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if bytes.Contains(b, hostFile[:min(len(hostFile), 32)]) || bytes.Contains(b, []byte("root:x:0:0")) {
			t.Errorf("GET files/%s = %d: a host file: %.80q", a, resp.StatusCode, b)
		}
		if resp.StatusCode == http.StatusOK && a != "inside-link" {
			t.Errorf("GET files/%.60s = 200 %.80q, want it refused", a, b)
		}
	}
	// The link inside is served as the link, not as the file it names.
	code, b, h := owner.getFile(ws, "inside-link", "")
	csv, _ := os.ReadFile("../../scripts/demo/sales.csv")
	if code == http.StatusOK && bytes.Equal(b, csv) {
		t.Errorf("GET inside-link served the file it points at (headers %v), want the link itself", h)
	}
}
