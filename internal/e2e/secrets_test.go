package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/secretbox"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// secretValue is a random 32-byte value of letters and digits.
func secretValue(t *testing.T) string {
	t.Helper()
	const alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789"
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// secretScript prints API_TOKEN as it is, in base64 and in hex, and its
// digest; writes it into the workspace; says whether OTHER_TOKEN reached
// it; and fails with the secret in its error.
const secretScript = `printf '%s\n' "$API_TOKEN"
printf '%s' "$API_TOKEN" > /workspace/planted.txt
printf 'b64:%s\n' "$(printf %s "$API_TOKEN" | base64 -w0)"
printf 'hex:%s\n' "$(printf %s "$API_TOKEN" | od -An -tx1 | tr -d ' \n')"
printf 'sum:%s\n' "$(printf %s "$API_TOKEN" | sha256sum | cut -c1-64)"
printf 'other:%s\n' "${OTHER_TOKEN:-absent}"
echo "error: token $API_TOKEN was rejected" >&2
exit 3`

// TestSecretScan is issue 17's Done means 1 and 5 on the real stack (a
// scheduler, an agent with containerd and runsc, a gateway with its root
// key outside every data dir, all over mutual TLS): a step of an agent
// naming API_TOKEN prints it (as it is, base64 and hex), writes it into a
// workspace file and puts it in an error; OTHER_TOKEN, set in the account
// but not named, never reaches it; another account's agent naming
// API_TOKEN gets nothing. Then the Raft log and a snapshot, every data
// dir, every daemon's log, every API answer (the audit and the run's
// events among them) and the stream are scanned: the value is nowhere but
// in the blob of the file the step planted, and the stream shows ***.
func TestSecretScan(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	value, other := secretValue(t), secretValue(t)

	f := &fleet{}
	schedDir := startEnvScheduler(t, f)
	agent := startAgentLogging(t, f, "secret-node-s1", "debug")
	const ownerEmail = "owner@example.com"
	g := startGateway(t, f, ownerEmail)
	rec := &recorder{}
	owner := newGWClient(t, g, rec)
	password := g.ownerPassword(t, ownerEmail)
	owner.signIn(ownerEmail, password)
	var ws api.Workspace
	owner.must(http.StatusCreated, http.MethodPost, "/v1/workspaces", map[string]string{"name": "scan"}, &ws)
	owner.must(http.StatusCreated, http.MethodPut, "/v1/secrets/API_TOKEN", api.PutSecretRequest{Value: value}, nil)
	owner.must(http.StatusCreated, http.MethodPut, "/v1/secrets/OTHER_TOKEN", api.PutSecretRequest{Value: other}, nil)

	run := startAgent(t, owner, ws.ID, "scanner", []string{"Bash", "Write"}, "secrets: [API_TOKEN]")
	st, _ := run.bash(secretScript)
	if st.State != api.StepExited || st.ExitCode == nil || *st.ExitCode != 3 {
		t.Fatalf("the secret step = %+v, want exited with 3", st)
	}
	frames := owner.openStream(st.ID, 0).untilExit()
	streamed, err := json.Marshal(frames)
	if err != nil {
		t.Fatal(err)
	}
	out := string(stdout(t, frames, 1))
	for _, want := range []string{"***\n", "b64:***\n", "hex:***\n", "sum:" + sha256Hex(value) + "\n", "other:absent\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the step's stdout %q lacks %q", out, want)
		}
	}
	if !bytes.Contains(streamed, []byte("error: token *** was rejected")) {
		t.Errorf("the stream %s does not show the error with the value masked", streamed)
	}

	// Another account's agent naming API_TOKEN gets nothing of this one's.
	cmd := exec.Command(bin+"/gateway", append([]string{"account", "create", "--account-name", "other-co", "--owner-email", "b@example.com",
		"-o", "json", "--scheduler", f.urls()}, tlsArgs(t, pki.RoleGateway, "gateway")...)...)
	var created api.CreateTenantAnswer
	if b, err := cmd.Output(); err != nil || json.Unmarshal(b, &created) != nil || created.OwnerPassword == "" {
		t.Fatalf("gateway account create = %v %s, want the new owner's password", err, b)
	}
	b := newGWClient(t, g, rec)
	b.signIn("b@example.com", created.OwnerPassword)
	var bws api.Workspace
	b.must(http.StatusCreated, http.MethodPost, "/v1/workspaces", map[string]string{"name": "b-scan"}, &bws)
	brun := startAgent(t, b, bws.ID, "thief", []string{"Bash"}, "secrets: [API_TOKEN]")
	bst, _ := brun.bash(`printf 'got:%s\n' "${API_TOKEN:-nothing}"`)
	if bst.State != api.StepFailed || bst.Cause != api.CauseSecretsUnavailable {
		t.Errorf("account B's step naming a secret only A has = %+v, want failed with cause %s", bst, api.CauseSecretsUnavailable)
	}

	// The test's own read of the file the step planted (not recorded): the
	// agent's act, and the one copy allowed.
	plain := newGWClient(t, g, &recorder{})
	plain.signIn(ownerEmail, password)
	if code, body, _ := plain.getFile(ws.ID, "planted.txt", ""); code != http.StatusOK || string(body) != value {
		t.Fatalf("GET planted.txt = %d %q, want the value the step wrote", code, body)
	}

	c := newClient(t, f.urls())
	waitFor(t, 60*time.Second, "the steps' cleanup", func() bool {
		for _, id := range []string{st.ID} {
			s, err := c.Step(context.Background(), id)
			if err != nil || s.Phases.CleanedUp.IsZero() {
				return false
			}
		}
		return true
	})

	// Every answer: the gateway's read routes (the audit and the run's
	// events among them) and every answer it gave, the scheduler's, and
	// a snapshot.
	for _, p := range []string{"/v1/me", "/v1/workspaces", "/v1/secrets", "/v1/members", "/v1/keys", "/v1/runs",
		"/v1/runs/" + run.id, "/v1/runs/" + run.id + "/events", "/v1/steps/" + st.ID, "/v1/audit?limit=1000"} {
		owner.must(http.StatusOK, http.MethodGet, p, nil, nil)
	}
	var answers bytes.Buffer
	answers.WriteString(rec.String())
	sched := "https://" + f.httpAddrs[0]
	asGateway, asOperator := clusterHTTP(t, pki.RoleGateway, "gateway"), clusterHTTP(t, pki.RoleOperator, operatorName)
	for _, p := range []string{"/v1/steps", "/v1/steps/" + st.ID, "/v1/nodes", "/v1/snapshot"} {
		answers.Write(httpGet(t, asOperator, sched+p))
	}
	for _, kind := range []string{"secret", "data_key", "secret_ticket", "run", "run_event", "account", "person"} {
		answers.Write(httpGet(t, asGateway, sched+"/v1/records/"+kind))
	}
	answers.Write(httpGet(t, asGateway, sched+"/v1/audit?limit=1000"))
	snapFile := filepath.Join(t.TempDir(), "snapshot.json")
	if code, o, e := schedctl(t, f, "snapshot", "save", snapFile); code != 0 {
		t.Fatalf("schedctl snapshot save = %d %q %q", code, o, e)
	}
	snap, err := os.ReadFile(snapFile)
	if err != nil {
		t.Fatal(err)
	}
	answers.Write(snap)
	if !bytes.Contains(answers.Bytes(), []byte("API_TOKEN")) {
		t.Errorf("no answer names API_TOKEN: the scan saw nothing of the secrets")
	}
	for _, v := range []string{value, other} {
		if testenv.Holds(answers.Bytes(), v) {
			t.Errorf("an answer, the audit, the events, a record or the snapshot holds a secret value")
		}
	}

	// Done means 2: a copy of every data dir and the snapshot, without the
	// root key, opens no secret. Every Tink keyset in them is tried as the
	// root key on every account's wrapped data key (the records the store
	// holds and the snapshot carries); the real root key opens them, so the
	// test can tell.
	var dataKeys []api.Record
	if err := json.Unmarshal(httpGet(t, asGateway, sched+"/v1/records/data_key"), &dataKeys); err != nil || len(dataKeys) == 0 {
		t.Fatalf("data_key records: %v (%d), want the account's", err, len(dataKeys))
	}
	backup := []string{snapFile}
	for _, dir := range []string{schedDir, agent.dataDir, g.dataDir} {
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				backup = append(backup, p)
			}
			return nil
		})
	}
	real, err := secretbox.LoadRoot(g.rootKey)
	if err != nil {
		t.Fatal(err)
	}
	var keysets int
	for _, p := range backup {
		root, err := secretbox.LoadRoot(p)
		if err != nil {
			continue
		}
		keysets++
		for _, rec := range dataKeys {
			var dk struct {
				Tenant  string `json:"tenant"`
				Wrapped []byte `json:"wrapped"`
			}
			json.Unmarshal(rec.Value, &dk)
			if _, err := secretbox.OpenDataKey(root, dk.Tenant, dk.Wrapped); err == nil {
				t.Errorf("the keyset in %s (a data dir or the snapshot) opens the data key of %s", p, dk.Tenant)
			}
		}
	}
	for _, rec := range dataKeys {
		var dk struct {
			Tenant  string `json:"tenant"`
			Wrapped []byte `json:"wrapped"`
		}
		json.Unmarshal(rec.Value, &dk)
		if _, err := secretbox.OpenDataKey(real, dk.Tenant, dk.Wrapped); err != nil {
			t.Errorf("the root key does not open the data key of %q: %v (the test cannot tell)", dk.Tenant, err)
		}
	}
	t.Logf("backup: %d files, %d keysets in them tried on %d data keys", len(backup), keysets, len(dataKeys))

	// Files: the daemons' data dirs (the Raft log and snapshots among
	// them), the workspaces, containerd's and runsc's. The blob of the
	// planted file is the one thing allowed: in the blob store, and in the
	// node's cache of blobs, each named by its digest.
	var found []string
	for _, dir := range append([]string{schedDir, agent.dataDir, g.dataDir, f.wsRoot, tlsDir}, runtimeDirs...) {
		found = append(found, testenv.FilesHolding(t, dir, value)...)
		found = append(found, testenv.FilesHolding(t, dir, other)...)
	}
	var planted int
	for _, p := range found {
		if b, err := os.ReadFile(p); err == nil && string(b) == value && filepath.Base(p) == sha256Hex(value) {
			if strings.HasPrefix(p, schedDir) {
				planted++
			}
			continue
		}
		t.Errorf("%s holds a secret value", p)
	}
	if planted != 1 {
		t.Errorf("the planted file's blob was found %d times in the blob store, want once (the scan may be broken)", planted)
	}
	for _, p := range append(append([]*proc{}, f.schedulers...), append(f.agents, g.proc)...) {
		if testenv.Holds([]byte(p.out.String()), value) || testenv.Holds([]byte(p.out.String()), other) {
			t.Errorf("the log of %s holds a secret value", p.name)
		}
	}
	if b, err := os.ReadFile(containerdLog); err == nil && testenv.Holds(b, value) {
		t.Errorf("%s holds the secret value", containerdLog)
	}
}

// TestRootRotation is issue 17's Done means 3: while `gateway keys
// rotate-root` runs against the live gateway's root key file, steps of an
// agent naming the secret keep running, every one gets the value (its
// digest) and none fails; afterwards the rotated key still delivers, and
// the file before the rotation opens no data key (gateway TestRotateRoot
// checks the keys themselves).
func TestRootRotation(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	value := secretValue(t)

	f := &fleet{}
	startSchedulers(t, f, 1)
	startNamedAgent(t, f, "secret-node-r1")
	const ownerEmail = "owner@example.com"
	rootKey := filepath.Join(t.TempDir(), "root-key.json")
	if out, err := exec.Command(bin+"/gateway", "keys", "init-root", "--root-key-file", rootKey).CombinedOutput(); err != nil {
		t.Fatalf("gateway keys init-root: %v\n%s", err, out)
	}
	g := startGatewayWith(t, f, ownerEmail, "--root-key-file", rootKey)
	owner := newGWClient(t, g, &recorder{})
	password := g.ownerPassword(t, ownerEmail)
	owner.signIn(ownerEmail, password)
	var ws api.Workspace
	owner.must(http.StatusCreated, http.MethodPost, "/v1/workspaces", map[string]string{"name": "rotate"}, &ws)
	owner.must(http.StatusCreated, http.MethodPut, "/v1/secrets/API_TOKEN", api.PutSecretRequest{Value: value}, nil)
	run := startAgent(t, owner, ws.ID, "rotator", []string{"Bash"}, "secrets: [API_TOKEN]")
	step := func(what string) {
		t.Helper()
		st, _ := run.bash(`printf 'sum:%s\n' "$(printf %s "$API_TOKEN" | sha256sum | cut -c1-64)"`)
		if st.State != api.StepExited || st.ExitCode == nil || *st.ExitCode != 0 {
			t.Fatalf("the step %s = %+v, want exited 0", what, st)
		}
		if out := string(stdout(t, owner.openStream(st.ID, 0).untilExit(), 1)); out != "sum:"+sha256Hex(value)+"\n" {
			t.Fatalf("the step %s printed %q, want the secret's digest", what, out)
		}
	}
	step("before the rotation")
	before, err := os.ReadFile(rootKey)
	if err != nil {
		t.Fatal(err)
	}

	rotate := exec.Command(bin+"/gateway", append([]string{"keys", "rotate-root", "--root-key-file", rootKey, "--scheduler", f.urls()},
		tlsArgs(t, pki.RoleGateway, "gateway")...)...)
	var rotateOut bytes.Buffer
	rotate.Stdout, rotate.Stderr = &rotateOut, &rotateOut
	if err := rotate.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rotate.Wait() }()
	for i := 0; ; i++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("gateway keys rotate-root: %v\n%s", err, rotateOut.String())
			}
			step("after the rotation")
			after, err := os.ReadFile(rootKey)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(before, after) {
				t.Fatalf("rotate-root left the root key file as it was:\n%s", rotateOut.String())
			}
			// The old file opens nothing: a gateway given it cannot
			// deliver the secret.
			old := filepath.Join(t.TempDir(), "old-root-key.json")
			if err := os.WriteFile(old, before, 0o600); err != nil {
				t.Fatal(err)
			}
			g2 := startGatewayWith(t, f, "", "--root-key-file", old)
			o2 := newGWClient(t, g2, &recorder{})
			o2.signIn(ownerEmail, password)
			if code, b := o2.do(http.MethodPut, "/v1/secrets/OTHER", api.PutSecretRequest{Value: "x"}, nil); code != http.StatusServiceUnavailable {
				t.Errorf("a gateway with the old root key: PUT a secret = %d %s, want 503 (its key opens no data key)", code, b)
			}
			return
		default:
		}
		if i > 50 {
			t.Fatalf("rotate-root still running after %d steps", i)
		}
		step(fmt.Sprintf("%d during the rotation", i+1))
	}
}
