package scheduler

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// TestServerBadRequests sends requests a member must refuse, and checks
// the status, the error code and that the message names what is wrong.
func TestServerBadRequests(t *testing.T) {
	c := newServerCluster(t, 1, nil)
	cl := c.client()
	newAgent(t, cl, "n1", 4, 8*gib)
	// "holder" takes the node's every core, so that "taken" waits queued.
	if _, err := cl.SubmitStep(t.Context(), api.StepRequest{ID: "holder", Image: "base", Args: []string{"true"}, CPU: 4, MemoryBytes: gib}); err != nil {
		t.Fatal(err)
	}
	waitStep(t, cl, "holder", "placed", stateIs("placed"))
	if _, err := cl.SubmitStep(t.Context(), api.StepRequest{ID: "taken", Image: "base", Args: []string{"true"}, CPU: 1, MemoryBytes: gib}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.PutRecord(t.Context(), "users", "taken", 0, json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	entry, err := cl.AppendAudit(t.Context(), json.RawMessage(`{"who":"ann"}`))
	if err != nil {
		t.Fatal(err)
	}
	const okStep = `{"image":"base","args":["true"],"cpu":1,"memory_bytes":1073741824`
	bigValue := `{"value":"` + strings.Repeat("v", maxRecordValue) + `"}`
	bigEntry := `{"entry":{"a":"` + strings.Repeat("x", maxAuditEntry) + `"}}`
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
		{"bad node", "POST", "/v1/steps", okStep + `,"node":"Bad Node"}`, 400, api.CodeBadRequest, `field "node"`},
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

		{"record bad kind", "PUT", "/v1/records/Users/x", `{"value":{}}`, 400, api.CodeBadRequest, `record kind "Users"`},
		{"record kind too long", "GET", "/v1/records/" + strings.Repeat("k", 33), ``, 400, api.CodeBadRequest, "1-32 characters"},
		{"record id with a slash", "PUT", "/v1/records/users/a%2Fb", `{"value":{}}`, 400, api.CodeBadRequest, `record id "a/b"`},
		{"record id with a control character", "GET", "/v1/records/users/a%0Ab", ``, 400, api.CodeBadRequest, "printable ASCII"},
		{"record id too long", "GET", "/v1/records/users/" + strings.Repeat("i", 201), ``, 400, api.CodeBadRequest, "at most 200"},
		{"record without value", "PUT", "/v1/records/users/x", `{"version":0}`, 400, api.CodeBadRequest, `field "value": missing`},
		{"record null value", "PUT", "/v1/records/users/x", `{"value":null}`, 400, api.CodeBadRequest, `field "value": null`},
		{"record value too large", "PUT", "/v1/records/users/x", bigValue, 400, api.CodeBadRequest, `field "value": 262146 bytes, at most 262144`},
		{"record malformed value", "PUT", "/v1/records/users/x", `{"value":{"a":}}`, 400, api.CodeBadRequest, "malformed JSON"},
		{"record unknown field", "PUT", "/v1/records/users/x", `{"value":{},"kind":"users"}`, 400, api.CodeBadRequest, `unknown field "kind"`},
		{"record negative version", "PUT", "/v1/records/users/x", `{"version":-1,"value":{}}`, 400, api.CodeBadRequest, `field "version": want an integer`},
		{"record create existing", "PUT", "/v1/records/users/taken", `{"version":0,"value":{}}`, 409, api.CodeConflict, "exists at version 1"},
		{"record stale version", "PUT", "/v1/records/users/taken", `{"version":3,"value":{}}`, 409, api.CodeConflict, "current version is 1"},
		{"record put missing with a version", "PUT", "/v1/records/users/nope", `{"version":1,"value":{}}`, 409, api.CodeConflict, "does not exist"},
		{"unknown record", "GET", "/v1/records/users/nope", ``, 404, api.CodeNotFound, "record users/nope: not found"},
		{"delete without version", "DELETE", "/v1/records/users/taken", ``, 400, api.CodeBadRequest, "query parameter version: missing"},
		{"delete version 0", "DELETE", "/v1/records/users/taken?version=0", ``, 400, api.CodeBadRequest, "query parameter version \"0\""},
		{"delete bad version", "DELETE", "/v1/records/users/taken?version=x", ``, 400, api.CodeBadRequest, "query parameter version"},
		{"delete version in the body", "DELETE", "/v1/records/users/taken", `{"version":1}`, 400, api.CodeBadRequest, "query parameter version"},
		{"delete with a body", "DELETE", "/v1/records/users/taken?version=1", `{"version":1}`, 400, api.CodeBadRequest, `unknown field "version"`},
		{"delete stale version", "DELETE", "/v1/records/users/taken?version=2", ``, 409, api.CodeConflict, "current version is 1"},
		{"delete unknown record", "DELETE", "/v1/records/users/nope?version=1", ``, 404, api.CodeNotFound, "record users/nope: not found"},
		{"post a record", "POST", "/v1/records/users/x", `{"value":{}}`, 405, api.CodeMethodNotAllowed, "use GET or PUT or DELETE"},
		{"patch a record", "PATCH", "/v1/records/users/taken", `{"value":{}}`, 405, api.CodeMethodNotAllowed, "use GET or PUT or DELETE"},
		{"put a kind", "PUT", "/v1/records/users", `{"value":{}}`, 405, api.CodeMethodNotAllowed, "use GET"},
		{"audit without entry", "POST", "/v1/audit", `{}`, 400, api.CodeBadRequest, `field "entry": missing`},
		{"audit entry not an object", "POST", "/v1/audit", `{"entry":[1]}`, 400, api.CodeBadRequest, `field "entry": want a JSON object`},
		{"audit entry too large", "POST", "/v1/audit", bigEntry, 400, api.CodeBadRequest, "at most 65536"},
		{"audit unknown field", "POST", "/v1/audit", `{"entry":{},"seq":1}`, 400, api.CodeBadRequest, `unknown field "seq"`},
		{"audit who too long", "POST", "/v1/audit", `{"entry":{},"who":"` + strings.Repeat("w", 201) + `"}`, 400, api.CodeBadRequest, `field who`},
		{"audit tenant with a control character", "POST", "/v1/audit", `{"entry":{},"tenant":"a\u0000b"}`, 400, api.CodeBadRequest, `field tenant`},
		{"audit bad since", "GET", "/v1/audit?since=yesterday", ``, 400, api.CodeBadRequest, "query parameter since"},
		{"audit bad until", "GET", "/v1/audit?until=2026-13-01T00:00:00Z", ``, 400, api.CodeBadRequest, "query parameter until"},
		{"audit bad cursor", "GET", "/v1/audit?cursor=nope", ``, 400, api.CodeBadRequest, "query parameter cursor"},
		{"audit cursor of another list", "GET", "/v1/audit?cursor=" + encodeCursor(cursorRecords, "x"), ``, 400, api.CodeBadRequest, "query parameter cursor"},
		{"audit who too long", "GET", "/v1/audit?who=" + strings.Repeat("w", 201), ``, 400, api.CodeBadRequest, "query parameter who"},
		{"audit tenant with a control character", "GET", "/v1/audit?tenant=a%00b", ``, 400, api.CodeBadRequest, "query parameter tenant"},
		{"audit drop tenant too long", "POST", "/v1/audit/drop", `{"before":1,"tenant":"` + strings.Repeat("t", 201) + `"}`, 400, api.CodeBadRequest, "field tenant"},
		{"audit bad after", "GET", "/v1/audit?after=-1", ``, 400, api.CodeBadRequest, "query parameter after"},
		{"audit zero limit", "GET", "/v1/audit?limit=0", ``, 400, api.CodeBadRequest, "query parameter limit"},
		{"audit bad limit", "GET", "/v1/audit?limit=lots", ``, 400, api.CodeBadRequest, "query parameter limit"},
		// The audit log is append-only: no route changes or removes an
		// entry, and its reserved kind is no record.
		{"put the audit log", "PUT", "/v1/audit", `{"entry":{}}`, 405, api.CodeMethodNotAllowed, "use GET or POST"},
		{"delete the audit log", "DELETE", "/v1/audit", ``, 405, api.CodeMethodNotAllowed, "use GET or POST"},
		{"patch the audit log", "PATCH", "/v1/audit", `{"entry":{}}`, 405, api.CodeMethodNotAllowed, "use GET or POST"},
		{"put an audit entry", "PUT", "/v1/audit/1", `{"entry":{}}`, 404, api.CodeNotFound, "no route"},
		{"delete an audit entry", "DELETE", "/v1/audit/1", ``, 404, api.CodeNotFound, "no route"},
		{"patch an audit entry", "PATCH", "/v1/audit/1", `{"entry":{}}`, 404, api.CodeNotFound, "no route"},
		{"put a record of kind audit", "PUT", "/v1/records/audit/1", `{"version":1,"value":{}}`, 400, api.CodeBadRequest, `kind "audit" is reserved`},
		{"delete a record of kind audit", "DELETE", "/v1/records/audit/1?version=1", ``, 400, api.CodeBadRequest, `kind "audit" is reserved`},
		{"list records of kind audit", "GET", "/v1/records/audit", ``, 400, api.CodeBadRequest, "use POST /v1/audit and GET /v1/audit"},
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
	// Nothing above changed the record or the audit log.
	if r, err := cl.GetRecord(t.Context(), "users", "taken"); err != nil || r.Version != 1 {
		t.Errorf("GetRecord(users, taken) = %+v, %v; want version 1", r, err)
	}
	if got, err := cl.Audit(t.Context(), 0, 0); err != nil || !cmp.Equal(got, []api.AuditEntry{entry}) {
		t.Errorf("Audit() = %+v, %v; want only %+v", got, err, entry)
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
	if e.Status < 400 || e.Status >= 500 || e.Message == "" {
		t.Fatalf("decode(%q) = %d %q, want a 4xx with a message", body, e.Status, e.Message)
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

func FuzzDecodeRecordBodies(f *testing.F) {
	for _, seed := range []string{
		`{"version":0,"value":{"name":"ann"}}`,
		`{"version":3,"value":[1,"<b>&",{"a":null}]}`,
		`{"value":"a string"}`,
		`{"value":null}`,
		`{"value":  { "spaced" :  true } }`,
		`{"entry":{"who":"ann","what":"signin"}}`,
		`{"entry":{"who":"ann"},"tenant":"acct-a","who":"ann","action":"auth.signin"}`,
		`{"entry":{},"who":"a\u0001"}`,
		`{"entry":[1]}`,
		`{"entry":"x"}`,
		`{"version":-1}`,
		`{"value":{},"bogus":1}`,
		``, `{}`, `[]`, `{"value":}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		// What a member accepts, the FSM accepts: the checks agree on the
		// bytes the log entry carries.
		if req, ok := decodeRequest(t, body, decodePutRecord); ok {
			b, err := cluster.Encode(RecordPut{Kind: "k", ID: "i", Value: req.Value})
			if err != nil {
				t.Fatalf("decodePutRecord(%q) accepted a value that does not encode: %v", body, err)
			}
			var c RecordPut
			if err := json.Unmarshal(b[1:], &c); err != nil || validateRecordValue(c.Value) != nil {
				t.Fatalf("decodePutRecord(%q) accepted %s, which the FSM refuses: %v", body, c.Value, validateRecordValue(c.Value))
			}
		}
		if req, ok := decodeRequest(t, body, decodeAppendAudit); ok {
			b, err := cluster.Encode(AuditAppend{Entry: req.Entry, Tenant: req.Tenant, Who: req.Who, Action: req.Action})
			if err != nil {
				t.Fatalf("decodeAppendAudit(%q) accepted an entry that does not encode: %v", body, err)
			}
			var c AuditAppend
			if err := json.Unmarshal(b[1:], &c); err != nil || validateAuditEntry(c.Entry) != nil {
				t.Fatalf("decodeAppendAudit(%q) accepted %s, which the FSM refuses: %v", body, c.Entry, validateAuditEntry(c.Entry))
			}
			if err := validateAuditFields(c.Tenant, c.Who, c.Action); err != nil {
				t.Fatalf("decodeAppendAudit(%q) accepted fields the FSM refuses: %v", body, err)
			}
		}
	})
}
