package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/pki"
)

// agentInfo is an agent the gateway tests started, with what must never
// reach a gateway client.
type agentInfo struct {
	id      string
	listen  string
	dataDir string
	// rootKey is its root key file (startGateway's).
	rootKey string
}

// startNamedAgent starts one agent with a distinctive node id (so that a
// scan of the gateway's answers for it cannot match by chance) and waits
// until it is ready.
func startNamedAgent(t *testing.T, f *fleet, id string) agentInfo {
	t.Helper()
	return startAgentLogging(t, f, id, "info")
}

// startAgentLogging is startNamedAgent with agentd logging at level.
func startAgentLogging(t *testing.T, f *fleet, id, level string) agentInfo {
	t.Helper()
	if f.wsRoot == "" {
		f.wsRoot = t.TempDir()
	}
	a := agentInfo{id: id, listen: freePort(t), dataDir: t.TempDir()}
	f.agentAddrs = append(f.agentAddrs, a.listen)
	args := []string{bin + "/agentd", "serve", "--tls-dir", tlsArgs(t, pki.RoleAgent, id)[1], "--scheduler", f.urls(),
		"--node-id", id, "--data-dir", a.dataDir, "--listen", a.listen,
		"--heartbeat", "500ms", "--cpu", "2", "--memory", "4g", "--log-level", level, "--network", "none"}
	f.agents = append(f.agents, start(t, "agentd "+id, append(args, f.agentArgs...)...))
	c := newClient(t, f.urls())
	waitFor(t, 60*time.Second, "node "+id+" ready", func() bool {
		nodes, err := c.Nodes(t.Context())
		for _, nd := range nodes {
			if nd.ID == id && nd.State == "ready" {
				return err == nil
			}
		}
		return false
	})
	return a
}

// gatewayProc is a `gateway serve` process on loopback.
type gatewayProc struct {
	*proc
	addr    string
	site    string
	dataDir string
	// rootKey is its root key file (startGateway's).
	rootKey string
}

// startGateway starts `gateway serve` against the fleet's schedulers and
// waits for /healthz. ownerEmail "" disables the first-owner bootstrap.
func startGateway(t *testing.T, f *fleet, ownerEmail string) *gatewayProc {
	t.Helper()
	addr := freePort(t)
	g := &gatewayProc{addr: addr, site: "http://" + addr, dataDir: t.TempDir()}
	args := append([]string{bin + "/gateway", "serve", "--scheduler", f.urls(), "--listen", addr,
		"--data-dir", g.dataDir, "--site", g.site, "--owner-email", ownerEmail, "--log-level", "debug",
		"--name", "gateway", "--tls-dir", tlsArgs(t, pki.RoleGateway, "gateway")[1]}, gatewaySecretArgs(t)...)
	g.rootKey = args[len(args)-5]
	g.proc = start(t, "gateway "+addr, args...)
	waitFor(t, 30*time.Second, "gateway /healthz", func() bool {
		resp, err := http.Get(g.site + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return g
}

// gatewaySecretArgs are the flags of a test gateway's secrets: a root key
// file of its own outside every data dir (made by `gateway keys
// init-root`), and a cluster listener on a free port, where agents fetch
// their steps' secrets.
func gatewaySecretArgs(t *testing.T) []string {
	t.Helper()
	key := filepath.Join(t.TempDir(), "root-key.json")
	if out, err := exec.Command(bin+"/gateway", "keys", "init-root", "--root-key-file", key).CombinedOutput(); err != nil {
		t.Fatalf("gateway keys init-root: %v\n%s", err, out)
	}
	listen := freePort(t)
	return []string{"--root-key-file", key, "--cluster-listen", listen, "--cluster-url", "https://" + listen}
}

var ownerPasswordRE = regexp.MustCompile(`created the owner (\S+) with the one-time password (\S+)`)

// ownerPassword waits for the gateway to print the first owner's one-time
// password on stderr and returns it.
func (g *gatewayProc) ownerPassword(t *testing.T, email string) string {
	t.Helper()
	var pw string
	waitFor(t, 30*time.Second, "the one-time owner password", func() bool {
		m := ownerPasswordRE.FindAllStringSubmatch(g.out.String(), -1)
		if len(m) == 1 && m[0][1] == email {
			pw = m[0][2]
			return true
		}
		return false
	})
	return pw
}

// pid is the gateway's process id.
func (g *gatewayProc) pid() int { return g.cmd.Process.Pid }

// recorder keeps every answer a gateway client received, to scan them for
// provider identifiers.
type recorder struct {
	mu sync.Mutex
	b  bytes.Buffer
	n  int
}

func (r *recorder) add(what string, p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	fmt.Fprintf(&r.b, "\n=== %s\n", what)
	r.b.Write(p)
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.b.String()
}

// recordingTransport records each response: status line, headers and
// body.
type recordingTransport struct {
	rec *recorder
}

func (rt recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	dump, derr := httputil.DumpResponse(resp, true)
	if derr != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("record response: %w", derr)
	}
	rt.rec.add(req.Method+" "+req.URL.RequestURI(), dump)
	return resp, nil
}

// gwClient is a client of one gateway: a person with a cookie jar (and the
// CSRF token of its sign-in) or a program with an API key.
type gwClient struct {
	t      *testing.T
	g      *gatewayProc
	http   *http.Client
	jar    http.CookieJar
	rec    *recorder
	csrf   string
	bearer string
}

// ownerWithWorkspace starts a gateway on f whose owner is
// owner@example.com, signs the owner in and creates a workspace named
// name; it returns the gateway, the owner's client and the workspace's id.
func ownerWithWorkspace(t *testing.T, f *fleet, name string) (*gatewayProc, *gwClient, string) {
	t.Helper()
	const ownerEmail = "owner@example.com"
	g := startGateway(t, f, ownerEmail)
	owner := newGWClient(t, g, &recorder{})
	owner.signIn(ownerEmail, g.ownerPassword(t, ownerEmail))
	var ws struct {
		ID string `json:"id"`
	}
	owner.must(http.StatusCreated, http.MethodPost, "/v1/workspaces", map[string]string{"name": name}, &ws)
	return g, owner, ws.ID
}

func newGWClient(t *testing.T, g *gatewayProc, rec *recorder) *gwClient {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &gwClient{t: t, g: g, jar: jar, rec: rec,
		http: &http.Client{Jar: jar, Timeout: 30 * time.Second, Transport: recordingTransport{rec}}}
}

// withKey returns a client of the same gateway that uses API key secret.
func (c *gwClient) withKey(secret string) *gwClient {
	k := newGWClient(c.t, c.g, c.rec)
	k.bearer = secret
	return k
}

// do sends one request (body as JSON unless nil) and returns the status
// and the answer, decoded into out when it is not nil and the status is
// 2xx.
func (c *gwClient) do(method, path string, body, out any) (int, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.g.site+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if method != http.MethodGet && c.csrf != "" {
		req.Header.Set("X-CSRF-Token", c.csrf)
	}
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: read answer: %v", method, path, err)
	}
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, out); err != nil {
			c.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
	return resp.StatusCode, b
}

// must is do that fails the test unless the status is want.
func (c *gwClient) must(want int, method, path string, body, out any) []byte {
	c.t.Helper()
	code, b := c.do(method, path, body, out)
	if code != want {
		c.t.Fatalf("%s %s = %d %s, want %d", method, path, code, b, want)
	}
	return b
}

// signIn signs in as email and keeps the session cookie and CSRF token.
func (c *gwClient) signIn(email, password string) gwAccount {
	c.t.Helper()
	var ans struct {
		Account   gwAccount `json:"account"`
		CSRFToken string    `json:"csrf_token"`
	}
	c.must(http.StatusOK, http.MethodPost, "/v1/auth/signin", map[string]string{"email": email, "password": password}, &ans)
	if ans.CSRFToken == "" || ans.Account.ID == "" {
		c.t.Fatalf("sign-in answer %+v: want an account and a csrf token", ans)
	}
	c.csrf = ans.CSRFToken
	return ans.Account
}

// sessionCookie returns the session cookie the jar holds for the gateway.
func (c *gwClient) sessionCookie() *http.Cookie {
	c.t.Helper()
	u, _ := url.Parse(c.g.site)
	for _, ck := range c.jar.Cookies(u) {
		if ck.Name == "rodon_session" {
			return ck
		}
	}
	c.t.Fatal("no rodon_session cookie in the jar")
	return nil
}

type gwAccount struct {
	ID    string `json:"id"`
	Email string `json:"email"`
	Role  string `json:"role"`
}

// gwOperation is the part of an Operation the tests read.
type gwOperation struct {
	ID        string      `json:"id"`
	Workspace string      `json:"workspace"`
	State     string      `json:"state"`
	Steps     []gwRunStep `json:"steps"`
	Errors    []string    `json:"errors"`
	Cancel    *api.Cancel `json:"cancel"`
	CreatedBy struct {
		Kind string `json:"kind"`
		ID   string `json:"id"`
	} `json:"created_by"`
}

type gwRunStep struct {
	ID           string            `json:"id"`
	Index        int               `json:"index"`
	State        string            `json:"state"`
	ExitCode     *int              `json:"exit_code"`
	TerminatedBy string            `json:"terminated_by"`
	Cancel       *api.Cancel       `json:"cancel"`
	Phases       api.Phases        `json:"phases"`
	Node         string            `json:"node"`
	FilesChanged *api.FilesChanged `json:"files_changed"`
}

// startRun starts a run of steps in workspace ws and returns it.
func (c *gwClient) startRun(ws string, steps ...map[string]any) gwOperation {
	c.t.Helper()
	var op gwOperation
	c.must(http.StatusCreated, http.MethodPost, "/v1/runs", map[string]any{"workspace": ws, "steps": steps}, &op)
	return op
}

// waitRun polls GET /v1/runs/{id} until the run is no longer running.
func (c *gwClient) waitRun(id string, d time.Duration) gwOperation {
	c.t.Helper()
	var op gwOperation
	waitFor(c.t, d, "run "+id+" to end", func() bool {
		c.must(http.StatusOK, http.MethodGet, "/v1/runs/"+id, nil, &op)
		return op.State != "running"
	})
	return op
}

// streamConn is one websocket stream of a step through the gateway.
type streamConn struct {
	t    *testing.T
	conn *websocket.Conn
	rec  *recorder
	name string
}

// openStream connects to GET /v1/steps/{id}/stream?from=N with the
// client's credential (and Origin = the site).
func (c *gwClient) openStream(stepID string, from int64) *streamConn {
	c.t.Helper()
	u := strings.Replace(c.g.site, "http://", "ws://", 1) + "/v1/steps/" + stepID + "/stream?from=" + strconv.FormatInt(from, 10)
	h := http.Header{"Origin": {c.g.site}}
	if c.bearer != "" {
		h.Set("Authorization", "Bearer "+c.bearer)
	}
	d := websocket.Dialer{Jar: c.jar, HandshakeTimeout: 20 * time.Second}
	var conn *websocket.Conn
	var resp *http.Response
	var err error
	// A step just submitted may not have its node yet: the gateway answers
	// 409 until then.
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, resp, err = d.DialContext(c.t.Context(), u, h)
		if resp != nil {
			dump, _ := httputil.DumpResponse(resp, resp.StatusCode != http.StatusSwitchingProtocols)
			c.rec.add("WS "+u, dump)
		}
		if err == nil || resp == nil || resp.StatusCode != http.StatusConflict || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		c.t.Fatalf("open stream %s: %v (status %d)", u, err, status)
	}
	return &streamConn{t: c.t, conn: conn, rec: c.rec, name: "WS frame " + stepID}
}

// next reads one frame; ok is false when the stream closed (err says how).
func (s *streamConn) next() (api.Frame, error) {
	_, b, err := s.conn.ReadMessage()
	if err != nil {
		s.rec.add(s.name+" close", []byte(err.Error()))
		return api.Frame{}, err
	}
	s.rec.add(s.name, b)
	var f api.Frame
	if err := json.Unmarshal(b, &f); err != nil {
		s.t.Fatalf("frame %s: %v", b, err)
	}
	return f, nil
}

// untilExit reads every frame up to the exit frame and checks that a
// normal close follows.
func (s *streamConn) untilExit() []api.Frame {
	s.t.Helper()
	var frames []api.Frame
	s.conn.SetReadDeadline(time.Now().Add(5 * time.Minute))
	for {
		f, err := s.next()
		if err != nil {
			s.t.Fatalf("stream ended before its exit frame after %d frames: %v", len(frames), err)
		}
		frames = append(frames, f)
		if f.Kind == api.KindExit {
			break
		}
	}
	_, _, err := s.conn.ReadMessage()
	if !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		s.t.Errorf("after the exit frame: %v, want a normal close", err)
	}
	s.conn.Close()
	return frames
}

// stdout joins the stdout of frames and checks that their seqs follow
// each other from first.
func stdout(t *testing.T, frames []api.Frame, first int64) []byte {
	t.Helper()
	var out []byte
	for i, f := range frames {
		if f.Seq != first+int64(i) {
			t.Fatalf("frame %d has seq %d, want %d (a gap or a repeat)", i, f.Seq, first+int64(i))
		}
		if f.Kind == api.KindStdout {
			b, err := f.Output()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b...)
		}
	}
	return out
}

// auditDoc is the gateway's audit document.
type auditDoc struct {
	Seq        uint64 `json:"-"`
	Who        string `json:"who"`
	Role       string `json:"role"`
	Credential *struct {
		Kind string `json:"kind"`
		ID   string `json:"id"`
	} `json:"credential"`
	Action string `json:"action"`
	Target string `json:"target"`
	Result string `json:"result"`
	Client string `json:"client"`
}

// audit reads the whole audit log.
func (c *gwClient) audit() ([]auditDoc, []byte) {
	c.t.Helper()
	var entries []api.AuditEntry
	raw := c.must(http.StatusOK, http.MethodGet, "/v1/audit?limit=1000", nil, &entries)
	var docs []auditDoc
	for _, e := range entries {
		var d auditDoc
		if err := json.Unmarshal(e.Entry, &d); err != nil {
			c.t.Fatalf("audit entry %d: %v", e.Seq, err)
		}
		d.Seq = e.Seq
		docs = append(docs, d)
	}
	return docs, raw
}

// rssKiB is the VmRSS of process pid.
func rssKiB(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", rest, err)
			}
			return n
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// decodeFrame decodes one websocket message of a stream.
func decodeFrame(b []byte) (api.Frame, error) {
	var f api.Frame
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("frame %.200s: %w", b, err)
	}
	return f, nil
}
