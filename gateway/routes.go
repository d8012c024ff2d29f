package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"strings"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/httpapi"
)

// route is one API route and what it takes.
type route struct {
	// pattern is the ServeMux pattern ("POST /v1/runs").
	pattern string
	// least is the least role that may call it; RoleNone needs no
	// credential (sign-in).
	least api.Role
	// person refuses API keys: the route acts as a person (sign-out,
	// members, keys).
	person bool
	// org asks for a credential not limited to some workspaces: the route
	// acts on the whole organisation (members, keys, audit, new
	// workspaces).
	org bool
	// grant admits the grant of the run named by the path's {id} too
	// (grant.go); no other route accepts a grant.
	grant bool
	// onlyGrant refuses every credential but the run's grant (tool
	// calls).
	onlyGrant bool
	// action names the route in the audit log ("run.create").
	action string
	handle func(c *call) error
}

// write reports whether the route changes something (and is audited).
func (rt route) write() bool { return !strings.HasPrefix(rt.pattern, "GET ") }

// routeTable is every API route (docs/GATEWAY.md, "Routes"). The
// authorization matrix test walks this table, so a route added here is
// tested for every credential.
func (g *Gateway) routeTable() []route {
	return []route{
		{pattern: "POST /v1/auth/signin", least: api.RoleNone, action: "auth.signin", handle: g.handleSignin},
		{pattern: "POST /v1/auth/signout", least: api.RoleViewer, person: true, action: "auth.signout", handle: g.handleSignout},
		{pattern: "GET /v1/me", least: api.RoleViewer, handle: g.handleMe},
		{pattern: "GET /v1/accounts", least: api.RoleViewer, handle: g.handleAccounts},
		{pattern: "POST /v1/auth/switch", least: api.RoleViewer, person: true, action: "auth.switch", handle: g.handleSwitch},

		{pattern: "GET /v1/workspaces", least: api.RoleViewer, handle: g.handleWorkspaces},
		{pattern: "POST /v1/workspaces", least: api.RoleAdmin, org: true, action: "workspace.create", handle: g.handleCreateWorkspace},

		{pattern: "GET /v1/members", least: api.RoleAdmin, person: true, org: true, handle: g.handleMembers},
		{pattern: "POST /v1/members", least: api.RoleAdmin, person: true, org: true, action: "member.create", handle: g.handleCreateMember},
		{pattern: "PATCH /v1/members/{id}", least: api.RoleAdmin, person: true, org: true, action: "member.update", handle: g.handleUpdateMember},
		{pattern: "DELETE /v1/members/{id}", least: api.RoleAdmin, person: true, org: true, action: "member.delete", handle: g.handleDeleteMember},

		{pattern: "GET /v1/keys", least: api.RoleAdmin, person: true, org: true, handle: g.handleKeys},
		{pattern: "POST /v1/keys", least: api.RoleAdmin, person: true, org: true, action: "key.create", handle: g.handleCreateKey},
		{pattern: "DELETE /v1/keys/{id}", least: api.RoleAdmin, person: true, org: true, action: "key.delete", handle: g.handleDeleteKey},

		{pattern: "POST /v1/sessions", least: api.RoleEditor, action: "session.create", handle: g.handleCreateSession},
		{pattern: "GET /v1/sessions", least: api.RoleViewer, handle: g.handleSessions},

		{pattern: "POST /v1/runs", least: api.RoleEditor, action: "run.create", handle: g.handleCreateRun},
		{pattern: "GET /v1/runs", least: api.RoleViewer, handle: g.handleRuns},
		{pattern: "GET /v1/runs/{id}", least: api.RoleViewer, grant: true, handle: g.handleRun},
		{pattern: "POST /v1/runs/{id}/cancel", least: api.RoleEditor, action: "run.cancel", handle: g.handleCancelRun},

		// Agent runs (agents.go, gates.go; docs/design/agents.md).
		// Tool calls take the run's grant and nothing else.
		{pattern: "POST /v1/runs/{id}/steps", least: api.RoleEditor, grant: true, onlyGrant: true, action: "run.step", handle: g.handleRunSteps},
		{pattern: "GET /v1/runs/{id}/events", least: api.RoleViewer, grant: true, handle: g.handleRunEvents},
		{pattern: "POST /v1/runs/{id}/finish", least: api.RoleEditor, grant: true, action: "run.finish", handle: g.handleFinishRun},
		{pattern: "GET /v1/runs/{id}/proposals/{proposal}", least: api.RoleViewer, grant: true, handle: g.handleProposal},
		{pattern: "POST /v1/runs/{id}/approve", least: api.RoleEditor, person: true, action: "run.approve", handle: g.handleApprove},
		{pattern: "POST /v1/runs/{id}/reject", least: api.RoleEditor, person: true, action: "run.reject", handle: g.handleReject},
		{pattern: "GET /v1/steps/{id}", least: api.RoleViewer, handle: g.handleStep},
		{pattern: "GET /v1/steps/{id}/stream", least: api.RoleViewer, handle: g.handleStream},

		{pattern: "GET /v1/library", least: api.RoleViewer, handle: g.handleLibrary},
		{pattern: "GET /v1/workspaces/{id}/revisions", least: api.RoleViewer, handle: g.handleRevisions},
		{pattern: "GET /v1/workspaces/{id}/revisions/{rev}", least: api.RoleViewer, handle: g.handleRevision},
		{pattern: "GET /v1/workspaces/{id}/tree", least: api.RoleViewer, handle: g.handleTree},
		{pattern: "GET /v1/workspaces/{id}/files/{path...}", least: api.RoleViewer, handle: g.handleGetFile},
		{pattern: "PUT /v1/workspaces/{id}/files/{path...}", least: api.RoleEditor, action: "file.put", handle: g.handlePutFile},
		{pattern: "DELETE /v1/workspaces/{id}/files/{path...}", least: api.RoleEditor, action: "file.delete", handle: g.handleDeleteFile},
		{pattern: "POST /v1/workspaces/{id}/uploads", least: api.RoleEditor, action: "file.upload", handle: g.handleUploads},
		{pattern: "GET /v1/workspaces/{id}/archive", least: api.RoleViewer, handle: g.handleArchive},
		{pattern: "GET /v1/workspaces/{id}/diff", least: api.RoleViewer, handle: g.handleDiff},
		{pattern: "POST /v1/workspaces/{id}/restore", least: api.RoleEditor, action: "workspace.restore", handle: g.handleRestore},

		// Secrets (secrets.go): nobody reads a value.
		{pattern: "PUT /v1/secrets/{name}", least: api.RoleAdmin, org: true, action: "secret.put", handle: g.handlePutSecret},
		{pattern: "GET /v1/secrets", least: api.RoleViewer, handle: g.handleSecrets},
		{pattern: "DELETE /v1/secrets/{name}", least: api.RoleAdmin, org: true, action: "secret.delete", handle: g.handleDeleteSecret},

		{pattern: "GET /v1/audit", least: api.RoleAdmin, org: true, handle: g.handleAudit},
		{pattern: "POST /v1/audit/drop", least: api.RoleOwner, person: true, org: true, action: "audit.drop", handle: g.handleDropAudit},
	}
}

// buildHandler mounts the routes, /healthz, /metrics and the page.
func (g *Gateway) buildHandler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range g.routes {
		mux.Handle(rt.pattern, g.serveRoute(rt))
	}
	// The local store's blob URLs, for callers outside the cluster: no
	// identity, the URL's signature is the authority (files_blobs.go).
	mux.HandleFunc("GET /v1/blobs/{digest}", g.handleBlob)
	mux.HandleFunc("PUT /v1/blobs/{digest}", g.handleBlob)
	mux.HandleFunc("GET /healthz", g.handleHealth)
	mux.Handle("GET /metrics", g.metrics.handler())
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) { httpapi.NoRoute(mux, w, r, "docs/GATEWAY.md") })
	mux.Handle("/", g.pageHandler())
	return securityHeaders(g.deadlines(g.metrics.instrument(refuseUncleanPaths(mux))))
}

// call is one API request on its way through a route.
type call struct {
	w   http.ResponseWriter
	r   *http.Request
	ctx context.Context
	// p is the caller; nil before authentication and on sign-in.
	p *principal
	// target is what the call acted on, for the audit log.
	target string
	// who, role and cred override the audit's caller (sign-in sets them).
	auditWho, auditRole string
	auditCred           *api.CredentialRef
	// audited is set by a handler that recorded the call itself.
	audited bool
	// ws, path and rev name what a write to a workspace's files changed,
	// for the audit log.
	auditWS, auditPath, auditRev string
	// secret and version name what a secrets write changed, for the
	// audit log.
	auditSecret  string
	auditVersion int
	// grantRun is the run record authorize read for a grant's call: the
	// run of the path, live, naming the grant.
	grantRun *versioned[runRecord]
}

// json writes v as the answer.
func (c *call) json(status int, v any) error {
	writeJSON(c.w, status, v)
	return nil
}

// decode decodes the request body strictly into v.
func (c *call) decode(v any) error { return decodeBody(c.w, c.r, v, false) }

// serveRoute is the one middleware of every API route: it authenticates
// the caller, puts the caller's tenant into the call's context (every
// record the handler reads or writes is then that tenant's, tenant.go),
// checks the route's role, person and organisation rules and the CSRF
// token, runs the handler, writes its error, and appends the
// audit entry of every write.
func (g *Gateway) serveRoute(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &call{w: w, r: r, ctx: r.Context()}
		err := g.authorize(c, rt)
		if err == nil {
			err = rt.handle(c)
		}
		result := "ok"
		if err != nil {
			he, internal := asHTTPError(err)
			if internal {
				g.log.Error("request failed", "route", rt.pattern, "path", r.URL.Path, "error", err)
			}
			writeError(w, he)
			result = he.Code
		}
		// A write by an unknown caller is not audited (anyone could fill
		// the log), but for sign-in attempts on an existing account,
		// which are rate limited per account; the others are counted.
		if rt.write() && !c.audited && (c.p != nil || c.auditWho != "") {
			g.audit(c, rt.action, result)
		}
	})
}

// authorize sets c.p and checks that it may call rt.
func (g *Gateway) authorize(c *call, rt route) error {
	if rt.least == api.RoleNone {
		return nil
	}
	p, err := g.authenticate(c.ctx, c.r)
	if err != nil {
		return err
	}
	if p == nil {
		return unauthorized("no credential: sign in (cookie %s) or send Authorization: Bearer rk_<id>_<secret>", cookieName)
	}
	c.p = p
	// From here on every record the call reads or writes is its
	// tenant's (tenant.go).
	c.ctx = withTenant(c.ctx, p.tenant)
	if p.cookie {
		// A browser sends Origin with every cross-site request: refuse any
		// not from the site; a websocket must send it.
		origin := c.r.Header.Get("Origin")
		if origin != "" && origin != g.cfg.Site || origin == "" && isWebsocket(c.r) {
			return forbidden("origin %q is not this gateway's site %s", origin, g.cfg.Site)
		}
		if rt.write() && !p.checkCSRF(c.r.Header.Get(csrfHeader)) {
			return forbidden("missing or wrong %s header: send the csrf_token of GET /v1/me with every write", csrfHeader)
		}
	}
	switch {
	case rt.onlyGrant && p.grant == nil:
		return forbidden("%s takes the run's grant (Authorization: Bearer rg_...), as POST /v1/runs answered it; %s %s is not one", rt.pattern, p.actor.Kind, p.actor.ID)
	case p.grant != nil && !rt.grant:
		return forbidden("a run's grant is accepted only on its own run's routes, not %s", rt.pattern)
	case rt.person && p.key != nil:
		return forbidden("API keys cannot %s: sign in as a person", rt.pattern)
	case p.Role < rt.least:
		return forbidden("%s needs the %s role; %s %s has %s", rt.pattern, rt.least, p.actor.Kind, p.actor.ID, p.Role)
	case rt.org && len(p.Workspaces) > 0:
		return forbidden("%s acts on every workspace; %s %s is limited to %s", rt.pattern, p.actor.Kind, p.actor.ID, strings.Join(p.Workspaces, ", "))
	}
	if p.grant != nil {
		return g.authorizeGrant(c, p.grant)
	}
	return nil
}

// authorizeGrant admits a grant on a grant route only for the run in the
// path, and only while that run is live and its record names the grant
// (a grant dies with its run). The run record read is kept in c.grantRun.
func (g *Gateway) authorizeGrant(c *call, claims *grantClaims) error {
	id := c.r.PathValue("id")
	if id != claims.Run {
		return forbidden("the grant of run %s may not act on run %s", claims.Run, id)
	}
	var run runRecord
	version, err := getRecord(c.ctx, g.store, kindRun, id, &run)
	if IsNotFound(err) {
		return unauthorized("the grant ended with its run")
	}
	if err != nil {
		return err
	}
	live := run.State == api.RunRunning || run.State == api.RunAwaitingApproval
	if run.Agent == nil || run.Agent.Grant != claims.ID || run.Workspace != claims.Workspace || !live {
		return unauthorized("the grant ended with its run")
	}
	c.grantRun = &versioned[runRecord]{ID: id, Version: version, Value: run}
	return nil
}

func isWebsocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// audit appends the audit entry of c. A failure cannot undo the write: it
// is logged and counted.
func (g *Gateway) audit(c *call, action, result string) {
	g.appendAudit(c, g.auditDoc(c, action, result))
}

// auditDoc is c's audit document.
func (g *Gateway) auditDoc(c *call, action, result string) api.AuditDocument {
	e := api.AuditDocument{Account: tenantFrom(c.ctx), Action: action, Target: c.target, Result: result, Client: clientAddr(c.r).String()}
	if c.p != nil {
		e.Who, e.Role, e.Credential = c.p.actor.ID, c.p.Role.String(), &c.p.cred
	}
	if c.auditWho != "" || c.auditCred != nil {
		e.Who, e.Role, e.Credential = c.auditWho, c.auditRole, c.auditCred
	}
	e.Workspace, e.Path, e.Revision = c.auditWS, c.auditPath, c.auditRev
	e.Secret, e.Version = c.auditSecret, c.auditVersion
	return e
}

// appendAudit appends e for call c, as an entry of e's tenant (none for a
// failed sign-in of an unknown email) with its who and action as the
// entry's typed fields.
func (g *Gateway) appendAudit(c *call, e api.AuditDocument) {
	action, result := e.Action, e.Result
	b, _ := json.Marshal(e)
	// The write is done even when the client went away: audit it anyway.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), auditTimeout)
	defer cancel()
	if _, err := g.store.AppendAuditEntry(ctx, api.AppendAuditRequest{Entry: b, Tenant: e.Account, Who: e.Who, Action: e.Action}); err != nil {
		g.metrics.auditFailures.Inc()
		g.log.Error("append audit entry", "action", action, "who", e.Who, "target", e.Target, "result", result, "error", err)
	}
}

// clientAddr is the address the request came from (the peer: the gateway
// trusts no forwarding header).
func clientAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

func (g *Gateway) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
