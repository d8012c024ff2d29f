package gateway

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// The audit log per tenant (docs/GATEWAY.md, "Audit"): every entry the
// gateway appends names the tenant of its call (appendAudit), and the
// routes read and drop only the caller's tenant's entries.

// handleAudit is the export of the audit log: the caller's tenant's
// entries, oldest first, filtered by ?who=, ?action=, ?since= and
// ?until= (RFC 3339), after ?after=SEQ or from ?cursor= (X-Next-Cursor of
// the page before). A page may hold fewer than ?limit= entries, even
// none, and still have a next cursor: the scheduler examines a bounded
// number of entries per page.
func (g *Gateway) handleAudit(c *call) error {
	q := c.r.URL.Query()
	pg, err := parsePage(q, "audit")
	if err != nil {
		return err
	}
	f, err := auditFilter(q)
	if err != nil {
		return err
	}
	if f.After != 0 && pg.at != (position{}) {
		return badRequest("query parameters after and cursor: give one")
	}
	f.Tenant = tenantFrom(c.ctx)
	entries, next, err := g.store.AuditPage(c.ctx, f, pg.limit, pg.at.store)
	if client.IsCode(err, api.CodeBadRequest) && pg.at.store != "" {
		// Every other parameter was checked above.
		return badRequest("query parameter cursor: not a cursor of audit; pass the %s header of the previous page", nextCursorHeader)
	}
	if err != nil {
		return err
	}
	if entries == nil {
		entries = []api.AuditEntry{}
	}
	return c.page("audit", entries, position{store: next})
}

// auditFilter reads the filter of GET /v1/audit (all but the tenant,
// which is the caller's); errors are 400s naming the parameter.
func auditFilter(q url.Values) (api.AuditFilter, error) {
	var f api.AuditFilter
	f.Who, f.Action = q.Get("who"), q.Get("action")
	for _, p := range []struct{ name, v string }{{"who", f.Who}, {"action", f.Action}} {
		if len(p.v) > maxAuditParam || strings.IndexFunc(p.v, unicode.IsControl) >= 0 || !utf8.ValidString(p.v) {
			return f, badRequest("query parameter %s %q: want an account or key id (who) or an action name (action), at most %d bytes", p.name, truncateText(p.v, 30), maxAuditParam)
		}
	}
	for _, p := range []struct {
		name string
		to   *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		s := q.Get(p.name)
		if s == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return f, badRequest("query parameter %s %q: want a time in RFC 3339, as 2026-03-01T12:00:00Z", p.name, truncateText(s, 40))
		}
		*p.to = t
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return f, badRequest("query parameter until: %s is not after since %s", f.Until.Format(time.RFC3339), f.Since.Format(time.RFC3339))
	}
	if s := q.Get("after"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return f, badRequest("query parameter after %q: want a non-negative integer (an entry's seq)", truncateText(s, 30))
		}
		f.After = v
	}
	return f, nil
}

// maxAuditParam bounds ?who= and ?action= (the scheduler's limit of the
// fields they match).
const maxAuditParam = 200

// handleDropAudit drops the caller's tenant's audit entries before a
// seq, through the scheduler, which leaves every other tenant's and
// appends an entry of the tenant saying so and naming the caller (the
// gateway's audit document of this call, as "by"): that entry is the
// drop's audit.
func (g *Gateway) handleDropAudit(c *call) error {
	var req api.AuditDropRequest
	if err := c.decode(&req); err != nil {
		return err
	}
	if req.Before == 0 {
		return badRequest("field \"before\": want the seq of the first entry to keep (export the entries before it first)")
	}
	c.target = "before " + strconv.FormatUint(req.Before, 10)
	doc := g.auditDoc(c, "audit.drop", "ok")
	by, _ := json.Marshal(doc)
	n, err := g.store.DropTenantAudit(c.ctx, doc.Account, req.Before, doc.Who, by)
	if err != nil {
		return err
	}
	c.audited = true
	return c.json(http.StatusOK, api.AuditDropAnswer{Dropped: n})
}
