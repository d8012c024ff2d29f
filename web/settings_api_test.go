package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// settingsAPI is a stand-in for the gateway's account routes (members,
// keys, secrets, the audit log, accounts and the switch; docs/design/
// tenants.md) answering package api's shapes. One person, acct-me, is a
// member of several tenants with a role in each; every record belongs to
// one tenant, and the sign-in acts in the current one.
type settingsAPI struct {
	mu      sync.Mutex
	me      string // the person's email
	current string // the tenant the sign-in acts in
	order   []string
	tenants map[string]*fakeTenant
	// secretValues are the values PUT, by tenant and name: what the page
	// sent, which no answer ever holds.
	secretValues map[string]string
	// keySecrets are the secrets of the keys made, by key id.
	keySecrets map[string]string
	// passwords are the first passwords of the members invited, by email.
	passwords map[string]string
	seq       uint64
	now       time.Time
}

type fakeTenant struct {
	api.Tenant
	members []api.Account
	keys    []api.Key
	secrets []api.Secret
	audit   []api.AuditEntry
}

const testMe = "acct-me"

func newSettingsAPI(now time.Time) *settingsAPI {
	return &settingsAPI{me: "owner@example.com", tenants: map[string]*fakeTenant{}, secretValues: map[string]string{},
		keySecrets: map[string]string{}, passwords: map[string]string{}, now: now}
}

// addTenant adds a tenant in which the person has role; the first one added is current.
func (f *settingsAPI) addTenant(id, name string, role api.Role) *fakeTenant {
	t := &fakeTenant{Tenant: api.Tenant{ID: id, Name: name, CreatedAt: f.now.Add(-24 * time.Hour)}}
	t.members = []api.Account{{ID: testMe, Email: f.me, Role: role, Workspaces: []string{}, CreatedAt: f.now.Add(-24 * time.Hour)}}
	f.tenants[id] = t
	f.order = append(f.order, id)
	if f.current == "" {
		f.current = id
	}
	return t
}

// tenant is the current tenant; f.mu is held.
func (f *settingsAPI) tenant() *fakeTenant { return f.tenants[f.current] }

// role is the person's role in the current tenant; f.mu is held.
func (f *settingsAPI) role() api.Role {
	for _, m := range f.tenant().members {
		if m.ID == testMe {
			return m.Role
		}
	}
	return api.RoleNone
}

// auditf appends an audit entry to t; f.mu is held.
func (f *settingsAPI) auditf(t *fakeTenant, who string, role api.Role, action, target, result string) {
	f.seq++
	doc, _ := json.Marshal(api.AuditDocument{Who: who, Role: role.String(), Action: action, Target: target, Result: result, Client: "192.0.2.7"})
	t.audit = append(t.audit, api.AuditEntry{Seq: f.seq, Time: f.now.Add(time.Duration(f.seq) * time.Second), Entry: doc})
}

// page answers items from the cursor (an index) on, limit at a time, with X-Next-Cursor as the gateway's lists.
func page[T any](w http.ResponseWriter, r *http.Request, items []T) {
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	from, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
	from = min(from, len(items))
	to := min(from+limit, len(items))
	if to < len(items) {
		w.Header().Set("X-Next-Cursor", strconv.Itoa(to))
	}
	out := append([]T{}, items[from:to]...)
	writeJSON(w, 200, out)
}

func (f *settingsAPI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(FS()))
	// locked runs h with f.mu held; write also wants the CSRF token and
	// at least role least, as the gateway's route table does.
	locked := func(least api.Role, write bool, h func(w http.ResponseWriter, r *http.Request, t *fakeTenant)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			defer f.mu.Unlock()
			if write && r.Header.Get("X-CSRF-Token") != "csrf-"+f.current {
				writeJSON(w, 403, api.NewError(api.CodeForbidden, "missing or stale X-CSRF-Token"))
				return
			}
			if f.role() < least {
				writeJSON(w, 403, api.NewError(api.CodeForbidden, fmt.Sprintf("%s needs the %s role; you are %s", r.Pattern, least, f.role())))
				return
			}
			h(w, r, f.tenant())
		}
	}
	mux.HandleFunc("GET /v1/me", locked(api.RoleViewer, false, func(w http.ResponseWriter, r *http.Request, t *fakeTenant) {
		me := t.members[slices.IndexFunc(t.members, func(m api.Account) bool { return m.ID == testMe })]
		writeJSON(w, 200, api.Me{Account: &me, Role: me.Role, Workspaces: me.Workspaces, CSRFToken: "csrf-" + f.current})
	}))
	mux.HandleFunc("GET /v1/accounts", locked(api.RoleViewer, false, func(w http.ResponseWriter, r *http.Request, _ *fakeTenant) {
		var out []api.Tenant
		for _, id := range f.order {
			t := f.tenants[id]
			for _, m := range t.members {
				if m.ID == testMe {
					a := t.Tenant
					a.Role, a.Current = m.Role, id == f.current
					out = append(out, a)
				}
			}
		}
		writeJSON(w, 200, out)
	}))
	mux.HandleFunc("POST /v1/auth/switch", locked(api.RoleViewer, true, func(w http.ResponseWriter, r *http.Request, t *fakeTenant) {
		var req api.SwitchAccountRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || f.tenants[req.Account] == nil {
			writeJSON(w, 404, api.NewError(api.CodeNotFound, fmt.Sprintf("no account %q of yours", req.Account)))
			return
		}
		f.auditf(t, testMe, f.role(), "auth.switch", req.Account, "ok")
		f.current = req.Account
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.HandleFunc("GET /v1/workspaces", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, []api.Workspace{{ID: "ws-sales", Name: "sales"}, {ID: "ws-ops", Name: "ops"}})
	})

	mux.HandleFunc("GET /v1/members", locked(api.RoleAdmin, false, func(w http.ResponseWriter, r *http.Request, t *fakeTenant) {
		page(w, r, t.members)
	}))
	mux.HandleFunc("POST /v1/members", locked(api.RoleAdmin, true, func(w http.ResponseWriter, r *http.Request, t *fakeTenant) {
		var req api.CreateMemberRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeJSON(w, 400, api.NewError(api.CodeBadRequest, err.Error()))
			return
		}
		if slices.ContainsFunc(t.members, func(m api.Account) bool { return m.Email == req.Email }) {
			f.auditf(t, testMe, f.role(), "member.create", "", api.CodeConflict)
			writeJSON(w, 409, api.NewError(api.CodeConflict, "a member with email "+req.Email+" exists already"))
			return
		}
		m := api.Account{ID: "acct-" + strings.NewReplacer("@", "", ".", "").Replace(req.Email), Email: req.Email, Role: req.Role,
			Workspaces: orEmpty(req.Workspaces), CreatedAt: f.now}
		t.members = append(t.members, m)
		f.passwords[req.Email] = req.Password
		f.auditf(t, testMe, f.role(), "member.create", m.ID, "ok")
		writeJSON(w, 201, m)
	}))
	mux.HandleFunc("PATCH /v1/members/{id}", locked(api.RoleAdmin, true, func(w http.ResponseWriter, r *http.Request, t *fakeTenant) {
		i := slices.IndexFunc(t.members, func(m api.Account) bool { return m.ID == r.PathValue("id") })
		var req api.UpdateMemberRequest
		if i < 0 || json.NewDecoder(r.Body).Decode(&req) != nil {
			writeJSON(w, 404, api.NewError(api.CodeNotFound, "no member "+r.PathValue("id")))
			return
		}
		if req.Role != nil {
			t.members[i].Role = *req.Role
		}
		if req.Workspaces != nil {
			t.members[i].Workspaces = *req.Workspaces
		}
		f.auditf(t, testMe, f.role(), "member.update", t.members[i].ID, "ok")
		writeJSON(w, 200, t.members[i])
	}))
	mux.HandleFunc("DELETE /v1/members/{id}", locked(api.RoleAdmin, true, func(w http.ResponseWriter, r *http.Request, t *fakeTenant) {
		n := len(t.members)
		t.members = slices.DeleteFunc(t.members, func(m api.Account) bool { return m.ID == r.PathValue("id") })
		if len(t.members) == n {
			writeJSON(w, 404, api.NewError(api.CodeNotFound, "no member "+r.PathValue("id")))
			return
		}
		f.auditf(t, testMe, f.role(), "member.delete", r.PathValue("id"), "ok")
		w.WriteHeader(http.StatusNoContent)
	}))

	mux.HandleFunc("GET /v1/keys", locked(api.RoleAdmin, false, func(w http.ResponseWriter, r *http.Request, t *fakeTenant) {
		page(w, r, t.keys)
	}))
	mux.HandleFunc("POST /v1/keys", locked(api.RoleAdmin, true, func(w http.ResponseWriter, r *http.Request, t *fakeTenant) {
		var req api.CreateKeyRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Name == "" {
			writeJSON(w, 400, api.NewError(api.CodeBadRequest, "field \"name\": want 1 to 100 characters without control characters"))
			return
		}
		id := fmt.Sprintf("key-%04d", len(f.keySecrets)+1)
		k := api.Key{ID: id, Name: req.Name, Role: req.Role, Workspaces: orEmpty(req.Workspaces), CreatedAt: f.now}
		t.keys = append(t.keys, k)
		f.keySecrets[id] = fmt.Sprintf("rk_%s_%x", strings.TrimPrefix(id, "key-"), f.now.UnixNano()+int64(len(f.keySecrets)))
		f.auditf(t, testMe, f.role(), "key.create", id, "ok")
		writeJSON(w, 201, api.CreateKeyAnswer{Key: k, Secret: f.keySecrets[id]})
	}))
	mux.HandleFunc("DELETE /v1/keys/{id}", locked(api.RoleAdmin, true, func(w http.ResponseWriter, r *http.Request, t *fakeTenant) {
		n := len(t.keys)
		t.keys = slices.DeleteFunc(t.keys, func(k api.Key) bool { return k.ID == r.PathValue("id") })
		if len(t.keys) == n {
			writeJSON(w, 404, api.NewError(api.CodeNotFound, "no key "+r.PathValue("id")))
			return
		}
		f.auditf(t, testMe, f.role(), "key.delete", r.PathValue("id"), "ok")
		w.WriteHeader(http.StatusNoContent)
	}))

	mux.HandleFunc("GET /v1/secrets", locked(api.RoleViewer, false, func(w http.ResponseWriter, r *http.Request, t *fakeTenant) {
		page(w, r, t.secrets)
	}))
	mux.HandleFunc("PUT /v1/secrets/{name}", locked(api.RoleAdmin, true, func(w http.ResponseWriter, r *http.Request, t *fakeTenant) {
		var req api.PutSecretRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Value == "" {
			writeJSON(w, 400, api.NewError(api.CodeBadRequest, "field \"value\": want 1 byte or more"))
			return
		}
		name := r.PathValue("name")
		f.secretValues[t.ID+"/"+name] = req.Value
		i := slices.IndexFunc(t.secrets, func(s api.Secret) bool { return s.Name == name })
		if i < 0 {
			t.secrets = append(t.secrets, api.Secret{Name: name, CreatedAt: f.now})
			i = len(t.secrets) - 1
		}
		s := &t.secrets[i]
		s.Version++
		s.UpdatedBy, s.UpdatedAt = api.Actor{Kind: api.AuthorAccount, ID: testMe}, f.now.Add(time.Duration(s.Version)*time.Minute)
		f.auditf(t, testMe, f.role(), "secret.put", fmt.Sprintf("%s v%d", name, s.Version), "ok")
		writeJSON(w, 200, *s)
	}))
	mux.HandleFunc("DELETE /v1/secrets/{name}", locked(api.RoleAdmin, true, func(w http.ResponseWriter, r *http.Request, t *fakeTenant) {
		n := len(t.secrets)
		t.secrets = slices.DeleteFunc(t.secrets, func(s api.Secret) bool { return s.Name == r.PathValue("name") })
		if len(t.secrets) == n {
			writeJSON(w, 404, api.NewError(api.CodeNotFound, "no secret "+r.PathValue("name")))
			return
		}
		f.auditf(t, testMe, f.role(), "secret.delete", r.PathValue("name"), "ok")
		w.WriteHeader(http.StatusNoContent)
	}))

	// The audit log, oldest first, filtered by who, action and time; the
	// cursor is the seq after which the page starts.
	mux.HandleFunc("GET /v1/audit", locked(api.RoleAdmin, false, func(w http.ResponseWriter, r *http.Request, t *fakeTenant) {
		q := r.URL.Query()
		limit, _ := strconv.Atoi(q.Get("limit"))
		if limit <= 0 || limit > 1000 {
			limit = 100
		}
		after, _ := strconv.ParseUint(q.Get("cursor"), 10, 64)
		var since, until time.Time
		for _, p := range []struct {
			name string
			t    *time.Time
		}{{"since", &since}, {"until", &until}} {
			if s := q.Get(p.name); s != "" {
				v, err := time.Parse(time.RFC3339, s)
				if err != nil {
					writeJSON(w, 400, api.NewError(api.CodeBadRequest, "query parameter "+p.name+": want an RFC 3339 time"))
					return
				}
				*p.t = v
			}
		}
		out := []api.AuditEntry{}
		for _, e := range t.audit {
			var doc api.AuditDocument
			json.Unmarshal(e.Entry, &doc)
			switch {
			case e.Seq <= after,
				q.Get("who") != "" && doc.Who != q.Get("who"),
				q.Get("action") != "" && doc.Action != q.Get("action"),
				!since.IsZero() && e.Time.Before(since),
				!until.IsZero() && !e.Time.Before(until):
				continue
			}
			if len(out) == limit {
				w.Header().Set("X-Next-Cursor", strconv.FormatUint(out[len(out)-1].Seq, 10))
				break
			}
			out = append(out, e)
		}
		writeJSON(w, 200, out)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self'")
		mux.ServeHTTP(w, r)
	})
}

// orEmpty is ids, or [] (not null) when there are none, as the gateway answers.
func orEmpty(ids []string) []string {
	if ids == nil {
		return []string{}
	}
	return ids
}
