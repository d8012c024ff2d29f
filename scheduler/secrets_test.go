package scheduler

import (
	"bytes"
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/envseal"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// TestSecretsTicketOnlyInAssignment submits a step whose secrets carry a
// ticket, then reads every answer, the snapshot document, the data dir
// and the logs: the ticket is only in the assignment of the step's node,
// and the names and gateway are shown everywhere else.
func TestSecretsTicketOnlyInAssignment(t *testing.T) {
	key, err := envseal.Generate()
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	c := envCluster(t, 1, key, logs)
	cl := c.client()
	ctx := t.Context()
	ticket := testenv.Marker()
	newAgent(t, cl, "n1", 8, 64*gib)
	m := c.waitLeader()

	req := api.StepRequest{ID: "sec-1", Image: "base", Args: []string{"true"}, CPU: 0.5, MemoryBytes: gib,
		Env:     []string{"PLAIN=x"},
		Secrets: &api.StepSecrets{Names: []string{"API_TOKEN", "DB_PASSWORD"}, Gateway: "https://gw.example:7301", Ticket: ticket}}
	if code, b := c.post(m.url()+"/v1/steps", req); code != http.StatusCreated || testenv.Holds(b, ticket) {
		t.Fatalf("POST /v1/steps = %d %s, want 201 without the ticket", code, b)
	}
	waitStep(t, cl, "sec-1", "placed", stateIs("placed"))

	as, err := cl.Assignments(ctx, "n1", 0, 0)
	if err != nil || len(as.Steps) != 1 {
		t.Fatalf("Assignments() = %+v, %v; want one step", as, err)
	}
	got := as.Steps[0].Spec.Secrets
	if got == nil || got.Ticket != ticket || len(got.SealedTicket) > 0 || got.Error != "" ||
		!slices.Equal(got.Names, []string{"API_TOKEN", "DB_PASSWORD"}) || got.Gateway != "https://gw.example:7301" {
		t.Errorf("assignment secrets = %+v, want the names, the gateway and the opened ticket only", got)
	}

	st, err := cl.Step(ctx, "sec-1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Spec.Secrets == nil || st.Spec.Secrets.Ticket != "" || !slices.Equal(st.Spec.Secrets.Names, []string{"API_TOKEN", "DB_PASSWORD"}) {
		t.Errorf("Step().Spec.Secrets = %+v, want the names without the ticket", st.Spec.Secrets)
	}
	waitFor(t, "a snapshot", func() bool {
		snaps, _ := filepath.Glob(filepath.Join(m.srv.cfg.DataDir, "snapshots", "*", "state.bin"))
		return len(snaps) > 0
	})
	var answers bytes.Buffer
	for _, path := range []string{
		"/v1/snapshot", "/v1/nodes", "/v1/nodes/n1", "/v1/steps", "/v1/steps?node=n1", "/v1/steps/sec-1",
		"/v1/steps/sec-1?index=1&wait=1ms", "/v1/audit",
	} {
		answers.Write(c.get(m.url() + path))
	}
	if testenv.Holds(answers.Bytes(), ticket) {
		t.Errorf("a read route returned the ticket:\n%s", answers.Bytes())
	}
	if !bytes.Contains(answers.Bytes(), []byte(`"names":["API_TOKEN","DB_PASSWORD"]`)) {
		t.Errorf("no read route names the secrets")
	}
	for _, path := range testenv.FilesHolding(t, m.srv.cfg.DataDir, ticket) {
		t.Errorf("%s holds the ticket", path)
	}
	if testenv.Holds(logs.bytes(), ticket) {
		t.Errorf("a log line holds the ticket")
	}

	// A snapshot document with the ticket in the clear is not restored.
	snap, err := cl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var d snapshotData
	if err := json.Unmarshal(snap, &d); err != nil || len(d.Steps) != 1 || d.Steps[0].Spec.Secrets == nil {
		t.Fatalf("snapshot = %s, %v; want one step with secrets", snap, err)
	}
	d.Steps[0].Spec.Secrets.Ticket = "t"
	doc, _ := json.Marshal(d)
	if err := cl.RestoreSnapshot(ctx, doc); !client.IsCode(err, api.CodeBadRequest) || !strings.Contains(err.Error(), "secrets.ticket") {
		t.Errorf("RestoreSnapshot(plaintext ticket) = %v, want bad_request naming secrets.ticket", err)
	}
}

// TestSecretsRefused: the secrets of a request are checked by field.
func TestSecretsRefused(t *testing.T) {
	key, err := envseal.Generate()
	if err != nil {
		t.Fatal(err)
	}
	c := envCluster(t, 1, key, &logBuffer{})
	cl := c.client()
	ok := func() *api.StepSecrets {
		return &api.StepSecrets{Names: []string{"K"}, Gateway: "https://127.0.0.1:7301", Ticket: "t"}
	}
	many := make([]string, cluster.MaxStepSecrets+1)
	for i := range many {
		many[i] = "K" + strings.Repeat("x", i)
	}
	for _, tc := range []struct {
		name    string
		mod     func(r *api.StepRequest)
		wantMsg string
	}{
		{"no ticket", func(r *api.StepRequest) { r.Secrets.Ticket = "" }, "secrets.ticket"},
		{"long ticket", func(r *api.StepRequest) { r.Secrets.Ticket = strings.Repeat("a", cluster.MaxTicketBytes+1) }, "secrets.ticket"},
		{"http gateway", func(r *api.StepRequest) { r.Secrets.Gateway = "http://127.0.0.1:7301" }, "https://"},
		{"no names", func(r *api.StepRequest) { r.Secrets.Names = nil }, "no names"},
		{"bad name", func(r *api.StepRequest) { r.Secrets.Names = []string{"A=B"} }, "secrets name 0"},
		{"twice", func(r *api.StepRequest) { r.Secrets.Names = []string{"K", "K"} }, "twice"},
		{"too many", func(r *api.StepRequest) { r.Secrets.Names = many }, "at most 32"},
		{"env too", func(r *api.StepRequest) { r.Env = []string{"K=v"} }, "names a variable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := api.StepRequest{ID: "sec-bad", Image: "base", Args: []string{"true"}, CPU: 0.5, MemoryBytes: gib, Secrets: ok()}
			tc.mod(&r)
			_, err := cl.SubmitStep(t.Context(), r)
			if !client.IsCode(err, api.CodeBadRequest) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("SubmitStep() = %v, want bad_request naming %q", err, tc.wantMsg)
			}
		})
	}
}
