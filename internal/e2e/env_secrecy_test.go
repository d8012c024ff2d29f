package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// Where Rodon's containerd and runsc keep their files (etc/containerd.toml,
// scripts/install-deps): its root, its state, runsc's root and the shim
// sockets, and the temporary process specs of gVisor's shim (os.TempDir,
// as containerd runs without XDG_RUNTIME_DIR).
var runtimeDirs = []string{"/var/lib/rodon/containerd", "/run/rodon/containerd", "/run/containerd"}

const containerdLog = "/var/log/rodon/containerd.log"

// TestEnvValuesNeverLeave is issue 9's "Done means 3": steps whose
// environment holds a random marker, submitted with schedctl and through
// the gateway (a run of two steps, the second submitted later by the
// gateway's driver from its run record), see the value; and then no read
// route of the scheduler, the gateway or the agent, no schedctl output
// (tables and -o json), no snapshot file, no file in any data dir or in
// containerd's and runsc's directories, and no log line of any daemon or of
// containerd holds it. The one place it may be is the steps' own output
// (their output logs on the agent, and what schedctl logs and the streams
// print): the steps print it, and masking printed values is another issue.
//
// Daemons run as the other e2e tests do, without TLS (the harness has no
// TLS flags yet); the scheduler is given the env key made by `scheduler
// tls init` with --env-key.
func TestEnvValuesNeverLeave(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	marker := testenv.Marker()

	f := &fleet{}
	schedDir := startEnvScheduler(t, f)
	agent := startAgentLogging(t, f, "env-node-k4", "debug")
	const ownerEmail = "owner@example.com"
	g := startGateway(t, f, ownerEmail)
	password := g.ownerPassword(t, ownerEmail)

	// With schedctl: the step prints what it sees.
	code, out, errOut := schedctl(t, f, "run", "--id", "env-cli", "--cpu", "0.2", "--memory", "128m",
		"--env", "SECRET="+marker, "--env", "MODE=plain", "--", "sh", "-c", `echo "seen:$SECRET:$MODE"`)
	if code != 0 || out != "seen:"+marker+":plain\n" {
		t.Fatalf("schedctl run = %d, stdout %q, stderr %q; want the step to print the value", code, out, errOut)
	}
	if testenv.Holds([]byte(errOut), marker) {
		t.Errorf("schedctl run's own messages (stderr) hold the value: %q", errOut)
	}

	// Through the gateway: a run of two steps, the second submitted by the
	// driver from the run record after the first exited.
	rec := &recorder{}
	owner := newGWClient(t, g, rec)
	owner.signIn(ownerEmail, password)
	var ws struct {
		ID string `json:"id"`
	}
	owner.must(http.StatusCreated, http.MethodPost, "/v1/workspaces", map[string]string{"name": "secrets"}, &ws)
	op := owner.startRun(ws.ID,
		map[string]any{"args": []string{"sh", "-c", `echo "first:$SECRET"`}, "env": []string{"SECRET=" + marker}, "cpu": 0.2, "memory": "128Mi"},
		map[string]any{"args": []string{"sh", "-c", `echo "second:$LATER"`}, "env": []string{"LATER=" + marker + "-later"}, "cpu": 0.2, "memory": "128Mi"},
	)
	done := owner.waitRun(op.ID, 3*time.Minute)
	if done.State != "succeeded" || len(done.Steps) != 2 {
		t.Fatalf("run %+v, want succeeded with 2 steps", done)
	}
	stepIDs := []string{"env-cli", done.Steps[0].ID, done.Steps[1].ID}
	for i, want := range []string{"seen:" + marker + ":plain\n", "first:" + marker + "\n", "second:" + marker + "-later\n"} {
		if code, out, errOut := schedctl(t, f, "logs", stepIDs[i]); code != 0 || out != want {
			t.Errorf("schedctl logs %s = %d %q %q, want %q: the value reached the step", stepIDs[i], code, out, errOut, want)
		}
	}
	frames := owner.openStream(done.Steps[1].ID, 0).untilExit()
	if got := string(stdout(t, frames, 1)); got != "second:"+marker+"-later\n" {
		t.Errorf("gateway stream of the second step = %q, want the value the driver submitted", got)
	}
	// Every sandbox is gone before the files are read.
	c := newClient(t, f.urls())
	waitFor(t, 60*time.Second, "the steps' cleanup", func() bool {
		for _, id := range stepIDs {
			s, err := c.Step(context.Background(), id)
			if err != nil || s.Phases.CleanedUp.IsZero() {
				return false
			}
		}
		return true
	})

	var answers bytes.Buffer
	seen := func(what string, b []byte) {
		fmt.Fprintf(&answers, "\n=== %s\n", what)
		answers.Write(b)
	}
	// The scheduler's read routes.
	sched := "https://" + f.httpAddrs[0]
	// Each route is read as the identity that may read it: records and
	// audit are the gateway's, the rest an operator's.
	asGateway, asOperator := clusterHTTP(t, pki.RoleGateway, "gateway"), clusterHTTP(t, pki.RoleOperator, operatorName)
	paths := []string{"/healthz", "/metrics", "/v1/members", "/v1/snapshot", "/v1/nodes", "/v1/nodes/" + agent.id,
		"/v1/steps", "/v1/steps?node=" + agent.id, "/v1/steps?state=exited", "/v1/audit?limit=1000"}
	for _, kind := range []string{"run", "run_live", "account", "key", "signin", "workspace", "session"} {
		paths = append(paths, "/v1/records/"+kind)
	}
	for _, id := range stepIDs {
		paths = append(paths, "/v1/steps/"+id, "/v1/steps/"+id+"/stream-url")
	}
	for _, p := range paths {
		hc := asOperator
		if strings.HasPrefix(p, "/v1/records/") || strings.HasPrefix(p, "/v1/audit") {
			hc = asGateway
		}
		seen("scheduler GET "+p, httpGet(t, hc, sched+p))
	}
	// The agent's own routes (its stream route is the step's output).
	for _, p := range []string{"/healthz", "/metrics"} {
		seen("agent GET "+p, httpGet(t, asOperator, "https://"+agent.listen+p))
	}
	// The gateway's: every read route a person can call, with the answers
	// of the writes above (the recorder kept them).
	for _, p := range []string{"/v1/me", "/v1/workspaces", "/v1/sessions", "/v1/members", "/v1/keys", "/v1/runs",
		"/v1/runs/" + op.ID, "/v1/steps/" + done.Steps[0].ID, "/v1/steps/" + done.Steps[1].ID, "/v1/audit?limit=1000"} {
		owner.must(http.StatusOK, http.MethodGet, p, nil, nil)
	}
	for _, p := range []string{"/healthz", "/metrics"} {
		seen("gateway GET "+p, httpGet(t, asOperator, g.site+p))
	}
	// Every answer the gateway gave but the stream's frames, which are
	// the step's output.
	for _, entry := range strings.Split(rec.String(), "\n=== ") {
		if !strings.HasPrefix(entry, "WS ") {
			seen("gateway answer", []byte(entry))
		}
	}
	// schedctl's listings, tables and JSON.
	for _, args := range [][]string{
		{"steps"}, {"steps", "-o", "json"}, {"nodes"}, {"nodes", "-o", "json"}, {"members"}, {"members", "-o", "json"},
		{"step", stepIDs[0]}, {"step", stepIDs[0], "-o", "json"}, {"step", stepIDs[1], "-o", "json"}, {"step", stepIDs[2], "-o", "json"},
	} {
		code, out, errOut := schedctl(t, f, args...)
		if code != 0 {
			t.Errorf("schedctl %q = %d %q", args, code, errOut)
		}
		seen("schedctl "+strings.Join(args, " "), []byte(out+errOut))
	}
	if _, out, _ := schedctl(t, f, "step", stepIDs[0]); !strings.Contains(out, "SECRET MODE") {
		t.Errorf("schedctl step %s does not name the variables:\n%s", stepIDs[0], out)
	}
	snapFile := filepath.Join(t.TempDir(), "snapshot.json")
	if code, out, errOut := schedctl(t, f, "snapshot", "save", snapFile); code != 0 {
		t.Fatalf("schedctl snapshot save = %d %q %q", code, out, errOut)
	}
	snap, err := os.ReadFile(snapFile)
	if err != nil {
		t.Fatal(err)
	}
	seen("snapshot file", snap)
	if !bytes.Contains(snap, []byte(`"sealed_env"`)) {
		t.Errorf("the snapshot holds no sealed_env: the test did not see the steps' environment")
	}
	if testenv.Holds(answers.Bytes(), marker) {
		t.Errorf("an answer or a schedctl output holds the environment value:\n%s", answers.String())
	}

	// Files: the daemons' data dirs, the workspaces, containerd's and
	// runsc's. The steps' output logs are the one place allowed.
	output := map[string]bool{}
	for _, id := range stepIDs {
		output[id+".log"] = true
	}
	var found []string
	for _, dir := range append([]string{schedDir, agent.dataDir, g.dataDir, f.wsRoot, tlsDir}, runtimeDirs...) {
		found = append(found, testenv.FilesHolding(t, dir, marker)...)
	}
	tmp, _ := filepath.Glob(filepath.Join(os.TempDir(), "runsc-process*"))
	for _, p := range tmp {
		found = append(found, testenv.FilesHolding(t, p, marker)...)
	}
	var outputLogs int
	for _, p := range found {
		if strings.HasPrefix(p, agent.dataDir+string(filepath.Separator)) && output[filepath.Base(p)] {
			outputLogs++
			continue
		}
		t.Errorf("%s holds the environment value", p)
	}
	if outputLogs != len(stepIDs) {
		t.Errorf("the value is in %d step output logs, want %d (the test's grep may be broken)", outputLogs, len(stepIDs))
	}

	// Logs: every daemon's (all at debug level) and containerd's.
	for _, p := range append(append([]*proc{}, f.schedulers...), append(f.agents, g.proc)...) {
		if testenv.Holds([]byte(p.out.String()), marker) {
			t.Errorf("the log of %s holds the environment value", p.name)
		}
	}
	if b, err := os.ReadFile(containerdLog); err == nil && testenv.Holds(b, marker) {
		t.Errorf("%s holds the environment value", containerdLog)
	}
}

// httpGet reads url with hc and fails the test unless the answer is 200:
// an answer refused is no evidence that nothing leaks.
func httpGet(t *testing.T, hc *http.Client, url string) []byte {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s = %s, want 200", url, resp.Status)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return b
}

func runCmd(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	return cmd.CombinedOutput()
}

// startEnvScheduler starts one bootstrapping member, with the package's
// env key beside its certificate, logging at debug level, and returns its
// data dir.
func startEnvScheduler(t *testing.T, f *fleet) string {
	t.Helper()
	dir := t.TempDir()
	httpAddr := freePort(t)
	f.httpAddrs = append(f.httpAddrs, httpAddr)
	f.schedulers = append(f.schedulers, start(t, "scheduler m1", bin+"/scheduler", "serve", "--node-id", "m1", "--data-dir", dir,
		"--raft-addr", freePort(t), "--http-addr", httpAddr, "--node-ttl", f.ttl(), "--bootstrap",
		"--log-level", "debug", "--tls-dir", tlsArgs(t, pki.RoleMember, "m1")[1]))
	c := newClient(t, "https://"+httpAddr)
	waitFor(t, 30*time.Second, "member m1 to lead", func() bool {
		ms, err := c.Members(context.Background())
		return err == nil && len(ms) == 1 && ms[0].Leader
	})
	return dir
}
