package api

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Role is what a member or API key of the gateway may do. Roles are
// ordered: each may do everything the ones below it may. In JSON a role is
// its name ("viewer").
type Role int

// The roles, least first. RoleNone is no credential at all.
const (
	RoleNone Role = iota
	RoleViewer
	RoleEditor
	RoleAdmin
	RoleOwner
)

var roleNames = []string{"none", "viewer", "editor", "admin", "owner"}

func (r Role) String() string {
	if r < 0 || int(r) >= len(roleNames) {
		return fmt.Sprintf("role(%d)", int(r))
	}
	return roleNames[r]
}

// ParseRole parses viewer, editor, admin or owner.
func ParseRole(s string) (Role, error) {
	i := slices.Index(roleNames, s)
	if i <= 0 {
		return RoleNone, fmt.Errorf("role %q: want viewer, editor, admin or owner", s)
	}
	return Role(i), nil
}

// MarshalJSON implements json.Marshaler.
func (r Role) MarshalJSON() ([]byte, error) { return json.Marshal(r.String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (r *Role) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a role string such as \"editor\"")
	}
	v, err := ParseRole(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}
