package cluster

import (
	"fmt"
	"regexp"
	"strings"
)

// The id grammars, one per kind, for every binary and the gateway
// (docs/PROTOCOL.md, "Ids"):
//
//	kind                          grammar                                   checked by
//	step id                       1-63 of a-z 0-9 - _, first a-z or 0-9     ValidateStepID
//	workspace id (of the store)   ws- and then as a step id, 63 at most     ValidateWorkspaceID
//	revision id                   rev- and then as a step id, 63 at most    ValidateRevisionID
//	node id                       1-63 of a-z 0-9 . - _, first a-z or 0-9   ValidateNodeID
//	member id, gateway name,      as a node id                              ValidateName
//	operator name (identities)
//	agent name (agents/NAME.md)   1-63 of a-z 0-9 -, first a-z or 0-9       ValidateAgentName
//
// A step id also names the step's sandbox (its containerd container, its
// cgroup and network namespace, its workspace image), so it is narrow. A
// node id, a member id and a gateway's or operator's name are the NAME of
// a certificate identity (spiffe://rodon/ROLE/NAME, internal/pki), which
// also allows '.' so that host names fit. The gateway's own ids (acct-,
// key-, ws-, sess-, run- and s-<run>-<index>) are gateway/ids.go's and fit
// these grammars: a gateway workspace id is a workspace id of the store
// and a gateway step id is a step id.
var (
	stepIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	namePattern   = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)
	agentPattern  = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
)

// ValidateStepID reports whether id can name a step.
func ValidateStepID(id StepID) error {
	if !stepIDPattern.MatchString(string(id)) {
		return fmt.Errorf("step id %q: want 1-63 characters of a-z, 0-9, '-' and '_', starting with a letter or digit", id)
	}
	return nil
}

// ValidateWorkspaceID reports whether id can name a workspace of the
// store (StepSpec.Workspace, the gateway's ws-... ids).
func ValidateWorkspaceID(id string) error {
	if !strings.HasPrefix(id, "ws-") || !stepIDPattern.MatchString(id) {
		return fmt.Errorf("workspace id %q: want ws- and then 1-60 characters of a-z, 0-9, '-' and '_'", id)
	}
	return nil
}

// ValidateRevisionID reports whether id can name a workspace revision.
func ValidateRevisionID(id string) error {
	if !strings.HasPrefix(id, "rev-") || len(id) == len("rev-") || !stepIDPattern.MatchString(id) {
		return fmt.Errorf("revision id %q: want rev- and then 1-59 characters of a-z, 0-9, '-' and '_'", id)
	}
	return nil
}

// ValidateNodeID reports whether id can name a node (its agent's
// identity is agent/ID).
func ValidateNodeID(id NodeID) error { return ValidateName("node id", string(id)) }

// ValidateName reports whether name can be the name of a certificate
// identity: a node id, a member id, a gateway's or an operator's name.
// kind says which in the error ("member id", "gateway name").
func ValidateName(kind, name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("%s %q: want 1-63 characters of a-z, 0-9, '.', '-' and '_', starting with a letter or digit", kind, name)
	}
	return nil
}

// ValidateAgentName reports whether name can name an agent: its file is
// agents/NAME.md of a workspace (gateway/agentfile).
func ValidateAgentName(name string) error {
	if !agentPattern.MatchString(name) {
		return fmt.Errorf("agent name %q: want 1-63 characters of a-z, 0-9 and '-', starting with a letter or digit", name)
	}
	return nil
}
