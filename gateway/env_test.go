package gateway

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/api"
)

// TestRunRecordsHoldNoEnvValues: a run's environment values go to the
// scheduler to be sealed; the run record keeps the sealed entries, the
// Driver submits them with each step, and no answer or record holds a
// value.
func TestRunRecordsHoldNoEnvValues(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	const marker = "envmark-gateway-5f0c2a"
	var op api.Operation
	f.do("key-editor", "POST", "/v1/runs", `{"workspace":"ws-main","steps":[`+
		`{"args":["sh","-c","echo $SECRET"],"env":["SECRET=`+marker+`","MODE=fast"]},`+
		`{"args":["true"]},`+
		`{"args":["sh","-c","echo $LATER"],"env":["LATER=`+marker+`-later"]}]}`, 201, &op)
	for i := range 3 {
		id := stepID(op.ID, i)
		f.sched.Start(id)
		f.sched.Exit(id, 0)
		f.g.Driver().Pass(ctx)
	}
	if got := f.getRun(op.ID); got.State != api.RunSucceeded {
		t.Fatalf("run = %s, want succeeded", got.State)
	}
	for i, want := range [][]string{{"SECRET=" + marker, "MODE=fast"}, nil, {"LATER=" + marker + "-later"}} {
		if got := f.sched.Env(stepID(op.ID, i)); !slices.Equal(got, want) {
			t.Errorf("step %d reached the scheduler with env %q, want %q", i, got, want)
		}
	}

	var seen bytes.Buffer
	for _, kind := range []string{kindRun, kindRunLive, kindSession, kindWorkspace} {
		recs, err := f.store.ListRecords(ctx, kind, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			seen.Write(r.Value)
		}
	}
	entries, err := f.store.Audit(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		seen.Write(e.Entry)
	}
	if strings.Contains(seen.String(), marker) {
		t.Errorf("a record holds an environment value:\n%s", seen.String())
	}
	var run runRecord
	if _, err := getRecord(ctx, f.store, kindRun, op.ID, &run); err != nil {
		t.Fatal(err)
	}
	if s := run.Steps[0].Spec; len(s.Env) > 0 || len(s.SealedEnv) != 2 || s.SealedEnv[0].Name != "SECRET" {
		t.Errorf("run record step 0 spec: env %q, sealed_env %+v; want two sealed entries only", s.Env, s.SealedEnv)
	}

	var answers bytes.Buffer
	for _, path := range []string{"/v1/runs", "/v1/runs/" + op.ID, "/v1/steps/" + stepID(op.ID, 0), "/v1/steps/" + stepID(op.ID, 2), "/v1/audit"} {
		answers.Write(f.do("owner", "GET", path, "", 200, nil).Body.Bytes())
	}
	if strings.Contains(answers.String(), marker) {
		t.Errorf("an answer holds an environment value:\n%s", answers.String())
	}

	// A refused entry is not quoted back.
	w := f.do("key-editor", "POST", "/v1/runs", `{"workspace":"ws-main","steps":[{"args":["x"],"env":["1BAD=`+marker+`"]}]}`, 400, nil)
	if strings.Contains(w.Body.String(), marker) || !strings.Contains(w.Body.String(), "steps[0].env[0]") {
		t.Errorf("refusal = %s, want it to name steps[0].env[0] without the value", w.Body)
	}
}
