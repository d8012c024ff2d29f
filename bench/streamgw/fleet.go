package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/rodon-compute/rodon/internal/benchtls"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// proc is one daemon the benchmark started; its stdout and stderr go to
// a file in the fleet's directory.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startProc starts bin with args in a process group of its own (so that a
// Ctrl-C reaches only the benchmark, which then stops the daemons in
// order).
func startProc(dir, name, bin string, args ...string) (*proc, error) {
	logFile := filepath.Join(dir, name+".log")
	f, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logFile, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	return p, nil
}

// stop sends SIGTERM and waits up to grace for the process to exit, then
// kills it; it reports a kill as an error.
func (p *proc) stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %v of SIGTERM: killed", p.name, grace)
	}
}

// tail returns the last n lines of the process's log.
func (p *proc) tail(n int) string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// fleet is one scheduler member, one agentd and one gateway on loopback
// in one mode, all keeping their data under dir.
type fleet struct {
	bin      string
	mode     benchtls.Mode
	dir      string
	nodeID   string
	agentDir string
	schedURL string
	site     string
	// sched is the operator's scheduler client.
	sched *client.Client
	// public is the TLS configuration of a client of the gateway's public
	// listener (nil in plaintext mode); agent the HTTP client of the
	// agent's stream, as the operator, accepting only this node's agent.
	public *tls.Config
	agent  *http.Client

	procs []*proc // in start order
}

// Identities the fleet's clients act as.
var (
	operator  = pki.Identity{Role: pki.RoleOperator, Name: "bench"}
	gatewayID = pki.Identity{Role: pki.RoleGateway, Name: "bench"}
)

// fleetIDs are the identities a fleet needs certificates for: those of
// its components and the operator. The gateway's pair is also its public
// certificate (for 127.0.0.1).
func fleetIDs(mode benchtls.Mode) []pki.Identity {
	return []pki.Identity{{Role: pki.RoleMember, Name: "m1"}, {Role: pki.RoleAgent, Name: nodeID(mode)}, gatewayID, operator}
}

func nodeID(mode benchtls.Mode) string {
	return fmt.Sprintf("streamgw-%d-%s", os.Getpid(), mode.Short())
}

// startFleet starts the fleet in mode and waits until the node is ready
// and the gateway answers. With TLS every component has its certificate
// in mode.Dir and the gateway's public listener serves HTTPS with its
// own; in plaintext every one has --plaintext. On error the caller still
// calls close.
func startFleet(ctx context.Context, binDir string, mode benchtls.Mode) (*fleet, error) {
	dir, err := os.MkdirTemp("", "streamgw-"+mode.Short())
	if err != nil {
		return nil, err
	}
	f := &fleet{bin: binDir, mode: mode, dir: dir, nodeID: nodeID(mode), agentDir: filepath.Join(dir, "agent")}
	addrs := make([]string, 4)
	for i := range addrs {
		if addrs[i], err = freeAddr(); err != nil {
			return f, err
		}
	}
	httpAddr, raftAddr, agentAddr, gwAddr := addrs[0], addrs[1], addrs[2], addrs[3]
	f.schedURL, f.site = mode.URL(httpAddr), mode.URL(gwAddr)
	for _, d := range []string{"sched", "agent", "gateway"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			return f, err
		}
	}
	if f.public, err = mode.PublicTLS(); err != nil {
		return f, err
	}
	t, err := mode.Transport(operator, pki.AllowIdentity(pki.Identity{Role: pki.RoleAgent, Name: f.nodeID}))
	if err != nil {
		return f, err
	}
	f.agent = &http.Client{Transport: t}

	if err := f.start("scheduler", "scheduler", append([]string{"serve", "--node-id", "m1", "--data-dir", filepath.Join(dir, "sched"),
		"--raft-addr", raftAddr, "--http-addr", httpAddr, "--bootstrap", "--log-level", "warn"}, mode.SchedulerFlags()...)...); err != nil {
		return f, err
	}
	if f.sched, err = mode.Client(f.schedURL, operator, client.Options{RetryFor: 30 * time.Second}); err != nil {
		return f, err
	}
	if err := waitFor(ctx, 30*time.Second, "the scheduler to elect itself", func() bool {
		ms, err := f.sched.Members(ctx)
		return err == nil && len(ms) == 1
	}); err != nil {
		return f, err
	}

	if err := f.start("agentd", "agentd", append([]string{"serve", "--scheduler", f.schedURL, "--node-id", f.nodeID,
		"--data-dir", f.agentDir, "--listen", agentAddr, "--heartbeat", "500ms", "--network", "none"}, mode.Flags()...)...); err != nil {
		return f, err
	}
	if err := waitFor(ctx, 60*time.Second, "node "+f.nodeID+" to be ready", func() bool {
		n, err := f.sched.Node(ctx, f.nodeID)
		return err == nil && n.State == "ready"
	}); err != nil {
		return f, err
	}

	gwArgs := []string{"serve", "--scheduler", f.schedURL, "--name", gatewayID.Name, "--listen", gwAddr,
		"--data-dir", filepath.Join(dir, "gateway"), "--site", f.site, "--owner-email", "", "--log-level", "warn"}
	if mode.TLS() {
		gwArgs = append(gwArgs, "--https-cert", pki.CertPath(mode.Dir, gatewayID), "--https-key", pki.KeyPath(mode.Dir, gatewayID))
	}
	if err := f.start("gateway", "gateway", append(gwArgs, mode.Flags()...)...); err != nil {
		return f, err
	}
	hc := newGWClient(f.site, f.public).hc
	err = waitFor(ctx, 30*time.Second, "the gateway's /healthz", func() bool {
		resp, err := hc.Get(f.site + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return f, err
}

func (f *fleet) start(name, bin string, args ...string) error {
	p, err := startProc(f.dir, name, filepath.Join(f.bin, bin), args...)
	if err != nil {
		return err
	}
	f.procs = append(f.procs, p)
	return nil
}

var passwordRE = regexp.MustCompile(`(?m)^password:\s+(\S+)`)

// bootstrap creates the owner with `gateway bootstrap` and returns its
// one-time password.
func (f *fleet) bootstrap(ctx context.Context, email string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(f.bin, "gateway"), append([]string{"bootstrap", "--scheduler", f.schedURL,
		"--name", gatewayID.Name, "--email", email}, f.mode.Flags()...)...)
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

// close stops the gateway, then agentd (gracefully: the caller has let
// every step end), then the scheduler; destroys whatever sandbox of the
// node is left with `agentd cleanup`; and removes the fleet's directory.
// On failure it prints the end of each daemon's log to stderr first.
func (f *fleet) close(failed bool) error {
	if failed {
		for _, p := range f.procs {
			fmt.Fprintf(os.Stderr, "--- last lines of %s's log:\n%s\n", p.name, p.tail(20))
		}
	}
	var errs []error
	for i := len(f.procs) - 1; i >= 0; i-- {
		errs = append(errs, f.procs[i].stop(60*time.Second))
	}
	if f.agentDir != "" {
		cmd := exec.Command(filepath.Join(f.bin, "agentd"), "cleanup", "--node-id", f.nodeID, "--network", "none", "--data-dir", f.agentDir)
		if out, err := cmd.CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("agentd cleanup: %w: %s", err, out))
		}
	}
	if f.dir != "" {
		errs = append(errs, os.RemoveAll(f.dir))
	}
	return errors.Join(errs...)
}

// waitFor polls cond every 50 ms until it holds or d passes.
func waitFor(ctx context.Context, d time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", d, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}
