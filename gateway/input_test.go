package gateway

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/api"
)

// TestBadInput: malformed or wrong requests get a clear 4xx naming the
// problem, and change nothing.
func TestBadInput(t *testing.T) {
	f := newFixture(t)
	big := `{"name":"` + strings.Repeat("x", maxBody) + `"}`
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"malformed", "POST", "/v1/runs", `{"workspace":`, 400, "malformed JSON"},
		{"syntax", "POST", "/v1/runs", `{"workspace" "ws-main"}`, 400, "malformed JSON at byte offset"},
		{"empty", "POST", "/v1/runs", ``, 400, "empty request body"},
		{"not an object", "POST", "/v1/runs", `[1]`, 400, "want a JSON object"},
		{"unknown field", "POST", "/v1/runs", `{"workspace":"ws-main","steps":[{"args":["x"]}],"bogus":1}`, 400, `unknown field "bogus"`},
		{"unknown step field", "POST", "/v1/runs", `{"workspace":"ws-main","steps":[{"args":["x"],"node":"n1"}]}`, 400, `unknown field "node"`},
		{"trailing data", "POST", "/v1/workspaces", `{"name":"a"} {}`, 400, "after the object"},
		{"oversized", "POST", "/v1/workspaces", big, 413, "over 1048576 bytes"},
		{"wrong type", "POST", "/v1/runs", `{"workspace":7}`, 400, `field "workspace"`},
		{"bad duration", "POST", "/v1/runs", `{"workspace":"ws-main","steps":[{"args":["x"],"timeout":"soon"}]}`, 400, `steps[0].timeout`},
		{"bad workspace id", "POST", "/v1/runs", `{"workspace":"main!","steps":[{"args":["x"]}]}`, 400, `"main!"`},
		{"no workspace", "POST", "/v1/runs", `{"workspace":"ws-nope","steps":[{"args":["x"]}]}`, 404, "no workspace ws-nope"},
		{"no steps", "POST", "/v1/runs", `{"workspace":"ws-main","steps":[]}`, 400, "want 1 to 20 steps"},
		{"no args", "POST", "/v1/runs", `{"workspace":"ws-main","steps":[{"args":[]}]}`, 400, "steps[0].args"},
		{"bad image", "POST", "/v1/runs", `{"workspace":"ws-main","steps":[{"args":["x"],"image":"ubuntu"}]}`, 400, `image "ubuntu"`},
		{"bad memory", "POST", "/v1/runs", `{"workspace":"ws-main","steps":[{"args":["x"],"memory":"lots"}]}`, 400, "steps[0].memory"},
		{"tiny memory", "POST", "/v1/runs", `{"workspace":"ws-main","steps":[{"args":["x"],"memory":"1Ki"}]}`, 400, "16Mi"},
		{"bad env", "POST", "/v1/runs", `{"workspace":"ws-main","steps":[{"args":["x"],"env":["NOVALUE"]}]}`, 400, "steps[0].env[0]"},
		{"bad cpu", "POST", "/v1/runs", `{"workspace":"ws-main","steps":[{"args":["x"],"cpu":-1}]}`, 400, "steps[0].cpu"},
		{"bad session", "POST", "/v1/runs", `{"workspace":"ws-main","session":"x","steps":[{"args":["x"]}]}`, 400, `"session"`},
		{"bad run id", "GET", "/v1/runs/run-UPPER", ``, 400, `run id "run-UPPER"`},
		{"other prefix run id", "GET", "/v1/runs/ws-main", ``, 400, `run id "ws-main"`},
		{"no run", "GET", "/v1/runs/run-aaaaaaaaaaaa", ``, 404, "no run run-aaaaaaaaaaaa"},
		{"bad step id", "GET", "/v1/steps/s-x", ``, 400, `step id "s-x"`},
		{"bad step index", "GET", "/v1/steps/s-aaaaaaaaaaaa-x", ``, 400, "not a step index"},
		{"no step", "GET", "/v1/steps/s-aaaaaaaaaaaa-0", ``, 404, "no step"},
		{"bad member id", "DELETE", "/v1/members/bob", ``, 400, `member id "bob"`},
		{"no member", "DELETE", "/v1/members/acct-aaaaaaaaaaaa", ``, 404, "no member"},
		{"bad key id", "DELETE", "/v1/keys/rk_x", ``, 400, `key id "rk_x"`},
		{"bad role", "POST", "/v1/members", `{"email":"a@b.c","password":"long enough pass","role":"god"}`, 400, `role "god"`},
		{"no role", "POST", "/v1/keys", `{"name":"k"}`, 400, `"role" is required`},
		{"short password", "POST", "/v1/members", `{"email":"a@b.c","password":"short","role":"viewer"}`, 400, `"password"`},
		{"bad email", "POST", "/v1/members", `{"email":"nobody","password":"long enough pass","role":"viewer"}`, 400, `"email"`},
		{"empty patch", "PATCH", "/v1/members/acct-aaaaaaaaaaaa", `{}`, 404, "no member"},
		{"bad query workspace", "GET", "/v1/runs?workspace=x", ``, 400, "query parameter workspace"},
		{"bad query state", "GET", "/v1/runs?state=done", ``, 400, "query parameter state"},
		{"bad audit after", "GET", "/v1/audit?after=-1", ``, 400, "query parameter after"},
		{"bad audit limit", "GET", "/v1/audit?limit=0", ``, 400, "query parameter limit"},
		{"bad stream from", "GET", "/v1/steps/s-x/stream?from=x", ``, 400, "step id"},
		{"no route", "GET", "/v1/bogus", ``, 404, "no route GET /v1/bogus"},
		{"wrong method", "PUT", "/v1/runs", ``, 405, "method not allowed"},
		{"empty workspace name", "POST", "/v1/workspaces", `{"name":""}`, 400, `field "name"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs, _ := f.store.ListRecords(t.Context(), kindRun, "")
			w := f.serve(f.request(f.creds["owner"], tc.method, tc.path, tc.body))
			var e api.Error
			json.Unmarshal(w.Body.Bytes(), &e)
			if w.Code != tc.status || !strings.Contains(e.Detail.Message, tc.want) {
				t.Errorf("%s %s = %d %s, want %d naming %q", tc.method, tc.path, w.Code, w.Body, tc.status, tc.want)
			}
			if after, _ := f.store.ListRecords(t.Context(), kindRun, ""); len(after) != len(runs) {
				t.Errorf("a refused request created a run")
			}
		})
	}
}

// The fuzz targets check that the strict decoder never panics and that
// what it accepts is one object without unknown fields.

func FuzzDecodeRunRequest(f *testing.F) {
	for _, s := range []string{`{"workspace":"ws-main","steps":[{"args":["x"],"memory":"1Gi","timeout":"1s"}]}`, `{}`, `[`, `{"steps":[{"bogus":1}]}`, `{"a":1}{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req api.RunRequest
		if err := decodeJSON(bytes.NewReader(b), &req, false); err != nil {
			if _, ok := err.(*httpError); !ok {
				t.Fatalf("decodeJSON(%q) = %T %v, want an *httpError", b, err, err)
			}
			return
		}
		for i, s := range req.Steps {
			if r, err := stepRequest(i, s); err == nil && (len(r.Args) == 0 || r.CPU <= 0 || r.MemoryBytes < 16<<20) {
				t.Fatalf("stepRequest(%+v) = %+v, nil: accepted an invalid step", s, r)
			}
		}
	})
}

func FuzzDecodeMemberRequest(f *testing.F) {
	for _, s := range []string{`{"email":"a@b.c","password":"x","role":"owner","workspaces":["ws-a"]}`, `{"role":"x"}`, `{"role":7}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req api.CreateMemberRequest
		if err := decodeJSON(bytes.NewReader(b), &req, false); err == nil && req.Role != api.RoleNone && (req.Role < api.RoleViewer || req.Role > api.RoleOwner) {
			t.Fatalf("decoded role %d out of range", req.Role)
		}
		var patch api.UpdateMemberRequest
		decodeJSON(bytes.NewReader(b), &patch, false)
	})
}

func FuzzDecodeSigninRequest(f *testing.F) {
	f.Add([]byte(`{"email":"a@b.c","password":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var req api.SignInRequest
		decodeJSON(bytes.NewReader(b), &req, false)
	})
}

func FuzzParseStepID(f *testing.F) {
	for _, s := range []string{"s-aaaaaaaaaaaa-0", "s-a-19", "s--1", "s-a-01", "s-a-20"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		run, i, err := parseStepID(id)
		if err != nil {
			return
		}
		if got := stepID(run, i); got != id {
			t.Fatalf("stepID(parseStepID(%q)) = %q", id, got)
		}
		if len(id) > 63 {
			t.Fatalf("parseStepID accepted %q, longer than the scheduler's 63", id)
		}
	})
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"512Mi", "1G", "0", "-1Ki", "9223372036854775807Gi"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// Every size field accepted is a positive size (internal/size
		// fuzzes the grammar itself).
		req, err := stepRequest(0, api.StepSpec{Args: []string{"x"}, Memory: s, WorkspaceSize: s, OutputCap: s})
		if err == nil && (req.MemoryBytes <= 0 || req.WorkspaceBytes <= 0 || req.OutputBytes <= 0) {
			t.Fatalf("stepRequest with sizes %q = memory %d, workspace %d, output %d, nil", s, req.MemoryBytes, req.WorkspaceBytes, req.OutputBytes)
		}
	})
}
