package scheduler

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// TestServerBadRequests sends requests a member must refuse, and checks
// the status, the error code and that the message names what is wrong.
func TestServerBadRequests(t *testing.T) {
	c := newServerCluster(t, 1, nil)
	cl := c.client()
	newAgent(t, cl, "n1", 4, 8*gib)
	if _, err := cl.SubmitStep(t.Context(), api.StepRequest{ID: "taken", Image: "base", Args: []string{"true"}, CPU: 64, MemoryBytes: gib}); err != nil {
		t.Fatal(err)
	}
	const okStep = `{"image":"base","args":["true"],"cpu":1,"memory_bytes":1073741824`
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code, msg                string
	}{
		{"malformed json", "POST", "/v1/steps", `{"image":"base",`, 400, api.CodeBadRequest, "malformed JSON"},
		{"syntax error", "POST", "/v1/steps", `{"image" "base"}`, 400, api.CodeBadRequest, "malformed JSON at byte offset"},
		{"empty body", "POST", "/v1/steps", ``, 400, api.CodeBadRequest, "empty request body"},
		{"not an object", "POST", "/v1/steps", `[1,2]`, 400, api.CodeBadRequest, "want a JSON object"},
		{"unknown field", "POST", "/v1/steps", okStep + `,"bogus":1}`, 400, api.CodeBadRequest, `unknown field "bogus"`},
		{"trailing data", "POST", "/v1/steps", okStep + `}{}`, 400, api.CodeBadRequest, "after the object"},
		{"wrong type", "POST", "/v1/steps", `{"cpu":"lots"}`, 400, api.CodeBadRequest, `field "cpu": want a number`},
		{"negative cpu", "POST", "/v1/steps", `{"image":"base","args":["true"],"cpu":-1,"memory_bytes":1073741824}`, 400, api.CodeBadRequest, `field "cpu"`},
		{"negative memory", "POST", "/v1/steps", `{"image":"base","args":["true"],"cpu":1,"memory_bytes":-5}`, 400, api.CodeBadRequest, `field "memory_bytes": -5 is negative`},
		{"negative pids", "POST", "/v1/steps", okStep + `,"pids":-1}`, 400, api.CodeBadRequest, `field "pids"`},
		{"bad timeout", "POST", "/v1/steps", okStep + `,"timeout":"soon"}`, 400, api.CodeBadRequest, "duration"},
		{"negative timeout", "POST", "/v1/steps", okStep + `,"timeout":"-1s"}`, 400, api.CodeBadRequest, `field "timeout"`},
		{"no image", "POST", "/v1/steps", `{"args":["true"],"cpu":1,"memory_bytes":1073741824}`, 400, api.CodeBadRequest, "empty image"},
		{"bad id", "POST", "/v1/steps", okStep + `,"id":"No Way"}`, 400, api.CodeBadRequest, `field "id"`},
		{"duplicate id", "POST", "/v1/steps", okStep + `,"id":"taken"}`, 409, api.CodeConflict, "already exists"},
		{"too large", "POST", "/v1/steps", `{"image":"` + strings.Repeat("x", maxBody) + `"}`, 413, api.CodeTooLarge, "over 1048576 bytes"},
		{"unknown step", "GET", "/v1/steps/nope", ``, 404, api.CodeNotFound, "step nope: not found"},
		{"cancel unknown step", "POST", "/v1/steps/nope/cancel", ``, 404, api.CodeNotFound, "step nope"},
		{"cancel terminal step", "POST", "/v1/steps/taken/cancel", ``, 200, "", ""},
		{"cancel again", "POST", "/v1/steps/taken/cancel", `{"reason":"again"}`, 200, "", ""},
		{"stream of unknown step", "GET", "/v1/steps/nope/stream-url", ``, 404, api.CodeNotFound, "step nope"},
		{"bad state filter", "GET", "/v1/steps?state=sleeping", ``, 400, api.CodeBadRequest, `state "sleeping"`},
		{"bad index", "GET", "/v1/steps/taken?index=x", ``, 400, api.CodeBadRequest, "query parameter index"},
		{"bad wait", "GET", "/v1/steps/taken?index=1&wait=forever", ``, 400, api.CodeBadRequest, "query parameter wait"},
		{"unknown node", "GET", "/v1/nodes/nope", ``, 404, api.CodeNotFound, "node nope: not found"},
		{"drain unknown node", "POST", "/v1/nodes/nope/drain", ``, 404, api.CodeNotFound, "node nope"},
		{"negative drain deadline", "POST", "/v1/nodes/n1/drain", `{"deadline":"-1m"}`, 400, api.CodeBadRequest, `field "deadline"`},
		{"register negative cpu", "POST", "/v1/agent/register",
			`{"node":"n2","address":"127.0.0.1:1","capacity":{"cpu":-2,"memory_bytes":1},"health":{"state":"ready"}}`,
			400, api.CodeBadRequest, `field "capacity.cpu"`},
		{"register negative memory", "POST", "/v1/agent/register",
			`{"node":"n2","address":"127.0.0.1:1","capacity":{"cpu":2,"memory_bytes":-1},"health":{"state":"ready"}}`,
			400, api.CodeBadRequest, `field "capacity.memory_bytes"`},
		{"register bad address", "POST", "/v1/agent/register",
			`{"node":"n2","address":"nowhere","capacity":{"cpu":2,"memory_bytes":1},"health":{"state":"ready"}}`,
			400, api.CodeBadRequest, `field "address": not an ip:port`},
		{"register bad health", "POST", "/v1/agent/register",
			`{"node":"n2","address":"127.0.0.1:1","capacity":{"cpu":2,"memory_bytes":1},"health":{"state":"fine"}}`,
			400, api.CodeBadRequest, `field "health"`},
		{"heartbeat unknown node", "POST", "/v1/agent/heartbeat", `{"node":"ghost","health":{"state":"ready"}}`, 404, api.CodeNotFound, "register it first"},
		{"heartbeat unknown field", "POST", "/v1/agent/heartbeat", `{"node":"n1","health":{"state":"ready"},"cpu":1}`, 400, api.CodeBadRequest, `unknown field "cpu"`},
		{"assignments without node", "GET", "/v1/agent/assignments", ``, 400, api.CodeBadRequest, "query parameter node"},
		{"assignments unknown node", "GET", "/v1/agent/assignments?node=ghost", ``, 404, api.CodeNotFound, "node ghost"},
		{"phase unknown step", "POST", "/v1/agent/steps/nope/phase", `{"node":"n1","attempt":1,"state":"running"}`, 404, api.CodeNotFound, "step nope"},
		{"phase bad state", "POST", "/v1/agent/steps/taken/phase", `{"node":"n1","attempt":1,"state":"exited"}`, 400, api.CodeBadRequest, `field "state"`},
		{"phase other step", "POST", "/v1/agent/steps/taken/phase", `{"step":"other","node":"n1","attempt":1}`, 400, api.CodeBadRequest, `field "step"`},
		{"phase zero attempt", "POST", "/v1/agent/steps/taken/phase", `{"node":"n1","attempt":0}`, 400, api.CodeBadRequest, `field "attempt"`},
		{"phase of queued step", "POST", "/v1/agent/steps/taken/phase", `{"node":"n1","attempt":1,"state":"running"}`, 409, api.CodeConflict, "taken"},
		{"exit unknown step", "POST", "/v1/agent/steps/nope/exit",
			`{"node":"n1","attempt":1,"record":{"state":"exited","exit_code":0,"terminated_by":"exit"}}`, 404, api.CodeNotFound, "step nope"},
		{"exit bad record", "POST", "/v1/agent/steps/taken/exit",
			`{"node":"n1","attempt":1,"record":{"state":"vanished","terminated_by":"exit"}}`, 400, api.CodeBadRequest, `field "record"`},
		{"confirm without cancel", "POST", "/v1/agent/steps/nope/cancel-confirmed", `{"node":"n1","attempt":1}`, 404, api.CodeNotFound, "step nope"},
		{"join without id", "POST", "/v1/members/join", `{"raft_address":"127.0.0.1:1","http_address":"127.0.0.1:2"}`, 400, api.CodeBadRequest, `field "id"`},
		{"join wildcard", "POST", "/v1/members/join", `{"id":"x","raft_address":"0.0.0.0:1","http_address":"127.0.0.1:2"}`, 400, api.CodeBadRequest, `field "raft_address"`},
		{"remove unknown member", "POST", "/v1/members/remove", `{"id":"nobody"}`, 404, api.CodeNotFound, "member nobody"},
		{"restore garbage", "POST", "/v1/snapshot/restore", `{"version":1,"nodes":[null]}`, 400, api.CodeBadRequest, `field "nodes[0]"`},
		{"restore wrong version", "POST", "/v1/snapshot/restore", `{"version":7}`, 400, api.CodeBadRequest, `field "version"`},
		{"restore live step without node", "POST", "/v1/snapshot/restore",
			`{"version":1,"steps":[{"id":"s1","state":"running","node":"gone","attempts":1,"spec":{"image":"b","args":["x"],"cpu":1,"memory_bytes":1}}]}`,
			400, api.CodeBadRequest, "which the document lacks"},
		{"wrong method", "DELETE", "/v1/steps", ``, 405, api.CodeMethodNotAllowed, "use GET or POST"},
		{"no route", "GET", "/v2/steps", ``, 404, api.CodeNotFound, "no route"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tc.method, c.members[0].url()+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := (&http.Client{Transport: c.transport}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("%s %s = %d %s, want %d", tc.method, tc.path, resp.StatusCode, b, tc.status)
			}
			if tc.code == "" {
				return
			}
			var e api.Error
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("%s %s: error body %s: %v", tc.method, tc.path, b, err)
			}
			if e.Detail.Code != tc.code || !strings.Contains(e.Detail.Message, tc.msg) {
				t.Errorf("%s %s = %s: %q, want %s with %q", tc.method, tc.path, e.Detail.Code, e.Detail.Message, tc.code, tc.msg)
			}
		})
	}
}

// decodeRequest runs decode on body as the handler of a POST would, and
// checks that a refusal is a 4xx error document.
func decodeRequest[T any](t *testing.T, body []byte, decode func(http.ResponseWriter, *http.Request) (T, error)) (T, bool) {
	t.Helper()
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	v, err := decode(w, r)
	if err == nil {
		return v, true
	}
	e := errorOf(err)
	if e.status < 400 || e.status >= 500 || e.msg == "" {
		t.Fatalf("decode(%q) = %d %q, want a 4xx with a message", body, e.status, e.msg)
	}
	return v, false
}

func FuzzDecodeStepRequest(f *testing.F) {
	for _, seed := range []string{
		`{"image":"base","args":["true"],"cpu":1,"memory_bytes":1073741824}`,
		`{"id":"s1","image":"python","args":["python3","-c","print(1)"],"env":["A=b"],"cpu":0.5,"memory_bytes":67108864,"pids":64,"timeout":"30s","workspace":"w","no_internet":true,"tty":true,"idempotent":true}`,
		`{"image":"base","args":["true"],"cpu":-1,"memory_bytes":1}`,
		`{"image":"base","args":["true"],"cpu":1e309,"memory_bytes":1}`,
		`{"image":"base","timeout":"-5m"}`,
		`{"env":["=x"]}`,
		`{"bogus":true}`,
		`{"image":"base"}{}`,
		`[]`, `null`, ``, `{`, `"x"`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		decode := func(w http.ResponseWriter, r *http.Request) (cluster.StepSpec, error) {
			_, spec, err := decodeStepRequest(w, r)
			return spec, err
		}
		spec, ok := decodeRequest(t, body, decode)
		if !ok {
			return
		}
		if err := spec.Validate(); err != nil {
			t.Fatalf("decodeStepRequest(%q) accepted an invalid spec: %v", body, err)
		}
		// What is accepted survives the public form's round trip.
		b, err := json.Marshal(requestOf(spec))
		if err != nil {
			t.Fatal(err)
		}
		again, ok := decodeRequest(t, b, decode)
		if !ok || again.Timeout != spec.Timeout || again.CPU != spec.CPU || again.MemoryBytes != spec.MemoryBytes {
			t.Fatalf("round trip of %q: %+v, want %+v", body, again, spec)
		}
	})
}

func FuzzDecodeAgentBody(f *testing.F) {
	for _, seed := range []string{
		`{"node":"n1","health":{"state":"ready"},"running":[{"step":"s1","attempt":1}]}`,
		`{"node":"n1","health":{"state":"degraded","reasons":["no ebpf"]}}`,
		`{"node":"n1","attempt":1,"record":{"step":"s1","state":"exited","exit_code":0,"terminated_by":"exit","phases":{"exited":"2026-03-01T12:00:00Z"}}}`,
		`{"node":"n1","address":"10.0.0.1:7200","capacity":{"cpu":4,"memory_bytes":8589934592},"health":{"state":"ready"}}`,
		`{"node":"n1","address":"10.0.0.1:7200","capacity":{"cpu":-4,"memory_bytes":8589934592},"health":{"state":"ready"}}`,
		`{"node":"n1","attempt":1,"state":"running","phases":{"started":"2026-03-01T12:00:00Z"}}`,
		`{"node":"","health":{"state":"ready"},"running":[{"attempt":0}]}`,
		`{"address":"not an address"}`,
		`{"at":"yesterday"}`,
		``, `{}`, `{"node":1}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if hb, ok := decodeRequest(t, body, decodeHeartbeat); ok {
			if hb.Node == "" || validateHealth(hb.Health) != nil {
				t.Fatalf("decodeHeartbeat(%q) accepted %+v", body, hb)
			}
		}
		if x, ok := decodeRequest(t, body, decodeStepExit); ok {
			if x.Node == "" || x.Attempt < 1 || validateExit(&x.Record) != nil {
				t.Fatalf("decodeStepExit(%q) accepted %+v", body, x)
			}
		}
		if reg, ok := decodeRequest(t, body, decodeRegister); ok {
			if !reg.Address.IsValid() || !(reg.Capacity.CPU > 0) || reg.Capacity.MemoryBytes <= 0 {
				t.Fatalf("decodeRegister(%q) accepted %+v", body, reg)
			}
		}
		decodeRequest(t, body, decodeStepPhase)
	})
}
