package netpolicy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"time"
)

// Naming of the objects a Manager creates. Sweep finds leftovers by these
// names, so they must not change without a migration.
const (
	// NSPrefix starts the name of every sandbox namespace: rodon-<id>.
	NSPrefix = "rodon-"
	// VethPrefix starts the name of every host-side veth: rv<12 hex digits>.
	VethPrefix = "rv"
	// SandboxIfname is the name of the veth peer inside a sandbox namespace.
	SandboxIfname = "eth0"
	// NATTable is the nftables table (family inet) holding the masquerade rules.
	NATTable = "rodon"
)

// SandboxLinkLocal is the IPv6 link-local address of every sandbox's eth0
// (each is alone on its link with the node): the only source, besides ::,
// from which the egress filter lets a sandbox's neighbour discovery pass.
var SandboxLinkLocal = netip.MustParseAddr("fe80::2")

// DefaultNSDir is where named network namespaces are bind-mounted, as by
// ip-netns(8).
const DefaultNSDir = "/run/netns"

// Config configures a Manager. The zero value of each field means its default.
type Config struct {
	// HostNS is the path of the node's network namespace, in which the
	// host-side veths, forwarding and NAT live. Empty means the namespace of
	// the thread calling NewManager. Tests point it at a namespace they made.
	HostNS string
	// NSDir is where sandbox namespaces are bind-mounted (default /run/netns).
	NSDir string
	// Pool4 and Pool6 are the address pools carved into per-sandbox links
	// (defaults 10.200.0.0/16 and fd00:200::/64).
	Pool4, Pool6 netip.Prefix
	// Link4Bits and Link6Bits are the prefix lengths of one sandbox's link
	// (defaults 30 and 126; 31 and 127 are allowed).
	Link4Bits, Link6Bits int
	// Nft is the nft binary (default "nft").
	Nft string
}

// DefaultConfig returns the configuration used by agentd.
func DefaultConfig() Config {
	return Config{
		NSDir:     DefaultNSDir,
		Pool4:     netip.MustParsePrefix("10.200.0.0/16"),
		Pool6:     netip.MustParsePrefix("fd00:200::/64"),
		Link4Bits: 30,
		Link6Bits: 126,
		Nft:       "nft",
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.NSDir == "" {
		c.NSDir = d.NSDir
	}
	if !c.Pool4.IsValid() {
		c.Pool4 = d.Pool4
	}
	if !c.Pool6.IsValid() {
		c.Pool6 = d.Pool6
	}
	if c.Link4Bits == 0 {
		c.Link4Bits = d.Link4Bits
	}
	if c.Link6Bits == 0 {
		c.Link6Bits = d.Link6Bits
	}
	if c.Nft == "" {
		c.Nft = d.Nft
	}
	return c
}

// SandboxNet describes the network of one sandbox, as made by Setup.
type SandboxNet struct {
	// ID is the sandbox ID given to Setup.
	ID string
	// NSPath is the bind-mounted namespace (<NSDir>/rodon-<id>), for the
	// network namespace of the sandbox's OCI spec.
	NSPath string
	// HostIfname and HostIfindex name the host-side veth in the node's
	// namespace; the ifindex is resolved there (attach the egress filter to
	// its ingress).
	HostIfname  string
	HostIfindex int
	// Addr4 and Addr6 are the sandbox's addresses on eth0, with the link's
	// prefix length; Gateway4 and Gateway6 are the host end's addresses and
	// the sandbox's default routes.
	Addr4, Addr6       netip.Prefix
	Gateway4, Gateway6 netip.Addr

	begun time.Time // when Begin started, for Plumb's log
}

// NSName returns the namespace name of sandbox id.
func NSName(id string) string { return NSPrefix + id }

// HostIfname returns the host-side veth name of sandbox id: "rv" and the
// first 12 hex digits of the SHA-256 of id (14 characters; IFNAMSIZ is 16).
func HostIfname(id string) string {
	sum := sha256.Sum256([]byte(id))
	return VethPrefix + hex.EncodeToString(sum[:6])
}

// isHostIfname reports whether name has the shape HostIfname produces.
func isHostIfname(name string) bool {
	if len(name) != len(VethPrefix)+12 || name[:len(VethPrefix)] != VethPrefix {
		return false
	}
	_, err := hex.DecodeString(name[len(VethPrefix):])
	return err == nil
}

// validID checks that id can be part of a file name and is short enough.
func validID(id string) error {
	if id == "" || len(id) > 128 || id == "." || id == ".." {
		return fmt.Errorf("invalid sandbox id %q: want 1 to 128 characters from [A-Za-z0-9_.-]", id)
	}
	for _, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-'
		if !ok {
			return fmt.Errorf("invalid sandbox id %q: want 1 to 128 characters from [A-Za-z0-9_.-]", id)
		}
	}
	return nil
}
