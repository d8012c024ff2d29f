package cluster

import (
	"fmt"
	"net/netip"
	"time"
)

// PlatformKind says what part of the control plane a platform address
// belongs to.
type PlatformKind string

// Platform address kinds.
const (
	// PlatformMember is a scheduler member's HTTP or Raft address.
	PlatformMember PlatformKind = "member"
	// PlatformNode is a node agent's registered address.
	PlatformNode PlatformKind = "node"
	// PlatformGateway is an address a gateway registered for itself.
	PlatformGateway PlatformKind = "gateway"
)

// PlatformAddr is one address of the control plane: sandboxes must never
// reach it.
type PlatformAddr struct {
	Kind PlatformKind `json:"kind"`
	// Name is the member id, node id or gateway name.
	Name string     `json:"name"`
	Addr netip.Addr `json:"addr"`
}

// Platform is the answer of GET /v1/agent/platform: every address of the
// control plane the scheduler knows, which each agent denies to its
// sandboxes. Index is the state index it was read at.
type Platform struct {
	Index     uint64         `json:"index"`
	Addresses []PlatformAddr `json:"addresses"`
}

// Gateway records, their bounds and lifetime.
const (
	// MaxGateways bounds the gateways the scheduler keeps a record of at
	// once; a new name past it is refused until a record expires.
	MaxGateways = 64
	// MaxGatewayAddrs bounds the addresses of one gateway record.
	MaxGatewayAddrs = 16
	// GatewayTTL is how long a gateway record lasts after its last PUT:
	// a gateway that went away stops being listed a day later. It is
	// long so that a gateway that cannot reach the scheduler for a while
	// stays denied to sandboxes.
	GatewayTTL = 24 * time.Hour
	// GatewayRefresh is how often a gateway should PUT its record again
	// (at start and then at this interval), well within GatewayTTL.
	GatewayRefresh = 10 * time.Minute
)

// Gateway is the replicated record of one gateway's addresses. A PUT
// replaces the whole record; it expires GatewayTTL after Updated.
type Gateway struct {
	Name        string       `json:"name"`
	Addresses   []netip.Addr `json:"addresses"`
	Updated     time.Time    `json:"updated"`
	CreateIndex uint64       `json:"create_index"`
	ModifyIndex uint64       `json:"modify_index"`
}

// Expired reports whether the record has expired at now.
func (g Gateway) Expired(now time.Time) bool { return !now.Before(g.Updated.Add(GatewayTTL)) }

// SetGateway creates or replaces the record of gateway Name with the
// leader's time At; records expired at At are dropped by the same entry.
type SetGateway struct {
	Name      string       `json:"name"`
	Addresses []netip.Addr `json:"addresses"`
	At        time.Time    `json:"at"`
}

// CommandType implements Command.
func (SetGateway) CommandType() CommandType { return CmdSetGateway }

// ValidateGatewayAddrs checks the addresses of a gateway record: one to
// MaxGatewayAddrs distinct unicast addresses without a zone, IPv4 written
// as IPv4 (not ::ffff:a.b.c.d), none unspecified or multicast.
func ValidateGatewayAddrs(addrs []netip.Addr) error {
	if len(addrs) == 0 {
		return fmt.Errorf("no address: want 1 to %d IP addresses", MaxGatewayAddrs)
	}
	if len(addrs) > MaxGatewayAddrs {
		return fmt.Errorf("%d addresses: at most %d", len(addrs), MaxGatewayAddrs)
	}
	seen := make(map[netip.Addr]bool, len(addrs))
	for i, a := range addrs {
		switch {
		case !a.IsValid():
			return fmt.Errorf("address %d: missing", i+1)
		case a.Zone() != "":
			return fmt.Errorf("address %d %q: has a zone: want a global address", i+1, a)
		case a.Is4In6():
			return fmt.Errorf("address %d %q: an IPv4-mapped IPv6 address: write it as %s", i+1, a, a.Unmap())
		case a.IsUnspecified(), a.IsMulticast():
			return fmt.Errorf("address %d %q: want a unicast address", i+1, a)
		case seen[a]:
			return fmt.Errorf("address %d %q: given twice", i+1, a)
		}
		seen[a] = true
	}
	return nil
}
