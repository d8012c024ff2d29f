package gateway

import (
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// Scrub removes provider identifiers from s, a text of the scheduler's
// meant for users (a step's reason, a cancel's, a refusal): the given
// known names (the step's node), URLs, host:port pairs, IP addresses,
// long hex ids (container ids, digests), runtime names and host paths.
// Each is replaced by a bracketed word saying what was there ("[node]",
// "[address]", "[id]"). Events are not scrubbed: the gateway writes
// their messages itself from their payloads (publicEvent). A node's
// failure reasons are classified on the node and hold no runtime error.
func Scrub(s string, known ...string) string {
	for _, k := range known {
		if len(k) >= 2 {
			s = strings.ReplaceAll(s, k, "[node]")
		}
	}
	s = urlRE.ReplaceAllStringFunc(s, func(m string) string {
		return "[url]" + m[len(strings.TrimRight(m, ":.")):]
	})
	s = addrRE.ReplaceAllStringFunc(s, scrubAddr)
	s = hostPortRE.ReplaceAllString(s, "${1}[address]")
	s = hexRE.ReplaceAllString(s, "[id]")
	s = runtimeRE.ReplaceAllString(s, "[runtime]")
	s = pathRE.ReplaceAllStringFunc(s, func(m string) string {
		lead := ""
		if m[0] != '/' {
			lead = m[:1]
		}
		return lead + "[path]" + m[len(strings.TrimRight(m, ":.")):]
	})
	return s
}

var (
	urlRE = regexp.MustCompile(`\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"',;)]+`)
	// addrRE finds what may be an IP address, with brackets, zone or port;
	// scrubAddr checks it.
	addrRE     = regexp.MustCompile(`\[?[0-9a-fA-F]*[.:][0-9a-fA-F.:]*[0-9a-fA-F](%[\w.-]+)?\]?(:[0-9]{1,5})?`)
	hostPortRE = regexp.MustCompile(`(^|[\s("'=])[a-zA-Z0-9.-]*[a-zA-Z][a-zA-Z0-9.-]*:[0-9]{2,5}\b`)
	hexRE      = regexp.MustCompile(`\b[0-9a-fA-F]{32,}\b`)
	runtimeRE  = regexp.MustCompile(`(?i)\b(io\.containerd\.[a-z0-9.]+|containerd(-shim[a-z0-9-]*)?|runsc|gvisor|runc)\b`)
	pathRE     = regexp.MustCompile(`(^|[\s"'(=:])/(var|run|sys|proc|etc|opt|srv|home|root)(/[^\s"',;)]*)?`)
)

// scrubAddr replaces m when it is an IP address (with or without port).
func scrubAddr(m string) string {
	t := strings.TrimSuffix(strings.TrimPrefix(m, "["), "]")
	if _, err := netip.ParseAddr(t); err == nil {
		return "[address]"
	}
	if _, err := netip.ParseAddrPort(m); err == nil {
		return "[address]"
	}
	// A port after the closing bracket, or an IPv4 address and port.
	if i := strings.LastIndexByte(m, ':'); i > 0 {
		if _, err := strconv.Atoi(m[i+1:]); err == nil {
			if _, err := netip.ParseAddr(strings.Trim(m[:i], "[]")); err == nil {
				return "[address]"
			}
		}
	}
	return m
}
