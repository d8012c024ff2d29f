package agentd

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/pki"
)

// access says who may use the agent's own routes.
type access struct {
	// authenticated is set when the listener serves mutual TLS: every
	// request then carries a verified cluster identity. Without it
	// (--plaintext, loopback only) nothing is checked.
	authenticated bool
	// seenGateway, if set, learns the source address of every request
	// made with a gateway certificate (the control plane denies it to
	// sandboxes).
	seenGateway func(name string, a netip.Addr, now time.Time)
}

// streamRoles may read step streams and send terminal input: the gateway
// relays them, an operator's schedctl reads logs. An agent or member
// certificate may not: one node must not read another's streams or type
// into its terminals.
var streamRoles = []pki.Role{pki.RoleGateway, pki.RoleOperator}

// only serves h to the roles given; any other identity gets 403 naming
// itself and action.
func (a access) only(action string, h http.Handler, roles ...pki.Role) http.Handler {
	if !a.authenticated {
		return h
	}
	allow := pki.AllowRoles(roles...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := pki.PeerIdentity(r.TLS)
		if !ok {
			writeError(w, http.StatusForbidden, api.CodeForbidden, "no verified client certificate: "+action+" needs a gateway or operator certificate")
			return
		}
		if allow(id) != nil {
			writeError(w, http.StatusForbidden, api.CodeForbidden,
				fmt.Sprintf("%s may not %s: only a %s certificate may", id, action, joinRoles(roles)))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// observe tells seenGateway the source address of each gateway request
// before serving it.
func (a access) observe(h http.Handler) http.Handler {
	if !a.authenticated || a.seenGateway == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, ok := pki.PeerIdentity(r.TLS); ok && id.Role == pki.RoleGateway {
			if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
				a.seenGateway(id.Name, ap.Addr(), time.Now())
			}
		}
		h.ServeHTTP(w, r)
	})
}

func joinRoles(roles []pki.Role) string {
	s := make([]string, len(roles))
	for i, r := range roles {
		s[i] = string(r)
	}
	return strings.Join(s, " or ")
}

// urlHosts returns the hosts of the URLs (IP literals or names).
func urlHosts(urls []string) []string {
	var out []string
	for _, s := range urls {
		if u, err := url.Parse(s); err == nil && u.Hostname() != "" {
			out = append(out, u.Hostname())
		}
	}
	return out
}
