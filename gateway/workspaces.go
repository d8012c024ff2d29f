package gateway

import (
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/rodon-compute/rodon/api"
)

func (g *Gateway) handleWorkspaces(c *call) error {
	pg, err := parsePage(c.r.URL.Query(), "workspaces")
	if err != nil {
		return err
	}
	recs, next, err := scanPage(c.ctx, g.store, kindWorkspace, "", pg, func(r *versioned[api.Workspace]) bool { return c.p.canSee(r.Value.ID) })
	if err != nil {
		return err
	}
	out := make([]api.Workspace, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.Value)
	}
	return c.page("workspaces", out, next)
}

func (g *Gateway) handleCreateWorkspace(c *call) error {
	var req api.CreateWorkspaceRequest
	if err := c.decode(&req); err != nil {
		return err
	}
	if err := checkName("name", req.Name); err != nil {
		return err
	}
	ws := api.Workspace{ID: newID(prefixWorkspace), Name: req.Name, CreatedAt: g.now()}
	c.target = ws.ID
	if _, err := putRecord(c.ctx, g.store, kindWorkspace, ws.ID, 0, &ws); err != nil {
		return err
	}
	return c.json(http.StatusCreated, ws)
}

// checkWorkspace checks that the caller may act in workspace ws and that
// it exists. A workspace the caller is not in is refused before looking,
// so the answer does not tell whether it exists.
func (g *Gateway) checkWorkspace(c *call, field, ws string) error {
	if !validID(ws, prefixWorkspace) {
		return badRequest("%s %q: want a workspace id such as ws-%s", field, ws, strings.Repeat("a", idLen))
	}
	if !c.p.canSee(ws) {
		return forbidden("%s %s is not a member of workspace %s", c.p.actor.Kind, c.p.actor.ID, ws)
	}
	var w api.Workspace
	if _, err := getRecord(c.ctx, g.store, kindWorkspace, ws, &w); err != nil {
		if IsNotFound(err) {
			return notFound("no workspace %s", ws)
		}
		return err
	}
	return nil
}

// checkWorkspaceList checks the workspaces a member or key is limited to:
// existing, and the caller's own.
func (g *Gateway) checkWorkspaceList(c *call, list []string) error {
	for i, ws := range list {
		if err := g.checkWorkspace(c, "workspaces["+strconv.Itoa(i)+"]", ws); err != nil {
			return err
		}
	}
	return nil
}

func (g *Gateway) handleCreateSession(c *call) error {
	var req api.CreateSessionRequest
	if err := c.decode(&req); err != nil {
		return err
	}
	if err := g.checkWorkspace(c, "workspace", req.Workspace); err != nil {
		return err
	}
	if utf8.RuneCountInString(req.Title) > 200 || !utf8.ValidString(req.Title) {
		return badRequest("field \"title\": want at most 200 characters")
	}
	s := api.Session{ID: newTimeID(prefixSession, g.now()), Workspace: req.Workspace, Title: req.Title, CreatedBy: c.p.actor, CreatedAt: g.now()}
	c.target = s.ID
	if _, err := putRecord(c.ctx, g.store, kindSession, s.ID, 0, &s); err != nil {
		return err
	}
	return c.json(http.StatusCreated, s)
}

func (g *Gateway) handleSessions(c *call) error {
	ws := c.r.URL.Query().Get("workspace")
	if ws != "" {
		if err := g.checkWorkspace(c, "query parameter workspace", ws); err != nil {
			return err
		}
	}
	pg, err := parsePage(c.r.URL.Query(), "sessions")
	if err != nil {
		return err
	}
	recs, next, err := scanPage(c.ctx, g.store, kindSession, "", pg, func(r *versioned[api.Session]) bool {
		return c.p.canSee(r.Value.Workspace) && (ws == "" || r.Value.Workspace == ws)
	})
	if err != nil {
		return err
	}
	out := make([]api.Session, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.Value)
	}
	return c.page("sessions", out, next)
}
