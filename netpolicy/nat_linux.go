package netpolicy

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// natScript returns the nft script that (re)creates table inet rodon:
//
//   - postrouting: one masquerade rule per pool family (traffic from the
//     pool leaving the node through anything but a sandbox veth);
//   - forward (policy drop): a packet from a sandbox veth that the egress
//     filter did not mark as passed (PassMark) is dropped, so that a veth
//     whose filter is gone carries nothing; a marked one is forwarded to
//     any interface but another sandbox veth (the uplink); into a sandbox
//     only replies (conntrack established or related) are forwarded.
//     Nothing else is: no new connection into a sandbox, and no forwarding
//     between the node's other interfaces (agentd turns forwarding on for
//     its sandboxes, not to make the node a router);
//   - input: a packet from a sandbox veth without PassMark is dropped.
//
// The table is declared (a no-op if it exists) and its chains flushed and
// refilled in one transaction, so running it again is harmless. Netlink
// (vishvananda/netlink) has no nftables API, hence the nft binary.
func natScript(c Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", NATTable)
	b.WriteString("\tchain postrouting {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\t}\n")
	b.WriteString("\tchain forward {\n\t\ttype filter hook forward priority filter - 10; policy drop;\n\t}\n")
	b.WriteString("\tchain input {\n\t\ttype filter hook input priority filter - 10; policy accept;\n\t}\n}\n")
	// Declaring a chain does not change the policy of one that exists.
	fmt.Fprintf(&b, "chain inet %s forward { policy drop; }\n", NATTable)
	for _, chain := range []string{"postrouting", "forward", "input"} {
		fmt.Fprintf(&b, "flush chain inet %s %s\n", NATTable, chain)
	}
	fmt.Fprintf(&b, "add rule inet %s postrouting ip saddr %s oifname != \"%s*\" masquerade comment \"rodon pool\"\n",
		NATTable, c.Pool4.Masked(), VethPrefix)
	fmt.Fprintf(&b, "add rule inet %s postrouting ip6 saddr %s oifname != \"%s*\" masquerade comment \"rodon pool\"\n",
		NATTable, c.Pool6.Masked(), VethPrefix)
	for _, chain := range []string{"forward", "input"} {
		fmt.Fprintf(&b, "add rule inet %s %s iifname \"%s*\" meta mark & %#08x != %#08x counter drop comment \"rodon: not passed by the egress filter\"\n",
			NATTable, chain, VethPrefix, passMask, PassMark)
	}
	fmt.Fprintf(&b, "add rule inet %s forward iifname \"%s*\" oifname != \"%s*\" accept comment \"rodon: sandbox to uplink\"\n",
		NATTable, VethPrefix, VethPrefix)
	fmt.Fprintf(&b, "add rule inet %s forward oifname \"%s*\" ct state established,related accept comment \"rodon: replies into a sandbox\"\n",
		NATTable, VethPrefix)
	fmt.Fprintf(&b, "add rule inet %s forward counter drop comment \"rodon: nothing else is forwarded\"\n", NATTable)
	return b.String()
}

// nft runs the nft binary in the node's namespace with script on stdin.
func (m *Manager) nft(ctx context.Context, script string, args ...string) (string, error) {
	var out string
	err := doInNS(m.hostNS, func() error {
		cmd := exec.CommandContext(ctx, m.cfg.Nft, args...)
		cmd.Stdin = strings.NewReader(script)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("run %s %s: %w: %s", m.cfg.Nft, strings.Join(args, " "),
				err, strings.TrimSpace(stderr.String()))
		}
		out = stdout.String()
		return nil
	})
	return out, err
}

// ensureNAT installs the masquerade rules of the pool in the node's
// namespace; after the first success it does nothing.
func (m *Manager) ensureNAT(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.natReady {
		return nil
	}
	if _, err := m.nft(ctx, natScript(m.cfg), "-f", "-"); err != nil {
		return fmt.Errorf("install masquerade rules (is nftables installed?): %w", err)
	}
	m.natReady = true
	return nil
}

// RemoveNAT deletes table inet rodon from the node's namespace. The rules
// are shared by every sandbox of the node: call it only when the node
// stops hosting sandboxes. A missing table is not an error.
func (m *Manager) RemoveNAT(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.natReady = false
	script := fmt.Sprintf("table inet %s\ndelete table inet %s\n", NATTable, NATTable)
	if _, err := m.nft(ctx, script, "-f", "-"); err != nil {
		return fmt.Errorf("remove masquerade rules: %w", err)
	}
	return nil
}
