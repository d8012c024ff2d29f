// Package benchfleet starts the daemons of a Rodon fleet on loopback for
// the benchmarks in bench/ (one scheduler member, one agentd and one
// gateway, from the binaries of `go build -o bin/ ./cmd/...`), is the
// benchmarks' client of the gateway's public API, and holds the start and
// the end they share (Certificates, SignIn, Finish).
//
// A fleet runs in one benchtls.Mode: mutual TLS between every component
// (and HTTPS on the gateway's public listener) or plaintext. Every daemon
// keeps its data in a temporary directory that Close removes, after
// stopping the daemons in reverse order and running `agentd cleanup` for
// the node: the caller lets every step end before Close.
package benchfleet

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"

	"github.com/rodon-compute/rodon/internal/benchtls"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// Options are what differs between the benchmarks' fleets.
type Options struct {
	// Prefix names the fleet's temporary directory and its node id
	// (PREFIX-PID-MODE); the benchmark's name.
	Prefix string
	// SchedulerArgs, AgentArgs and GatewayArgs are appended to the
	// arguments of `scheduler serve`, `agentd serve` and `gateway serve`.
	SchedulerArgs, AgentArgs, GatewayArgs []string
	// NoNode starts no agentd: a fleet of the scheduler (and its blob
	// store) and the gateway, for benchmarks of what needs no sandbox.
	NoNode bool
}

// NodeID is the node id of a fleet started with o in mode.
func (o Options) NodeID(mode benchtls.Mode) string {
	return fmt.Sprintf("%s-%d-%s", o.Prefix, os.Getpid(), mode.Short())
}

// Identities are the identities a fleet started with o in mode needs
// certificates for (benchtls.Mode.Issue, with host 127.0.0.1): those of
// its components and the operator. The gateway's pair is also its public
// certificate.
func (o Options) Identities(mode benchtls.Mode) []pki.Identity {
	return []pki.Identity{{Role: pki.RoleMember, Name: "m1"}, {Role: pki.RoleAgent, Name: o.NodeID(mode)}, GatewayID, Operator}
}

// Identities the fleet's clients act as.
var (
	Operator  = pki.Identity{Role: pki.RoleOperator, Name: "bench"}
	GatewayID = pki.Identity{Role: pki.RoleGateway, Name: "bench"}
)

// Fleet is one scheduler member, one agentd (none with Options.NoNode)
// and one gateway on loopback in one mode, all keeping their data under
// Dir.
type Fleet struct {
	Bin      string // directory of the binaries
	Mode     benchtls.Mode
	Dir      string
	NodeID   string
	AgentDir string // agentd's --data-dir
	SchedURL string // the member's base URL
	AgentURL string // agentd's base URL (streams, /metrics)
	Site     string // the gateway's public base URL
	// Sched is the operator's scheduler client.
	Sched *client.Client
	// Public is the TLS configuration of a client of the gateway's public
	// listener (nil in plaintext mode); Agent the HTTP client of the
	// agent's listener, as the operator, accepting only this node's agent.
	Public *tls.Config
	Agent  *http.Client

	procs []*Proc // in start order
}

// Start starts the fleet in mode with the binaries in binDir and waits
// until the node is ready and the gateway answers. With TLS every
// component has its certificate in mode.Dir (issued before for
// o.Identities) and the gateway's public listener serves HTTPS with its
// own; in plaintext every one has --plaintext. On error the caller still
// calls Close (when the Fleet is not nil).
func Start(ctx context.Context, binDir string, mode benchtls.Mode, o Options) (*Fleet, error) {
	dir, err := os.MkdirTemp("", o.Prefix+"-"+mode.Short())
	if err != nil {
		return nil, err
	}
	f := &Fleet{Bin: binDir, Mode: mode, Dir: dir, NodeID: o.NodeID(mode), AgentDir: filepath.Join(dir, "agent")}
	if o.NoNode {
		f.AgentDir = ""
	}
	addrs := make([]string, 4)
	for i := range addrs {
		if addrs[i], err = freeAddr(); err != nil {
			return f, err
		}
	}
	httpAddr, raftAddr, agentAddr, gwAddr := addrs[0], addrs[1], addrs[2], addrs[3]
	f.SchedURL, f.AgentURL, f.Site = mode.URL(httpAddr), mode.URL(agentAddr), mode.URL(gwAddr)
	for _, d := range []string{"sched", "agent", "gateway"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			return f, err
		}
	}
	if f.Public, err = mode.PublicTLS(); err != nil {
		return f, err
	}
	t, err := mode.Transport(Operator, pki.AllowIdentity(pki.Identity{Role: pki.RoleAgent, Name: f.NodeID}))
	if err != nil {
		return f, err
	}
	f.Agent = &http.Client{Transport: t}

	if err := f.start("scheduler", "scheduler", join([]string{"serve", "--node-id", "m1", "--data-dir", filepath.Join(dir, "sched"),
		"--raft-addr", raftAddr, "--http-addr", httpAddr, "--bootstrap", "--log-level", "warn"}, mode.SchedulerFlags(), o.SchedulerArgs)...); err != nil {
		return f, err
	}
	if f.Sched, err = mode.Client(f.SchedURL, Operator, client.Options{RetryFor: 30 * time.Second}); err != nil {
		return f, err
	}
	if err := WaitFor(ctx, 30*time.Second, "the scheduler to elect itself", func() bool {
		ms, err := f.Sched.Members(ctx)
		return err == nil && len(ms) == 1
	}); err != nil {
		return f, err
	}

	if err := f.startNode(ctx, agentAddr, o); err != nil {
		return f, err
	}

	gwArgs := []string{"serve", "--scheduler", f.SchedURL, "--name", GatewayID.Name, "--listen", gwAddr,
		"--data-dir", filepath.Join(dir, "gateway"), "--site", f.Site, "--owner-email", "", "--log-level", "warn"}
	if mode.TLS() {
		gwArgs = append(gwArgs, "--https-cert", pki.CertPath(mode.Dir, GatewayID), "--https-key", pki.KeyPath(mode.Dir, GatewayID))
	}
	if err := f.start("gateway", "gateway", join(gwArgs, mode.Flags(), o.GatewayArgs)...); err != nil {
		return f, err
	}
	hc := NewClient(f.Site, f.Public).hc
	err = WaitFor(ctx, 30*time.Second, "the gateway's /healthz", func() bool {
		resp, err := hc.Get(f.Site + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return f, err
}

// startNode starts agentd on agentAddr and waits until its node is
// ready; with o.NoNode it does nothing.
func (f *Fleet) startNode(ctx context.Context, agentAddr string, o Options) error {
	if o.NoNode {
		return nil
	}
	mode := f.Mode
	if err := f.start("agentd", "agentd", join([]string{"serve", "--scheduler", f.SchedURL, "--node-id", f.NodeID,
		"--data-dir", f.AgentDir, "--listen", agentAddr, "--heartbeat", "500ms", "--network", "none"}, mode.Flags(), o.AgentArgs)...); err != nil {
		return err
	}
	return WaitFor(ctx, 60*time.Second, "node "+f.NodeID+" to be ready", func() bool {
		n, err := f.Sched.Node(ctx, f.NodeID)
		return err == nil && n.State == "ready"
	})
}

// join is the arguments of a command line, in order, in a new slice.
func join(args ...[]string) []string {
	var all []string
	for _, a := range args {
		all = append(all, a...)
	}
	return all
}

func (f *Fleet) start(name, bin string, args ...string) error {
	p, err := StartProc(f.Dir, name, filepath.Join(f.Bin, bin), args...)
	if err != nil {
		return err
	}
	f.procs = append(f.procs, p)
	return nil
}

var passwordRE = regexp.MustCompile(`(?m)^password:\s+(\S+)`)

// Bootstrap creates the owner with `gateway bootstrap` and returns its
// one-time password.
func (f *Fleet) Bootstrap(ctx context.Context, email string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(f.Bin, "gateway"), append([]string{"bootstrap", "--scheduler", f.SchedURL,
		"--name", GatewayID.Name, "--email", email}, f.Mode.Flags()...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("gateway bootstrap: %w: %s", err, stderr.String())
	}
	m := passwordRE.FindSubmatch(stdout.Bytes())
	if m == nil {
		return "", fmt.Errorf("gateway bootstrap printed no password: %s %s", stdout.String(), stderr.String())
	}
	return string(m[1]), nil
}

// Close stops the gateway, then agentd (gracefully: the caller has let
// every step end), then the scheduler; destroys whatever sandbox of the
// node is left with `agentd cleanup`; and removes the fleet's directory.
// On failure it prints the end of each daemon's log to stderr first.
func (f *Fleet) Close(failed bool) error {
	if failed {
		for _, p := range f.procs {
			fmt.Fprintf(os.Stderr, "--- last lines of %s's log:\n%s\n", p.Name, p.Tail(20))
		}
	}
	var errs []error
	for i := len(f.procs) - 1; i >= 0; i-- {
		errs = append(errs, f.procs[i].Stop(60*time.Second))
	}
	if f.AgentDir != "" {
		cmd := exec.Command(filepath.Join(f.Bin, "agentd"), "cleanup", "--node-id", f.NodeID, "--network", "none", "--data-dir", f.AgentDir)
		if out, err := cmd.CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("agentd cleanup: %w: %s", err, out))
		}
	}
	if f.Dir != "" {
		errs = append(errs, os.RemoveAll(f.Dir))
	}
	return errors.Join(errs...)
}
