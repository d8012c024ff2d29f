package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/pki"
)

// Authorization by identity (SPEC, "The trust boundary between
// components"). With TLS every request comes with the verified identity of
// its client certificate; accessTable says, per route, which roles may
// take it and, for the roles that act only for themselves, where the
// request names whom it acts for. A member that forwards a request to the
// leader names the original caller in ForwardedForHeader, and the leader
// authorizes that identity again; the header counts only from a member. In
// plaintext mode there is no identity and nothing is checked.

// access is who may take a route.
type access struct {
	// roles may take the route; none means no one, unless anyone.
	roles []pki.Role
	// anyone lets every identity of the cluster CA take the route.
	anyone bool
	// own says where the request names whom it acts for, which must be
	// the caller itself.
	own subject
	// memberQuery are query parameters only members may send.
	memberQuery []string
	// action says what the route does, in refusals ("agent/n1 may not
	// heartbeat for node n2").
	action string
}

// subject is where a request names whom it acts for.
type subject int

const (
	// ownNone: the route acts for no one in particular.
	ownNone subject = iota
	// ownNodeBody: an agent's body names its node ("node").
	ownNodeBody
	// ownNodeQuery: an agent's ?node= names its node.
	ownNodeQuery
	// ownStep: an agent's report names its node ("node"), and the path's
	// step must have its current attempt on that node. The step is looked
	// up where the handler runs (the leader, for these writes), never on a
	// follower whose state may lag.
	ownStep
	// ownMemberBody: a joining member's body names it ("id").
	ownMemberBody
	// ownGatewayPath: a gateway's path names it ({name}).
	ownGatewayPath
)

var (
	members   = []pki.Role{pki.RoleMember}
	agents    = []pki.Role{pki.RoleAgent}
	gateways  = []pki.Role{pki.RoleGateway}
	operators = []pki.Role{pki.RoleOperator}
	// clients are the callers of the step, node and member reads and of
	// step submission and cancellation: the gateway and operators.
	clients = []pki.Role{pki.RoleGateway, pki.RoleOperator}
)

// accessTable is the authorization of every route of the member's HTTP
// API, by ServeMux pattern. A route served without a row panics at New, so
// nothing is served unauthorized; TestAuthorizationMatrix calls every route
// as every kind of identity.
var accessTable = map[string]access{
	"GET /healthz": {anyone: true, memberQuery: []string{"read-index"}, action: "read the member's health"},
	"GET /metrics": {anyone: true, action: "read the member's metrics"},

	"GET /v1/members":           {roles: clients, action: "list the members"},
	"POST /v1/members/join":     {roles: members, own: ownMemberBody, action: "join the cluster"},
	"GET /v1/members/env-key":   {roles: members, action: "read the cluster env key"},
	"POST /v1/members/remove":   {roles: operators, action: "remove a member"},
	"GET /v1/snapshot":          {roles: operators, action: "save a snapshot"},
	"POST /v1/snapshot/restore": {roles: operators, action: "restore a snapshot"},

	"GET /v1/nodes":               {roles: clients, action: "list the nodes"},
	"GET /v1/nodes/{id}":          {roles: clients, action: "read a node"},
	"POST /v1/nodes/{id}/drain":   {roles: operators, action: "drain a node"},
	"POST /v1/nodes/{id}/undrain": {roles: operators, action: "undrain a node"},

	"POST /v1/steps":                {roles: clients, action: "submit a step"},
	"POST /v1/env/seal":             {roles: clients, action: "seal environment values"},
	"GET /v1/steps":                 {roles: clients, action: "list the steps"},
	"GET /v1/steps/{id}":            {roles: clients, action: "read a step"},
	"POST /v1/steps/{id}/cancel":    {roles: clients, action: "cancel a step"},
	"GET /v1/steps/{id}/stream-url": {roles: clients, action: "locate a step's output"},

	"POST /v1/agent/register":                    {roles: agents, own: ownNodeBody, action: "register"},
	"POST /v1/agent/heartbeat":                   {roles: agents, own: ownNodeBody, action: "heartbeat"},
	"GET /v1/agent/assignments":                  {roles: agents, own: ownNodeQuery, action: "poll assignments"},
	"GET /v1/agent/platform":                     {roles: agents, action: "read the platform addresses"},
	"POST /v1/agent/steps/{id}/phase":            {roles: agents, own: ownStep, action: "report a step's phase"},
	"POST /v1/agent/steps/{id}/events":           {roles: agents, own: ownStep, action: "report a step's events"},
	"POST /v1/agent/steps/{id}/exit":             {roles: agents, own: ownStep, action: "report a step's exit"},
	"POST /v1/agent/steps/{id}/cancel-confirmed": {roles: agents, own: ownStep, action: "confirm a step's cancel"},
	// Each report's step is checked by the handler (ownReport), as
	// authorizeState checks the single-report routes'.
	"POST /v1/agent/reports": {roles: agents, own: ownNodeBody, action: "report on its steps"},
	// The handler checks the body's node (too large a body to peek at).
	"POST /v1/agent/uploads": {roles: agents, action: "upload a step's workspace"},

	// The workspace API (http_workspaces.go); the blob routes of the
	// local store need no identity: their signature is the authority.
	"GET /v1/workspaces/{id}/revisions":          {roles: clients, action: "list a workspace's revisions"},
	"GET /v1/workspaces/{id}/revisions/{rev}":    {roles: clients, action: "read a revision"},
	"GET /v1/workspaces/{id}/tree":               {roles: clients, action: "read a workspace's tree"},
	"GET /v1/workspaces/{id}/files/{path...}":    {roles: clients, action: "read a workspace file"},
	"PUT /v1/workspaces/{id}/files/{path...}":    {roles: clients, action: "write a workspace file"},
	"DELETE /v1/workspaces/{id}/files/{path...}": {roles: clients, action: "delete a workspace file"},
	"POST /v1/workspaces/{id}/uploads":           {roles: clients, action: "upload workspace files"},
	"GET /v1/workspaces/{id}/archive":            {roles: clients, action: "download a workspace"},
	"GET /v1/workspaces/{id}/diff":               {roles: clients, action: "compare revisions"},
	"POST /v1/workspaces/{id}/restore":           {roles: clients, action: "restore a revision"},
	"GET /v1/blobs/{digest}":                     {anyone: true, action: "read a blob"},
	"PUT /v1/blobs/{digest}":                     {anyone: true, action: "write a blob"},

	"GET /v1/records/{kind}":         {roles: gateways, action: "list records"},
	"GET /v1/records/{kind}/{id}":    {roles: gateways, action: "read a record"},
	"PUT /v1/records/{kind}/{id}":    {roles: gateways, action: "write a record"},
	"DELETE /v1/records/{kind}/{id}": {roles: gateways, action: "delete a record"},
	"POST /v1/audit":                 {roles: gateways, action: "append to the audit log"},
	"GET /v1/audit":                  {roles: gateways, action: "read the audit log"},
	"POST /v1/audit/drop":            {roles: gateways, action: "drop old audit entries"},
	"PUT /v1/gateways/{name}":        {roles: gateways, own: ownGatewayPath, action: "record a gateway's addresses"},
}

// ForwardedForHeader carries, on a request a member forwards to the
// leader, the identity (ROLE/NAME) of the original caller, whom the leader
// authorizes. It is trusted only from a member certificate.
const ForwardedForHeader = "X-Rodon-Forwarded-For"

// caller is who a request acts for, once authorized.
type caller struct {
	id pki.Identity
	// via is the member that forwarded the request; zero if it came
	// directly.
	via     pki.Identity
	pattern string
	access  access
}

type callerKey struct{}

// callerOf returns the authorized caller of a request; none in plaintext
// mode.
func callerOf(ctx context.Context) (caller, bool) {
	c, ok := ctx.Value(callerKey{}).(caller)
	return c, ok
}

// forbiddenError is a refusal: 403 forbidden, counted and logged.
type forbiddenError struct {
	// id is who was refused (the caller, or the peer that sent a
	// forwarding header).
	id  pki.Identity
	msg string
}

func (e *forbiddenError) Error() string { return e.msg }

func refusal(id pki.Identity, format string, args ...any) *forbiddenError {
	return &forbiddenError{id: id, msg: fmt.Sprintf(format, args...)}
}

// router registers the routes of the member's HTTP API, each behind the
// authorization of its accessTable row. It has no way to serve a route
// without one.
type router struct {
	s   *Server
	mux *http.ServeMux
}

// HandleFunc serves h at pattern once the caller is authorized for it.
func (rt *router) HandleFunc(pattern string, h http.HandlerFunc) { rt.Handle(pattern, h) }

// Handle serves h at pattern once the caller is authorized for it.
func (rt *router) Handle(pattern string, h http.Handler) {
	a, ok := accessTable[pattern]
	if !ok {
		panic(fmt.Sprintf("scheduler: route %s has no row in accessTable: say who may take it", pattern))
	}
	rt.s.patterns = append(rt.s.patterns, pattern)
	rt.mux.Handle(pattern, rt.s.authorized(pattern, a, h))
}

// authorized serves h to callers that a may take the route; in plaintext
// mode to everyone.
func (s *Server) authorized(pattern string, a access, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.TLS == nil {
			h.ServeHTTP(w, r)
			return
		}
		c, err := s.authorize(w, r, pattern, a)
		if err != nil {
			s.refuse(w, r, pattern, err)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	})
}

// authorize finds who r acts for and checks that a lets them take the
// route, but for what only the state can tell (authorizeState). Errors are
// *forbiddenError or, for a body that cannot be read, *httpError.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, pattern string, a access) (caller, error) {
	c := caller{pattern: pattern, access: a}
	peer, ok := pki.PeerIdentity(r.TLS)
	if !ok {
		return c, refusal(peer, "no verified client certificate: present one the cluster CA issued")
	}
	c.id = peer
	forwardedFor := r.Header.Get(ForwardedForHeader)
	if forwardedFor != "" || r.Header.Get(ForwardedHeader) != "" {
		if peer.Role != pki.RoleMember {
			return c, refusal(peer, "%s may not send %s or %s: only members forward requests", peer, ForwardedForHeader, ForwardedHeader)
		}
	}
	if forwardedFor != "" {
		id, err := pki.ParseIdentity(forwardedFor)
		if err != nil {
			return c, refusal(peer, "%s forwarded a request for %q, which is no identity: %v", peer, forwardedFor, err)
		}
		c.id, c.via = id, peer
	}
	id := c.id
	if !a.anyone && !slices.Contains(a.roles, id.Role) {
		return c, refusal(id, "%s may not %s (%s %s): that is for %s identities", id, a.action, r.Method, r.URL.Path, joinRoles(a.roles))
	}
	if id.Role != pki.RoleMember {
		q := r.URL.Query()
		for _, p := range a.memberQuery {
			if _, ok := q[p]; ok {
				return c, refusal(id, "%s may not %s with ?%s: only members may", id, a.action, p)
			}
		}
	}
	switch a.own {
	case ownNodeBody, ownStep:
		var body struct {
			Node cluster.NodeID `json:"node"`
		}
		if err := peekBody(w, r, &body); err != nil {
			return c, err
		}
		if string(body.Node) != id.Name {
			return c, refusal(id, "%s may not %s for node %q: only for its own node %s", id, a.action, body.Node, id.Name)
		}
	case ownNodeQuery:
		if node := r.URL.Query().Get("node"); node != id.Name {
			return c, refusal(id, "%s may not %s for node %q: only for its own node %s", id, a.action, node, id.Name)
		}
	case ownMemberBody:
		var body struct {
			ID string `json:"id"`
		}
		if err := peekBody(w, r, &body); err != nil {
			return c, err
		}
		if body.ID != id.Name {
			return c, refusal(id, "%s may not %s as member %q: only as itself, %s", id, a.action, body.ID, id.Name)
		}
	case ownGatewayPath:
		if name := r.PathValue("name"); name != id.Name {
			return c, refusal(id, "%s may not %s for gateway %q: only for itself, %s", id, a.action, name, id.Name)
		}
	}
	return c, nil
}

// authorizeState checks what only the state can tell: that the step of an
// agent's report has its current attempt on the agent's node. It runs
// where the handler runs, after the member caught up (reads) or as the
// leader (writes). A step that does not exist is the handler's 404.
func (s *Server) authorizeState(r *http.Request) error {
	c, ok := callerOf(r.Context())
	if !ok || c.access.own != ownStep {
		return nil
	}
	id := cluster.StepID(r.PathValue("id"))
	node, ok := s.fsm.State().StepNode(id)
	if ok && string(node) != c.id.Name {
		return refusal(c.id, "%s may not %s for step %s: its current attempt is not on node %s", c.id, c.access.action, id, c.id.Name)
	}
	return nil
}

// peekBody decodes the body of r into v, leniently, and puts it back for
// the handler, which decodes it strictly. v names only the field the
// authorization needs, tagged as in the handler's type, so that both see
// the same value. A body that is too large or not JSON is refused as the
// handler would refuse it.
func peekBody(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	r.Body.Close()
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return &httpError{Status: http.StatusRequestEntityTooLarge, Code: api.CodeTooLarge,
			Message: fmt.Sprintf("request body over %d bytes", mbe.Limit)}
	case err != nil:
		return badRequest("read request body: %v", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return badRequest("malformed JSON request body: %v: see docs/PROTOCOL.md", err)
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return nil
}

// refuse answers a refused request: 403 forbidden naming the identity and
// the action, counted by role and route and logged, or the error of a body
// that could not be read.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, pattern string, err error) {
	var fe *forbiddenError
	if !errors.As(err, &fe) {
		writeError(w, errorOf(err))
		return
	}
	role := string(fe.id.Role)
	if role == "" {
		role = "none"
	}
	s.metrics.forbidden.WithLabelValues(role, pattern).Inc()
	s.logger.Warn("request refused", "identity", fe.id.String(), "route", pattern, "path", r.URL.Path,
		"remote", r.RemoteAddr, "reason", fe.msg)
	writeError(w, &httpError{Status: http.StatusForbidden, Code: api.CodeForbidden, Message: fe.msg})
}

func joinRoles(roles []pki.Role) string {
	s := make([]string, len(roles))
	for i, r := range roles {
		s[i] = string(r)
	}
	if len(s) == 0 {
		return "no"
	}
	return strings.Join(s, " or ")
}
