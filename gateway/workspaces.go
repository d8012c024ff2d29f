package gateway

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/rodon-compute/rodon/api"
)

type createWorkspaceRequest struct {
	Name string `json:"name"`
}

func (g *Gateway) handleWorkspaces(c *call) error {
	recs, err := listRecords[Workspace](c.ctx, g.store, kindWorkspace, "")
	if err != nil {
		return err
	}
	out := []Workspace{}
	for _, r := range recs {
		if c.p.canSee(r.Value.ID) {
			out = append(out, r.Value)
		}
	}
	slices.SortFunc(out, func(a, b Workspace) int { return strings.Compare(a.Name, b.Name) })
	return c.json(http.StatusOK, out)
}

func (g *Gateway) handleCreateWorkspace(c *call) error {
	var req createWorkspaceRequest
	if err := c.decode(&req); err != nil {
		return err
	}
	if err := checkName("name", req.Name); err != nil {
		return err
	}
	ws := Workspace{ID: newID(prefixWorkspace), Name: req.Name, CreatedAt: g.now()}
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
	var w Workspace
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

type createSessionRequest struct {
	Workspace string `json:"workspace"`
	Title     string `json:"title"`
}

func (g *Gateway) handleCreateSession(c *call) error {
	var req createSessionRequest
	if err := c.decode(&req); err != nil {
		return err
	}
	if err := g.checkWorkspace(c, "workspace", req.Workspace); err != nil {
		return err
	}
	if utf8.RuneCountInString(req.Title) > 200 || !utf8.ValidString(req.Title) {
		return badRequest("field \"title\": want at most 200 characters")
	}
	s := Session{ID: newID(prefixSession), Workspace: req.Workspace, Title: req.Title, CreatedBy: c.p.actor, CreatedAt: g.now()}
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
	recs, err := listRecords[Session](c.ctx, g.store, kindSession, "")
	if err != nil {
		return err
	}
	out := []Session{}
	for _, r := range recs {
		if c.p.canSee(r.Value.Workspace) && (ws == "" || r.Value.Workspace == ws) {
			out = append(out, r.Value)
		}
	}
	slices.SortFunc(out, func(a, b Session) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return c.json(http.StatusOK, out)
}

func (g *Gateway) handleAudit(c *call) error {
	q := c.r.URL.Query()
	var after uint64
	limit := 100
	if s := q.Get("after"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return badRequest("query parameter after %q: want a non-negative integer (an entry's seq)", s)
		}
		after = v
	}
	if s := q.Get("limit"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > 1000 {
			return badRequest("query parameter limit %q: want 1 to 1000", s)
		}
		limit = v
	}
	entries, err := g.store.Audit(c.ctx, after, limit)
	if err != nil {
		return err
	}
	if entries == nil {
		entries = []api.AuditEntry{}
	}
	return c.json(http.StatusOK, entries)
}
