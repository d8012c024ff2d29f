// Package pki is the trust between Rodon's components: one cluster CA, leaf
// certificates that each name one identity with a role, and the mutual TLS
// 1.3 configurations every listener and client uses.
//
// An identity is written in the certificate as a SPIFFE-style URI SAN,
// spiffe://rodon/ROLE/NAME (spiffe://rodon/agent/n1). Peers are verified by
// that identity against the cluster CA, never by host name: a node's
// address can change, its identity cannot. Authorization of what an
// identity may do is the caller's (the scheduler's route table, the agent's
// routes); this package only proves who is on the other end.
//
// Files: a CA directory holds ca.crt and ca.key; `scheduler tls issue`
// writes ROLE-NAME.crt and ROLE-NAME.key next to them. A daemon loads its
// pair and ca.crt through a Source, which re-reads them when they change on
// disk (checked at most once a second, at handshakes) or when Reload is
// called (SIGHUP), so certificates rotate without a restart.
package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/rodon-compute/rodon/cluster"
)

// Role is what an identity is to the cluster.
type Role string

// The roles of SPEC's trust boundary.
const (
	// RoleMember is a scheduler member: Raft, forwarding, joining.
	RoleMember Role = "member"
	// RoleAgent is one node's agentd; its name is the node id.
	RoleAgent Role = "agent"
	// RoleGateway is a gateway: records, audit, steps and streams.
	RoleGateway Role = "gateway"
	// RoleOperator is a person or script using schedctl.
	RoleOperator Role = "operator"
)

// Roles lists every role, in order of the constants.
var Roles = []Role{RoleMember, RoleAgent, RoleGateway, RoleOperator}

// ParseRole checks s names a role.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("role %q: want member, agent, gateway or operator", s)
}

// TrustDomain is the host part of every identity URI.
const TrustDomain = "rodon"

// Identity is who a certificate names: a role and a name unique within it
// (a node id for an agent, a member id for a member).
type Identity struct {
	Role Role
	Name string
}

// NewIdentity checks role and name (the grammar of node and member ids,
// cluster.ValidateName) and returns the identity.
func NewIdentity(role Role, name string) (Identity, error) {
	if _, err := ParseRole(string(role)); err != nil {
		return Identity{}, err
	}
	if err := cluster.ValidateName("name", name); err != nil {
		return Identity{}, err
	}
	return Identity{Role: role, Name: name}, nil
}

// String is ROLE/NAME, as logs and refusals show it.
func (id Identity) String() string { return string(id.Role) + "/" + id.Name }

// IsZero reports whether id is the zero Identity.
func (id Identity) IsZero() bool { return id == Identity{} }

// URI is the identity's URI SAN: spiffe://rodon/ROLE/NAME.
func (id Identity) URI() *url.URL {
	return &url.URL{Scheme: "spiffe", Host: TrustDomain, Path: "/" + string(id.Role) + "/" + id.Name}
}

// ParseIdentity parses ROLE/NAME (the form String prints).
func ParseIdentity(s string) (Identity, error) {
	role, name, ok := strings.Cut(s, "/")
	if !ok {
		return Identity{}, fmt.Errorf("identity %q: want ROLE/NAME", s)
	}
	return NewIdentity(Role(role), name)
}

// ErrNoIdentity is returned for a certificate that names no Rodon
// identity.
var ErrNoIdentity = errors.New("certificate names no rodon identity")

// IdentityOf returns the identity a certificate names in its one
// spiffe://rodon/ URI SAN.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	var found []Identity
	for _, u := range cert.URIs {
		if u.Scheme != "spiffe" || u.Host != TrustDomain {
			continue
		}
		id, err := ParseIdentity(strings.TrimPrefix(u.Path, "/"))
		if err != nil || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return Identity{}, fmt.Errorf("%w: bad URI SAN %q", ErrNoIdentity, u.String())
		}
		found = append(found, id)
	}
	switch len(found) {
	case 0:
		return Identity{}, fmt.Errorf("%w (subject %q)", ErrNoIdentity, cert.Subject.CommonName)
	case 1:
		return found[0], nil
	}
	return Identity{}, fmt.Errorf("%w: %d identity URIs, want one", ErrNoIdentity, len(found))
}

// An Authorizer decides whether a verified peer may be on the other end of
// a connection; its error, naming the identity, fails the handshake.
type Authorizer func(Identity) error

// AnyIdentity accepts every identity the cluster CA issued.
func AnyIdentity(Identity) error { return nil }

// AllowRoles accepts identities of the given roles.
func AllowRoles(roles ...Role) Authorizer {
	return func(id Identity) error {
		for _, r := range roles {
			if id.Role == r {
				return nil
			}
		}
		return fmt.Errorf("peer %s: want role %s", id, joinRoles(roles))
	}
}

// AllowIdentity accepts exactly want.
func AllowIdentity(want Identity) Authorizer {
	return func(id Identity) error {
		if id != want {
			return fmt.Errorf("peer %s: want %s", id, want)
		}
		return nil
	}
}

func joinRoles(roles []Role) string {
	s := make([]string, len(roles))
	for i, r := range roles {
		s[i] = string(r)
	}
	return strings.Join(s, " or ")
}
