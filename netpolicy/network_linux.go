package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/vishvananda/netns"
)

// Manager makes and removes the networks of a node's sandboxes. Call order:
// NewManager, Sweep once at start-up (before any Setup), then Setup and
// Teardown per sandbox, concurrently for different IDs; Close last. The node
// side (host veths, forwarding, NAT) lives in Config.HostNS.
type Manager struct {
	cfg    Config
	logger *slog.Logger
	pool   *Pool
	hostNS netns.NsHandle // owned; closed by Close

	mu       sync.Mutex
	natReady bool // forwarding enabled and NAT installed in hostNS
}

// NewManager validates cfg and opens the node's namespace. It changes
// nothing on the node until the first Setup or Sweep.
func NewManager(cfg Config, logger *slog.Logger) (*Manager, error) {
	cfg = cfg.withDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	pool, err := NewPool(cfg.Pool4, cfg.Pool6, cfg.Link4Bits, cfg.Link6Bits)
	if err != nil {
		return nil, fmt.Errorf("sandbox address pool: %w", err)
	}
	if !filepath.IsAbs(cfg.NSDir) {
		return nil, fmt.Errorf("namespace directory %q: want an absolute path", cfg.NSDir)
	}
	var host netns.NsHandle
	if cfg.HostNS == "" {
		host, err = netns.Get()
	} else {
		host, err = netns.GetFromPath(cfg.HostNS)
	}
	if err != nil {
		return nil, fmt.Errorf("open node network namespace %q: %w", cfg.HostNS, err)
	}
	return &Manager{
		cfg:    cfg,
		logger: logger.With("component", "netpolicy"),
		pool:   pool,
		hostNS: host,
	}, nil
}

// Close releases the node namespace handle. It removes nothing.
func (m *Manager) Close() error { return m.hostNS.Close() }

// Pool returns the manager's address pool.
func (m *Manager) Pool() *Pool { return m.pool }

// Setup makes the network of sandbox id: namespace <NSDir>/rodon-<id>, a
// veth pair rv<hash> (node side) / eth0 (sandbox side) with addresses from
// the pool, lo and eth0 up, default routes via the node end, and, on first
// use, forwarding and the pool's masquerade rules in the node namespace.
// On error nothing made by this call is left. Setting up an ID that is
// already set up fails and leaves the existing network alone. It is Begin
// and Plumb in one.
func (m *Manager) Setup(ctx context.Context, id string) (*SandboxNet, error) {
	sn, err := m.Begin(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := m.Plumb(sn); err != nil {
		return nil, err
	}
	return sn, nil
}

// Begin makes only the namespace of sandbox id, empty, and leases its
// addresses: enough for a runtime to be told the namespace's path and
// create its sandbox in it while Plumb makes the links (runsc reads the
// namespace's links when the sandbox starts, not when it is created). Plumb
// or Teardown must follow. On error nothing is left.
func (m *Manager) Begin(ctx context.Context, id string) (*SandboxNet, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("set up network of sandbox %s: %w", id, err)
	}
	if err := m.ensureNode(ctx); err != nil {
		return nil, err
	}
	sn := &SandboxNet{
		ID:         id,
		NSPath:     filepath.Join(m.cfg.NSDir, NSName(id)),
		HostIfname: HostIfname(id),
		begun:      time.Now(),
	}
	if _, err := os.Lstat(sn.NSPath); err == nil {
		return nil, fmt.Errorf("set up network of sandbox %s: namespace %s already exists (tear it down first)", id, sn.NSPath)
	}
	lease, err := m.pool.Allocate(id)
	if err != nil {
		return nil, err
	}
	sn.Addr4, sn.Addr6, sn.Gateway4, sn.Gateway6 = lease.Addr4, lease.Addr6, lease.Gateway4, lease.Gateway6
	if err := createNS(sn.NSPath); err != nil {
		m.pool.Release(id)
		return nil, fmt.Errorf("set up network of sandbox %s: %w", id, err)
	}
	return sn, nil
}

// Plumb finishes the network Begin made: the veth pair, addresses and
// routes. On error it removes the namespace too, as Setup would have left
// nothing.
func (m *Manager) Plumb(sn *SandboxNet) error {
	if err := m.plumb(sn); err != nil {
		// plumb deleted the veth if it made one.
		cerr := removeNS(sn.NSPath)
		if cerr == nil {
			m.pool.Release(sn.ID)
		}
		return errors.Join(fmt.Errorf("set up network of sandbox %s: %w", sn.ID, err), cerr)
	}
	m.logger.Debug("sandbox network set up", "sandbox_id", sn.ID, "host_ifname", sn.HostIfname,
		"addr4", sn.Addr4, "addr6", sn.Addr6, "duration", time.Since(sn.begun))
	return nil
}

// Teardown removes the network of sn.ID: the node-side veth (which takes
// the peer with it), the namespace bind mount, and its pool link. Names are
// derived from sn.ID alone, so &SandboxNet{ID: id} tears down a network
// made before a restart. It is idempotent. The pool's masquerade rules are
// shared and stay (see RemoveNAT).
func (m *Manager) Teardown(ctx context.Context, sn *SandboxNet) error {
	if sn == nil {
		return nil
	}
	if err := validID(sn.ID); err != nil {
		return err
	}
	start := time.Now()
	err := errors.Join(
		m.deleteVeth(HostIfname(sn.ID)),
		removeNS(filepath.Join(m.cfg.NSDir, NSName(sn.ID))),
	)
	if err != nil {
		return fmt.Errorf("tear down network of sandbox %s: %w", sn.ID, err)
	}
	m.pool.Release(sn.ID)
	m.logger.Debug("sandbox network torn down", "sandbox_id", sn.ID, "duration", time.Since(start))
	return nil
}

// ensureNode enables forwarding and installs the NAT rules in the node
// namespace once.
func (m *Manager) ensureNode(ctx context.Context) error {
	m.mu.Lock()
	ready := m.natReady
	m.mu.Unlock()
	if ready {
		return nil
	}
	err := doInNS(m.hostNS, func() error {
		for _, p := range []string{"/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"} {
			if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil {
				return fmt.Errorf("enable forwarding in node namespace: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return m.ensureNAT(ctx)
}
